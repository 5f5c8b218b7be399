"""``RecordingSandbox``: wraps a sandbox and records every ``execute()`` round trip."""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse


@dataclass(frozen=True)
class RoundTrip:
    command_bytes: int
    output_bytes: int


class RecordingSandbox(BaseSandbox):
    """Forwards to ``inner`` and keeps a :class:`RoundTrip` per call, to count
    the cost of operations (tests and benchmarks/round_trips.py)."""

    def __init__(self, inner: BaseSandbox) -> None:
        self.inner = inner
        self.limits = inner.limits
        self.trips: list[RoundTrip] = []

    @property
    def id(self) -> str:
        return self.inner.id

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        response = self.inner.execute(command, timeout=timeout)
        self.trips.append(RoundTrip(len(command.encode()), len(response.output.encode())))
        return response

    def reset(self) -> list[RoundTrip]:
        trips, self.trips = self.trips, []
        return trips
