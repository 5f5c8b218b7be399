"""Transfer throughput through ``execute()`` against the raw throughput of the
same provider moving the same bytes with plain shell commands, in one run.

    python benchmarks/transfer.py [--sizes 1 10 100] [--repeat 3]

For each size it measures, each in a fresh child process (so peak RSS is the
operation's own):

* ``upload_files`` / ``download_file`` (sync) and their async twins;
* raw upload: the file cut into commands of ``max_command_bytes`` each,
  ``base64 -d >> file <<'EOF' ... EOF``: no verification, no atomicity;
* raw download: ``tail -c +N file | head -c LEN | base64 -w0`` per chunk of
  what fits in ``max_output_bytes``: no verification.

Throughput is the best of ``--repeat`` runs; ratios are against raw.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.files import file_sha256, write_random_file

MIB = 1024 * 1024
OPERATIONS = ["upload", "aupload", "raw_upload", "download", "adownload", "raw_download"]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Counting(LocalSandbox):
    """LocalSandbox that counts its round trips."""

    calls = 0

    def execute(self, command: str, *, timeout: float | None = None) -> Any:
        self.calls += 1
        return super().execute(command, timeout=timeout)


def raw_upload(sandbox: LocalSandbox, source: Path, remote: str) -> None:
    """The plain execute()-only way: base64 chunks appended with a heredoc."""
    chunk = (sandbox.limits.max_command_bytes - 200) // 4 * 3
    sandbox.execute(f": > {remote}")
    with source.open("rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            text = base64.b64encode(block).decode("ascii")
            response = sandbox.execute(f"base64 -d >> {remote} <<'EOF'\n{text}\nEOF\n")
            if response.exit_code != 0:
                raise RuntimeError(response.output)


def raw_download(sandbox: LocalSandbox, remote: str, dest: Path, size: int) -> None:
    """The plain execute()-only way: one base64 slice of the file per command."""
    chunk = (sandbox.limits.max_output_bytes - 1024) // 4 * 3
    with dest.open("wb") as f:
        for offset in range(0, max(size, 1), chunk):
            response = sandbox.execute(f"tail -c +{offset + 1} {remote} | head -c {chunk} | base64 -w0")
            f.write(base64.b64decode(response.output))


def run_one(operation: str, size: int) -> dict[str, float]:
    """One measurement, in this (fresh) process."""
    with tempfile.TemporaryDirectory() as work:
        root, client = Path(work, "sandbox"), Path(work, "client")
        root.mkdir()
        client.mkdir()
        sandbox = Counting(root)
        source = client / "source.bin"
        expected = write_random_file(source, size)
        if "download" in operation:
            os.link(source, root / "remote.bin")
        sandbox.upload_files([("warm-up", b"x")])  # imports and first-call costs
        sandbox.download_file("warm-up", client / "warm-up")
        sandbox.calls = 0
        baseline = peak_mib()
        started = time.perf_counter()
        back = client / "back.bin"
        if operation == "upload":
            [response] = sandbox.upload_files([("remote.bin", source)])
            assert response.error is None, response.error
        elif operation == "aupload":
            [response] = asyncio.run(sandbox.aupload_files([("remote.bin", source)]))
            assert response.error is None, response.error
        elif operation == "raw_upload":
            raw_upload(sandbox, source, "remote.bin")
        elif operation == "download":
            sandbox.download_file("remote.bin", back)
        elif operation == "adownload":
            asyncio.run(sandbox.adownload_file("remote.bin", back))
        else:
            raw_download(sandbox, "remote.bin", back, size)
        seconds = time.perf_counter() - started
        growth = peak_mib() - baseline
        landed = back if "download" in operation else root / "remote.bin"
        if file_sha256(landed) != expected:
            raise AssertionError(f"{operation}: the bytes did not arrive intact")
        return {"seconds": seconds, "rss_growth_mib": growth, "calls": sandbox.calls}


def measure(operation: str, size: int, repeat: int) -> dict[str, float]:
    """Best time of ``repeat`` fresh processes; the largest RSS growth seen."""
    runs = []
    for _ in range(repeat):
        done = subprocess.run(
            [sys.executable, __file__, "--one", operation, str(size)],
            check=True,
            capture_output=True,
            text=True,
        )
        runs.append(json.loads(done.stdout))
    best = min(runs, key=lambda run: run["seconds"])
    return {
        **best,
        "rss_growth_mib": max(run["rss_growth_mib"] for run in runs),
        "mib_per_s": size / MIB / best["seconds"],
    }


def table(results: dict[int, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| size | direction | sync MiB/s | async MiB/s | raw MiB/s | sync / raw | async / raw "
        "| round trips (sync / raw) | peak RSS growth MiB (sync / async / raw) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, ops in results.items():
        for direction in ("upload", "download"):
            sync, asyn, raw = ops[direction], ops["a" + direction], ops["raw_" + direction]
            lines.append(
                f"| {size // MIB} MiB | {direction} | {sync['mib_per_s']:.1f} | {asyn['mib_per_s']:.1f} "
                f"| {raw['mib_per_s']:.1f} | {sync['mib_per_s'] / raw['mib_per_s']:.2f} "
                f"| {asyn['mib_per_s'] / raw['mib_per_s']:.2f} | {sync['calls']:.0f} / {raw['calls']:.0f} "
                f"| {sync['rss_growth_mib']:.0f} / {asyn['rss_growth_mib']:.0f} "
                f"/ {raw['rss_growth_mib']:.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100], help="sizes in MiB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts")
    parser.add_argument("--one", nargs=2, metavar=("OPERATION", "BYTES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]))))
        return
    results: dict[int, dict[str, dict[str, float]]] = {}
    for size_mib in args.sizes:
        size = size_mib * MIB
        results[size] = {}
        for operation in OPERATIONS:
            results[size][operation] = measure(operation, size, args.repeat)
            print(f"{size_mib} MiB {operation}: {results[size][operation]}", file=sys.stderr, flush=True)
    sandbox = LocalSandbox(tempfile.gettempdir())
    print(
        f"LocalSandbox, max_command_bytes={sandbox.limits.max_command_bytes // 1024} KiB, "
        f"max_output_bytes={sandbox.limits.max_output_bytes // 1024} KiB, transfer_concurrency="
        f"{sandbox.limits.transfer_concurrency}; Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}\n"
    )
    print(table(results))


if __name__ == "__main__":
    main()
