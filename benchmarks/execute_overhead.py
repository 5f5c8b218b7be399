"""What isolation costs: one ``execute("true")`` under bubblewrap against the
unisolated local provider, measured in the same run on the same machine.

Run: ``.venv/bin/python -m benchmarks.execute_overhead [rounds]``. The two
providers alternate round by round, so drift in machine load hits both
alike. Also times ``stat`` (a file operation: one ``python3`` script run
inside) against a bare ``python3 -I -S -c pass``, the floor of any such
operation, in the same run.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.local import LocalProvider

WARMUP = 10


def measure(sandboxes: dict[str, BaseSandbox], rounds: int) -> dict[tuple[str, str], list[float]]:
    operations: dict[str, Callable[[BaseSandbox], object]] = {
        'execute("true")': lambda sandbox: sandbox.execute("true"),
        "python3 -I -S -c pass": lambda sandbox: sandbox.execute("python3 -I -S -c pass"),
        "stat": lambda sandbox: sandbox.stat("."),
    }
    samples: dict[tuple[str, str], list[float]] = {}
    for operation, run in operations.items():
        for _ in range(WARMUP):
            for sandbox in sandboxes.values():
                run(sandbox)
        for _ in range(rounds):
            for name, sandbox in sandboxes.items():
                started = time.perf_counter()
                run(sandbox)
                samples.setdefault((operation, name), []).append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as state:
        sandboxes: dict[str, BaseSandbox] = {
            "local": LocalProvider(Path(state, "local")).create(),
            "bwrap": BwrapProvider(Path(state, "bwrap")).create(),
        }
        samples = measure(sandboxes, rounds)
    print(f"{rounds} rounds each, milliseconds per call\n")
    print("| operation | provider | median | mean | p90 | bwrap / local (median) |")
    print("|---|---|---:|---:|---:|---:|")
    for (operation, name), values in samples.items():
        median, mean = statistics.median(values), statistics.fmean(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        ratio = median / statistics.median(samples[(operation, "local")])
        shown = f"{ratio:.1f}x" if name == "bwrap" else ""
        print(f"| {operation} | {name} | {median:.2f} | {mean:.2f} | {p90:.2f} | {shown} |")


if __name__ == "__main__":
    main()
