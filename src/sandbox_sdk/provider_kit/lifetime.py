"""One lifetime model for every provider: ``ttl`` and ``idle_timeout``, in seconds.

``create(..., ttl=..., idle_timeout=...)`` means the same on every platform:

- ``ttl``: seconds from creation after which the sandbox is gone, used or not;
  ``None`` means no limit of ours (the platform's own maximum still applies).
- ``idle_timeout``: seconds without an operation after which the sandbox may
  be stopped or deleted; ``None`` means the provider's default
  (:data:`DEFAULT_IDLE_TIMEOUT` for the cloud providers, which bill while a
  sandbox runs; the host-state providers never expire by default).

A provider maps the two onto its platform's units and refuses a value its
platform cannot honour (:meth:`Lifetime.from_options` with the platform's
maxima) rather than silently clamping it. Platforms whose lifetime is a
deadline that activity does not move (E2B's ``timeout``) emulate an idle
timeout by pushing the deadline forward on use, at most once per
:class:`KeepAlive` interval, never a round trip per call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox_sdk import errors

#: The cloud providers' default idle timeout: an agent conversation with
#: pauses for thought and for its user, not the platforms' five minutes.
DEFAULT_IDLE_TIMEOUT = 3600.0


def check_seconds(name: str, value: object) -> float | None:
    """``value`` as a positive number of seconds (``None`` passes through), or a typed error."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise errors.InvalidArgumentError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def _within(name: str, seconds: float | None, maximum: float | None, platform: str) -> float | None:
    if seconds is not None and maximum is not None and seconds > maximum:
        raise errors.InvalidArgumentError(
            f"{name}={seconds:g} s is over {platform}'s maximum of {maximum:g} s"
        )
    return seconds


@dataclass(frozen=True)
class Lifetime:
    """A sandbox's requested lifetime, checked against its platform's limits."""

    ttl: float | None
    idle_timeout: float | None

    @classmethod
    def from_options(
        cls,
        options: dict[str, Any],
        *,
        platform: str,
        max_ttl: float | None = None,
        max_idle_timeout: float | None = None,
        default_idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    ) -> Lifetime:
        """Take ``ttl`` and ``idle_timeout`` out of ``options`` (create's keyword
        arguments), apply the default idle timeout, and refuse values over the
        platform's maxima (``platform`` names it in the error)."""
        ttl = _within("ttl", check_seconds("ttl", options.pop("ttl", None)), max_ttl, platform)
        idle = check_seconds("idle_timeout", options.pop("idle_timeout", None))
        if idle is None and default_idle_timeout is not None:  # a default is fitted, never refused
            idle = min(default_idle_timeout, max_idle_timeout or default_idle_timeout)
        return cls(ttl=ttl, idle_timeout=_within("idle_timeout", idle, max_idle_timeout, platform))


class KeepAlive:
    """Says when a handle's use should extend its sandbox's lifetime: at most
    once per ``interval`` seconds, so keep-alive never costs a round trip per call."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._next = float("-inf")

    def due(self) -> bool:
        """True (and the interval restarts) if the lifetime should be extended now."""
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.interval
        return True
