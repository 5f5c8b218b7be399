"""What isolation costs: one ``execute("true")`` under bubblewrap against the
unisolated local provider, measured in the same run on the same machine.

Run: ``.venv/bin/python -m benchmarks.execute_overhead [rounds]``. The two
providers alternate round by round, so drift in machine load hits both
alike. A bwrap command goes to its sandbox's long-lived jail (a connection
to the jail's server, which starts ``bash``); starting the jail, paid once
per sandbox, is timed separately (``create()``, whose health check is the
jail's first command, against the local provider's). Also times ``stat`` (a
file operation: one ``python3`` script run inside) against a bare
``python3 -I -S -c pass``, the floor of any such operation, in the same run.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider_kit import HostStateProvider
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


#: Sandboxes created (and deleted) per provider to time ``create()``.
CREATES = 20


def measure_create(providers: dict[str, HostStateProvider[Any]]) -> dict[tuple[str, str], list[float]]:
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(CREATES):
        for name, provider in providers.items():
            started = time.perf_counter()
            sandbox = provider.create()
            samples.setdefault(("create()", name), []).append((time.perf_counter() - started) * 1000)
            provider.delete(sandbox.id)
    return samples


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{when}, load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as state:
        providers: dict[str, HostStateProvider[Any]] = {
            "local": LocalProvider(Path(state, "local")),
            "bwrap": BwrapProvider(Path(state, "bwrap")),
        }
        sandboxes: dict[str, BaseSandbox] = {name: provider.create() for name, provider in providers.items()}
        try:
            samples = measure(sandboxes, rounds) | measure_create(providers)
        finally:
            for name, sandbox in sandboxes.items():
                providers[name].delete(sandbox.id)
    print(f"{rounds} rounds each ({CREATES} for create), milliseconds per call\n")
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
