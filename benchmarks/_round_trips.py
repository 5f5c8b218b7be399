"""Round trips timed sandbox by sandbox, round by round, so drift in the
machine's load hits every sandbox of a benchmark alike."""

from __future__ import annotations

import time
from collections.abc import Callable

from sandbox_sdk.base import BaseSandbox

#: What each benchmark comparing providers times: a bare command, and the
#: smallest file operation (one script round trip).
OPERATIONS: dict[str, Callable[[BaseSandbox], object]] = {
    'execute("true")': lambda sandbox: sandbox.execute("true"),
    "stat": lambda sandbox: sandbox.stat("."),
}


def round_trips(
    sandboxes: dict[str, BaseSandbox], rounds: int, warmup: int
) -> dict[tuple[str, str], list[float]]:
    """Milliseconds of each of :data:`OPERATIONS` on each sandbox, by
    (operation, sandbox name), after ``warmup`` untimed rounds."""
    samples: dict[tuple[str, str], list[float]] = {}
    for operation, run in OPERATIONS.items():
        for _ in range(warmup):
            for sandbox in sandboxes.values():
                run(sandbox)
        for _ in range(rounds):
            for name, sandbox in sandboxes.items():
                started = time.perf_counter()
                run(sandbox)
                samples.setdefault((operation, name), []).append((time.perf_counter() - started) * 1000)
    return samples
