"""``BaseSandbox`` against deepagents 0.7's ``BaseSandbox`` over the same
local bash ``execute()``, interleaved in one process.

    PYTHONPATH=src .venv-da07/bin/python -m benchmarks.vs_deepagents \
        [--repeat 15] [--transfer-mib 50 200] [--latency-ms 20 80] [--rss] \
        [--only NAME...] [--concurrency N]

(``scripts/test-deepagents`` builds ``.venv-da07``; ``PYTHONPATH=src`` makes
this tree's ``sandbox_sdk`` the one measured.) Both sides run every command
through one :class:`Wire`: a ``LocalSandbox`` with the default budgets of a
remote provider (96 KiB commands, 1 MiB outputs), which counts round trips
and output bytes and can sleep before each command to stand for a cloud
round trip (``--latency-ms``). deepagents leaves ``upload_files`` and
``download_files`` to the provider; the reference does them the plain
``execute()``-only way (base64 heredocs appended to the file; base64 slices
of the file), as a provider without a file API would.

For each operation the two sides alternate (which goes first alternates
too) for ``--repeat`` rounds; the table shows medians and ours / reference
(< 1: we are faster), round trips and output bytes. Every transfer is checked
by SHA-256 outside the timing. ``--rss`` adds each side's client peak RSS
growth moving 200 MiB each way, each in a fresh process.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import os
import platform
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from deepagents.backends.protocol import ExecuteResponse as DaExecuteResponse
from deepagents.backends.protocol import FileDownloadResponse, FileUploadResponse
from deepagents.backends.sandbox import BaseSandbox as ReferenceBase

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.files import file_sha256, write_random_file

MIB = 1024 * 1024
COMMAND_BYTES = BaseSandbox.limits.max_command_bytes
OUTPUT_BYTES = BaseSandbox.limits.max_output_bytes
GREP_WORD = "needle_in_the_haystack"
#: Numbers for fresh file names, across rounds and tables.
FRESH = itertools.count()


@dataclass
class Wire:
    """The one ``execute()`` both sides use, with optional added latency."""

    root: Path
    latency: float = 0.0
    calls: int = 0
    output_bytes: int = 0
    local: LocalSandbox = field(init=False)

    def __post_init__(self) -> None:
        self.local = LocalSandbox(self.root, max_output_bytes=OUTPUT_BYTES)

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResponse:
        if self.latency:
            time.sleep(self.latency)
        response = self.local.execute(command, timeout=timeout)
        self.calls += 1
        self.output_bytes += len(response.output.encode("utf-8", "surrogateescape"))
        return response


class Ours(BaseSandbox):
    """sandbox_sdk over the wire, with ``BaseSandbox``'s default budgets."""

    def __init__(self, wire: Wire, concurrency: int = Limits().transfer_concurrency) -> None:
        self.wire = wire
        self.limits = replace(self.limits, transfer_concurrency=concurrency)

    @property
    def id(self) -> str:
        return "ours"

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return self.wire.execute(command, timeout)


class Reference(ReferenceBase):
    """deepagents' ``BaseSandbox`` over the wire; transfers by plain commands."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    @property
    def id(self) -> str:
        return "reference"

    def execute(self, command: str, *, timeout: int | None = None) -> DaExecuteResponse:
        response = self.wire.execute(command, timeout)
        return DaExecuteResponse(
            output=response.output, exit_code=response.exit_code, truncated=response.truncated
        )

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Each file as base64 heredocs appended to it, each command within the cap."""
        chunk = (COMMAND_BYTES - 512) // 4 * 3
        responses = []
        for path, data in files:
            quoted = shlex.quote(path)
            error: Any = None
            for offset in range(0, max(len(data), 1), chunk):
                text = base64.b64encode(data[offset : offset + chunk]).decode("ascii")
                redirect = ">" if offset == 0 else ">>"
                mkdir = f"mkdir -p -- $(dirname -- {quoted}) && " if offset == 0 else ""
                done = self.execute(f"{mkdir}base64 -d {redirect} {quoted} <<'EOF'\n{text}\nEOF\n")
                if done.exit_code != 0:
                    error = "permission_denied"
                    break
            responses.append(FileUploadResponse(path=path, error=error))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Each file's size, then base64 slices of it, each within the output cap."""
        chunk = (OUTPUT_BYTES - 1024) // 4 * 3
        responses = []
        for path in paths:
            quoted = shlex.quote(path)
            size = self.execute(f"stat -c %s -- {quoted}")
            if size.exit_code != 0:
                responses.append(FileDownloadResponse(path=path, error="file_not_found"))
                continue
            parts = []
            for offset in range(0, max(int(size.output), 1), chunk):
                slice_ = self.execute(f"tail -c +{offset + 1} -- {quoted} | head -c {chunk} | base64 -w0")
                parts.append(base64.b64decode(slice_.output))
            responses.append(FileDownloadResponse(path=path, content=b"".join(parts)))
        return responses


# -- the fixture tree --------------------------------------------------------------


def source_code(size: int) -> bytes:
    """``size`` bytes of this project's own Python source, repeated: a
    compressible payload, as uploaded code is."""
    text = b"".join(p.read_bytes() for p in sorted(Path(__file__).parents[1].glob("src/sandbox_sdk/**/*.py")))
    return (text * (size // len(text) + 1))[:size]


def build_tree(root: Path) -> None:
    lines = "".join(
        f"line {i}: the quick brown fox jumps over the lazy dog {i * 7919}\n" for i in range(2000)
    )
    (root / "read.txt").write_text(lines)
    for side in ("ours", "reference"):
        (root / f"edit-{side}.txt").write_text(lines[:8000] + "alpha marker\n" + lines[8000:16000])
    (root / "ls").mkdir()
    for i in range(1000):
        (root / "ls" / f"entry_{i:04d}.txt").write_bytes(b"x" * (i % 97))
    for d in range(100):
        folder = root / "glob" / f"pkg_{d:02d}"
        folder.mkdir(parents=True)
        for i in range(100):
            (folder / f"module_{i:03d}.py").write_bytes(b"")
    rng = random.Random(17)
    words = ["alpha", "beta", "gamma", "delta", "sandbox", "kernel", "window", "chunk", "frame"]
    (root / "grep").mkdir()
    for i in range(500):
        body = [" ".join(rng.choice(words) for _ in range(10)) for _ in range(200)]
        if i % 10 == 0:
            body[i % 200] += " " + GREP_WORD
        (root / "grep" / f"file_{i:03d}.txt").write_text("\n".join(body) + "\n")
    (root / "up").mkdir()
    (root / "small").mkdir()
    for i in range(100):
        (root / "small" / f"f{i:03d}").write_bytes(os.urandom(1024))


# -- operations ----------------------------------------------------------------------


@dataclass
class Side:
    name: str
    sandbox: Any
    wire: Wire
    edits: int = 0  # the edit operation swaps two markers back and forth


@dataclass
class Sample:
    seconds: list[float] = field(default_factory=list)
    calls: int = 0
    output_bytes: int = 0


#: An operation: given a side and the round's index, do it; return a check to run untimed.
Op = Callable[[Side, int], Callable[[], None] | None]


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def op_write(side: Side, i: int) -> None:
    path = f"w/{side.name}-{next(FRESH)}.txt"
    if side.name == "ours":
        side.sandbox.write(path, "x" * 1024)
    else:
        result = side.sandbox.write(str(side.wire.root / path), "x" * 1024)
        expect(result.error is None, str(result.error))


def op_read(side: Side, i: int) -> None:
    if side.name == "ours":
        text = side.sandbox.read("read.txt", limit=2000).content
    else:
        result = side.sandbox.read(str(side.wire.root / "read.txt"), limit=2000)
        expect(result.error is None, str(result.error))
        text = result.file_data["content"]
    expect(text.count("\n") >= 1999, "read: a short page")


def op_edit(side: Side, i: int) -> None:
    old, new = ("alpha marker", "omega marker") if side.edits % 2 == 0 else ("omega marker", "alpha marker")
    side.edits += 1
    path = f"edit-{side.name}.txt"
    if side.name == "ours":
        side.sandbox.edit(path, old, new)
    else:
        result = side.sandbox.edit(str(side.wire.root / path), old, new)
        expect(result.error is None, str(result.error))


def op_glob(side: Side, i: int) -> None:
    if side.name == "ours":
        found = len(side.sandbox.glob("**/*.py", "glob").matches)
    else:
        found = len(side.sandbox.glob("**/*.py", str(side.wire.root / "glob")).matches)
    expect(found == 10_000, f"glob: {found} matches")


def op_ls(side: Side, i: int) -> None:
    if side.name == "ours":
        found = len(side.sandbox.ls("ls"))
    else:
        found = len(side.sandbox.ls(str(side.wire.root / "ls")).entries)
    expect(found == 1000, f"ls: {found} entries")


def op_grep(side: Side, i: int) -> None:
    if side.name == "ours":
        found = len(side.sandbox.grep(GREP_WORD, "grep").matches)
    else:
        found = len(side.sandbox.grep(GREP_WORD, str(side.wire.root / "grep")).matches)
    expect(found == 50, f"grep: {found} matches")


def op_small_up(side: Side, i: int) -> Callable[[], None]:
    batch = next(FRESH)
    files = [(f"up/s{batch}-{side.name}-{n:03d}", (side.name + str(n)).encode() * 100) for n in range(100)]
    if side.name == "ours":
        responses = side.sandbox.upload_files(files)
    else:
        responses = side.sandbox.upload_files([(str(side.wire.root / p), d) for p, d in files])
    expect(all(r.error is None for r in responses), "small uploads failed")

    def check() -> None:
        for path, data in files:
            expect((side.wire.root / path).read_bytes() == data, f"{path} did not arrive intact")

    return check


def op_small_down(side: Side, i: int) -> Callable[[], None]:
    paths = [f"small/f{n:03d}" for n in range(100)]
    if side.name == "ours":
        responses = side.sandbox.download_files(paths)
    else:
        responses = side.sandbox.download_files([str(side.wire.root / p) for p in paths])

    def check() -> None:
        for path, response in zip(paths, responses, strict=True):
            expect(
                response.content == (side.wire.root / path).read_bytes(), f"{path} did not come back intact"
            )

    return check


def upload_op(payload: bytes) -> Op:
    digest = hashlib.sha256(payload).hexdigest()

    def op(side: Side, i: int) -> Callable[[], None]:
        path = side.wire.root / "up" / f"big-{side.name}"
        if side.name == "ours":
            [response] = side.sandbox.upload_files([("up/big-ours", payload)])
        else:
            [response] = side.sandbox.upload_files([(str(path), payload)])
        expect(response.error is None, str(response.error))
        return lambda: expect(file_sha256(path) == digest, "upload did not arrive intact")

    return op


def download_op(name: str, digest: str) -> Op:
    def op(side: Side, i: int) -> Callable[[], None]:
        if side.name == "ours":
            content = side.sandbox.download_files([name])[0].content
        else:
            content = side.sandbox.download_files([str(side.wire.root / name)])[0].content
        return lambda: expect(hashlib.sha256(content or b"").hexdigest() == digest, "download not intact")

    return op


def measure(sides: list[Side], op: Op, repeat: int) -> dict[str, Sample]:
    """``repeat`` interleaved rounds (which side goes first alternates); the
    round trips and output bytes of one call."""
    samples = {side.name: Sample() for side in sides}
    op(sides[0], -1)  # warm-up: imports, first-call costs, caches
    op(sides[1], -1)
    for i in range(repeat):
        for side in sides if i % 2 == 0 else reversed(sides):
            calls, output = side.wire.calls, side.wire.output_bytes
            started = time.perf_counter()
            check = op(side, i)
            samples[side.name].seconds.append(time.perf_counter() - started)
            samples[side.name].calls = side.wire.calls - calls
            samples[side.name].output_bytes = side.wire.output_bytes - output
            if check is not None:
                check()
    return samples


def row(name: str, samples: dict[str, Sample]) -> str:
    ours, ref = samples["ours"], samples["reference"]
    mine, theirs = statistics.median(ours.seconds), statistics.median(ref.seconds)
    return (
        f"| {name} | {mine * 1000:,.1f} | {theirs * 1000:,.1f} | **{mine / theirs:.2f}** "
        f"| {ours.calls:,} / {ref.calls:,} | {ours.output_bytes:,} / {ref.output_bytes:,} |"
    )


def run_table(
    root: Path, latency_ms: float, repeat: int, transfer_mib: list[int], only: list[str], concurrency: int
) -> None:
    wires = {name: Wire(root, latency_ms / 1000) for name in ("ours", "reference")}
    sides = [
        Side("ours", Ours(wires["ours"], concurrency), wires["ours"]),
        Side("reference", Reference(wires["reference"]), wires["reference"]),
    ]
    operations: list[tuple[str, Op, int]] = [
        ("write 1 KiB", op_write, repeat),
        ("read 2,000 lines", op_read, repeat),
        ("edit", op_edit, repeat),
        ("glob `**/*.py`, 10k files", op_glob, repeat),
        ("ls, 1,000 entries", op_ls, repeat),
        ("grep literal, 500 files", op_grep, repeat),
        ("100 x 1 KiB files up", op_small_up, max(3, repeat // 3)),
        ("100 x 1 KiB files down", op_small_down, max(3, repeat // 3)),
    ]
    for mib in transfer_mib:
        rounds = 3 if mib <= 50 else 1
        payloads = {"random": random.Random(mib).randbytes(mib * MIB), "source code": source_code(mib * MIB)}
        for kind, payload in payloads.items():
            operations.append((f"upload {mib} MiB, {kind}", upload_op(payload), rounds))
        name = f"down-{mib}.bin"
        digest = write_random_file(root / name, mib * MIB)
        operations.append((f"download {mib} MiB", download_op(name, digest), rounds))
    print(f"\n### {latency_ms:g} ms added per `execute()`\n")
    print("| operation | ours ms | reference ms | ours / ref | round trips | output bytes (ours / ref) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, op, rounds in operations:
        if only and not any(word in name for word in only):
            continue
        print(row(name, measure(sides, op, rounds)), flush=True)


# -- peak RSS -----------------------------------------------------------------------


def rss_one(side_name: str, direction: str, mib: int) -> float:
    """Peak RSS growth (MiB) of moving ``mib`` MiB one way, in this fresh process."""
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        wire = Wire(root)
        sandbox: Any = Ours(wire) if side_name == "ours" else Reference(wire)
        source = root / "source.bin"
        digest = write_random_file(source, mib * MIB)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if direction == "upload" and side_name == "ours":
            [response] = sandbox.upload_files([("landed.bin", source)])  # streamed from the file
            expect(response.error is None, str(response.error))
        elif direction == "upload":
            [response] = sandbox.upload_files([(str(root / "landed.bin"), source.read_bytes())])
            expect(response.error is None, str(response.error))
        elif side_name == "ours":
            sandbox.download_file("source.bin", root / "landed.bin")  # streamed to the file
        else:
            (root / "landed.bin").write_bytes(sandbox.download_files([str(source)])[0].content)
        growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        expect(file_sha256(root / "landed.bin") == digest, f"{side_name} {direction}: not intact")
        return growth


def rss_table(mib: int) -> None:
    print(f"\n### Client peak RSS growth, {mib} MiB (MiB, each in a fresh process)\n")
    print("| direction | ours | reference |")
    print("|---|---:|---:|")
    for direction in ("upload", "download"):
        cells = []
        for side_name in ("ours", "reference"):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.vs_deepagents",
                    "--rss-one",
                    side_name,
                    direction,
                    str(mib),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            cells.append(f"{float(done.stdout):.0f}")
        print(f"| {direction} | {cells[0]} | {cells[1]} |", flush=True)


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="rounds per small operation")
    parser.add_argument("--transfer-mib", type=int, nargs="*", default=[50], help="large transfer sizes")
    parser.add_argument(
        "--latency-ms", type=float, nargs="*", default=[], help="extra runs with this latency"
    )
    parser.add_argument("--latency-transfer-mib", type=int, nargs="*", default=[10])
    parser.add_argument("--rss", action="store_true", help="client peak RSS for 200 MiB each way")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=Limits().transfer_concurrency,
        help="our transfer_concurrency",
    )
    parser.add_argument("--only", nargs="*", default=[], help="operations whose name has one of these")
    parser.add_argument("--rss-one", nargs=3, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.rss_one:
        side_name, direction, mib = options.rss_one
        print(rss_one(side_name, direction, int(mib)))
        return
    import deepagents

    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}, "
        f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"load average {os.getloadavg()[0]:.1f}, Python {platform.python_version()}, "
        f"deepagents {deepagents.__version__}; medians of {options.repeat} rounds; "
        f"our transfer_concurrency {options.concurrency}"
    )
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        build_tree(root)
        run_table(root, 0, options.repeat, options.transfer_mib, options.only, options.concurrency)
        for latency in options.latency_ms:
            sizes = options.latency_transfer_mib
            run_table(root, latency, options.repeat, sizes, options.only, options.concurrency)
    if options.rss:
        rss_table(200)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
