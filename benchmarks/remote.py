"""What the remote provider costs over the local one, on loopback, in one run.

    .venv/bin/python -m benchmarks.remote [--rounds 200] [--mib 64] [--repeat 3]

Three ways to one kind of sandbox (the local backend, so the figures are the
transport's, not a jail's): the local provider in this process, a runner
taken directly (``ws://``), and the same through a coordinator. Runner and
coordinator are real processes on 127.0.0.1.

* Round trip: ``execute("true")`` and ``stat``, the three alternating round by
  round so drift in machine load hits all alike; median, p90 and the ratio of
  medians against local.
* Throughput: ``upload_files`` and ``download_files`` of one ``--mib`` MiB
  file, best of ``--repeat``; MiB/s and the ratio against local.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from benchmarks._round_trips import round_trips
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.local import LocalProvider
from sandbox_sdk.providers.remote import RemoteProvider
from tests.providers.remote.support import coordinated_runner, listening_runner, new_token

WARMUP = 10
MIB = 1024 * 1024


def sandboxes(stack: ExitStack, directory: Path) -> dict[str, BaseSandbox]:
    token = new_token()
    runner = stack.enter_context(listening_runner(directory / "direct", token))
    _, _, relayed_url = stack.enter_context(coordinated_runner(directory / "relayed", token))
    remote = {
        "remote": stack.enter_context(RemoteProvider(runner.url, token)),
        "remote via coordinator": stack.enter_context(RemoteProvider(relayed_url, token)),
    }
    made: dict[str, BaseSandbox] = {"local": LocalProvider(directory / "local").create()}
    made.update({name: provider.create() for name, provider in remote.items()})
    return made


def throughput(made: dict[str, BaseSandbox], size: int, repeat: int) -> Iterator[tuple[str, str, float]]:
    data = os.urandom(size)
    for name, sandbox in made.items():
        best = {"upload_files": float("inf"), "download_files": float("inf")}
        for _ in range(repeat):
            started = time.perf_counter()
            [upload] = sandbox.upload_files([("bench.bin", data)])
            best["upload_files"] = min(best["upload_files"], time.perf_counter() - started)
            started = time.perf_counter()
            [download] = sandbox.download_files(["bench.bin"])
            best["download_files"] = min(best["download_files"], time.perf_counter() - started)
            assert upload.error is None and download.content == data
        for operation, seconds in best.items():
            yield operation, name, size / MIB / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, ExitStack() as stack:
        made = sandboxes(stack, Path(directory))
        samples = round_trips(made, args.rounds, WARMUP)
        rates = list(throughput(made, args.mib * MIB, args.repeat))
    print(f"Round trips: {args.rounds} rounds each, milliseconds per call\n")
    print("| operation | provider | median | p90 | / local (median) |")
    print("|---|---|---:|---:|---:|")
    for (operation, name), values in samples.items():
        median = statistics.median(values)
        ratio = median / statistics.median(samples[(operation, "local")])
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"| {operation} | {name} | {median:.2f} | {p90:.2f} | {ratio:.2f}x |")
    print(f"\nThroughput: one {args.mib} MiB file, best of {args.repeat}, MiB/s\n")
    print("| operation | provider | MiB/s | / local |")
    print("|---|---|---:|---:|")
    local = {operation: rate for operation, name, rate in rates if name == "local"}
    for operation, name, rate in rates:
        print(f"| {operation} | {name} | {rate:.0f} | {rate / local[operation]:.2f}x |")


if __name__ == "__main__":
    main()
