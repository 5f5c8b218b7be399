"""Files of every shape through providers that enforce a command-size limit and
an output cap, sync and async; batches; round-trip counts; progress."""

from __future__ import annotations

import io
import itertools
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import LimitedSandbox
from sandbox_sdk.testing.files import file_sha256, write_random_file

from .transfer_helpers import scratch_entries

#: The interpreter itself (``python3`` on the host may be a shim that needs more of ``PATH``).
PYTHON3 = subprocess.run(
    ["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=True
).stdout.strip()

CONTENTS = {
    "empty": b"",
    "one-byte": b"x",
    "every-byte": bytes(range(256)) * 3,
    "nuls": b"\0" * 1000 + b"a\0b",
    "invalid-utf8": b"\xff\xfe\xc3\x28 \xed\xa0\x80 \xf8\x88\x80\x80\x80\n",
    "heredoc-lookalike": b"SBX_0123456789abcdef\nEOF\n'EOF'\n@@SANDBOX_SDK x\n",
    "chunked-binary": bytes(range(256)) * 200 + b"\0\xff",
}


@pytest.mark.parametrize("name", list(CONTENTS))
def test_round_trip_through_small_limits(small: LimitedSandbox, root: Path, name: str) -> None:
    data = CONTENTS[name]
    [up] = small.upload_files([(f"in/{name}.bin", data)])
    assert up.error is None
    assert (root / "in" / f"{name}.bin").read_bytes() == data
    [response] = small.download_files([f"in/{name}.bin"])
    assert response.error is None
    assert response.content == data


@pytest.mark.parametrize("name", list(CONTENTS))
async def test_async_round_trip_through_small_limits(small: LimitedSandbox, root: Path, name: str) -> None:
    data = CONTENTS[name]
    [up] = await small.aupload_files([(f"in/{name}.bin", data)])
    assert up.error is None
    assert (root / "in" / f"{name}.bin").read_bytes() == data
    [down] = await small.adownload_files([f"in/{name}.bin"])
    assert down.content == data


def test_sources_bytes_path_and_file_object(small: LimitedSandbox, root: Path, tmp_path: Path) -> None:
    data = CONTENTS["chunked-binary"]
    local_file = tmp_path / "source.bin"
    local_file.write_bytes(data)
    stream = io.BytesIO(b"skipped" + data)
    stream.seek(7)
    responses = small.upload_files(
        [("a.bin", bytearray(data)), ("b.bin", local_file), ("c.bin", str(local_file)), ("d.bin", stream)]
    )
    assert [r.error for r in responses] == [None] * 4
    for name in "abcd":
        assert (root / f"{name}.bin").read_bytes() == data


class _Unseekable(io.RawIOBase):
    """A pipe-like stream: readable, size unknown, no seeking."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        return self._data.readinto(buffer)


def test_unseekable_source_is_staged(small: LimitedSandbox, root: Path) -> None:
    data = os.urandom(30_000)
    [response] = small.upload_files([("pipe.bin", io.BufferedReader(_Unseekable(data)))])
    assert response.error is None
    assert (root / "pipe.bin").read_bytes() == data


def test_download_file_to_path_and_file_object(small: LimitedSandbox, root: Path, tmp_path: Path) -> None:
    data = os.urandom(50_000)
    (root / "remote.bin").write_bytes(data)
    target = tmp_path / "out" / "local.bin"
    target.parent.mkdir()
    assert small.download_file("remote.bin", target) == len(data)
    assert target.read_bytes() == data
    sink = io.BytesIO()
    assert small.download_file("remote.bin", sink) == len(data)
    assert sink.getvalue() == data
    assert sorted(p.name for p in target.parent.iterdir()) == ["local.bin"]


def large_round_trip(sandbox: LimitedSandbox, root: Path, tmp_path: Path, size: int) -> None:
    source = tmp_path / "source.bin"
    expected = write_random_file(source, size)
    [response] = sandbox.upload_files([("big/file.bin", source)])
    assert response.error is None
    uploads = sandbox.executed
    assert uploads >= size // sandbox.limits.max_command_bytes, "the upload must have been chunked"
    assert file_sha256(root / "big" / "file.bin") == expected
    back = tmp_path / "back.bin"
    assert sandbox.download_file("big/file.bin", back) == size
    assert sandbox.executed - uploads >= size // sandbox.limits.max_output_bytes
    assert file_sha256(back) == expected


def test_10_mib_round_trip(large: LimitedSandbox, root: Path, tmp_path: Path) -> None:
    large_round_trip(large, root, tmp_path, 10 * 1024 * 1024)


@pytest.mark.slow
def test_100_mib_round_trip(large: LimitedSandbox, root: Path, tmp_path: Path) -> None:
    large_round_trip(large, root, tmp_path, 100 * 1024 * 1024)


async def test_async_10_mib_round_trip_keeps_chunks_in_flight(
    large: LimitedSandbox, root: Path, tmp_path: Path
) -> None:
    size = 10 * 1024 * 1024
    source = tmp_path / "source.bin"
    expected = write_random_file(source, size)
    [response] = await large.aupload_files([("big/file.bin", source)])
    assert response.error is None
    assert file_sha256(root / "big" / "file.bin") == expected
    assert large.max_in_flight > 1, "async uploads should overlap chunks"
    large.max_in_flight = 0
    back = tmp_path / "back.bin"
    assert await large.adownload_file("big/file.bin", back) == size
    assert file_sha256(back) == expected
    assert large.max_in_flight > 1, "async downloads should overlap chunks"


async def test_sync_and_async_give_identical_results(small: LimitedSandbox, root: Path) -> None:
    files = [(f"s/{name}", data) for name, data in CONTENTS.items()]
    files += [("s/missing-parent-is-a-file/x", b"x"), ("s", b"a directory")]
    (root / "s").mkdir()
    (root / "s" / "missing-parent-is-a-file").write_bytes(b"file")
    sync_up = small.upload_files(files)
    async_up = await small.aupload_files(files)
    assert sync_up == async_up
    assert [r.error is None for r in sync_up] == [True] * len(CONTENTS) + [False, False]
    paths = [path for path, _ in files] + ["s/nope"]
    sync_down = small.download_files(paths)
    async_down = await small.adownload_files(paths)
    assert sync_down == async_down
    assert [r.content for r in sync_down[: len(CONTENTS)]] == list(CONTENTS.values())


def test_mixed_batch_reports_each_item(small: LimitedSandbox, root: Path, tmp_path: Path) -> None:
    (root / "dir").mkdir()
    (root / "file").write_bytes(b"a file")
    big = os.urandom(40_000)
    files: list[tuple[str, bytes | Path]] = [
        ("ok/one.txt", b"one"),
        ("dir", b"cannot replace a directory"),
        ("bad\0name", b"nul in path"),
        ("", b"empty path"),
        ("ok/big.bin", big),
        ("file/child", b"parent is a file"),
        ("ok/from-missing-local", tmp_path / "does-not-exist"),
        ("ok/two.txt", b"two"),
    ]
    responses = small.upload_files(files)
    assert [r.path for r in responses] == [path for path, _ in files]
    errors_by_path = {r.path: r.error for r in responses}
    assert errors_by_path["ok/one.txt"] is None
    assert errors_by_path["ok/two.txt"] is None
    assert errors_by_path["ok/big.bin"] is None
    assert errors_by_path["dir"] == "is_directory"
    assert errors_by_path["bad\0name"] == "invalid_path"
    assert errors_by_path[""] == "invalid_path"
    assert errors_by_path["file/child"]
    assert "cannot read local source" in str(errors_by_path["ok/from-missing-local"])
    assert (root / "ok" / "big.bin").read_bytes() == big
    assert (root / "file").read_bytes() == b"a file"
    assert not (root / "ok" / "from-missing-local").exists()

    downloads = small.download_files(["ok/one.txt", "missing.txt", "dir", "bad\0name", "ok/big.bin"])
    assert [(r.content, r.error) for r in downloads] == [
        (b"one", None),
        (None, "file_not_found"),
        (None, "is_directory"),
        (None, "invalid_path"),
        (big, None),
    ]


def test_many_small_files_take_one_or_two_round_trips(local: LocalSandbox, root: Path) -> None:
    sandbox = LimitedSandbox(local, max_command_bytes=256 * 1024, max_output_bytes=256 * 1024)
    files = [(f"many/{i:03d}.txt", os.urandom(1024)) for i in range(100)]
    assert all(r.error is None for r in sandbox.upload_files(files))
    assert 1 <= sandbox.executed <= 2
    for path, data in files:
        assert (root / path).read_bytes() == data
    before = sandbox.executed
    downloads = sandbox.download_files([path for path, _ in files])
    assert 1 <= sandbox.executed - before <= 2
    assert [r.content for r in downloads] == [data for _, data in files]


def test_many_small_files_through_tight_limits(small: LimitedSandbox, root: Path) -> None:
    """Batches split at the budgets, and never overflow the output cap."""
    files = [(f"tight/{i:04d}", b"" if i % 2 else os.urandom(300)) for i in range(400)]
    assert all(r.error is None for r in small.upload_files(files))
    downloads = small.download_files([path for path, _ in files])
    assert [r.content for r in downloads] == [data for _, data in files]


def test_progress_reports_every_byte(small: LimitedSandbox, root: Path, tmp_path: Path) -> None:
    data = os.urandom(60_000)
    seen: list[tuple[int, int]] = []
    small.upload_files([("p.bin", data), ("q.bin", b"tiny")], progress=lambda d, t: seen.append((d, t)))
    assert len(seen) > 2
    assert seen[-1] == (len(data) + 4, len(data) + 4)
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))
    assert all(done <= total for done, total in seen)

    seen.clear()
    small.download_file("p.bin", tmp_path / "p.bin", progress=lambda d, t: seen.append((d, t)))
    assert len(seen) > 2
    assert seen[-1] == (len(data), len(data))
    assert all(a[0] < b[0] for a, b in itertools.pairwise(seen))

    seen.clear()
    small.download_files(["p.bin", "q.bin"], progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(data) + 4, len(data) + 4)


async def test_async_progress_matches_sync(small: LimitedSandbox, root: Path) -> None:
    data = os.urandom(60_000)
    seen: list[tuple[int, int]] = []
    await small.aupload_files([("p.bin", data)], progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(data), len(data))
    assert len(seen) > 2


def source_text(size: int) -> bytes:
    """``size`` bytes of this project's own source: data that compresses."""
    text = b"".join(p.read_bytes() for p in sorted(Path(__file__).parents[2].glob("src/sandbox_sdk/**/*.py")))
    return (text * (size // len(text) + 1))[:size]


def test_compressible_uploads_travel_compressed(local: LocalSandbox, root: Path) -> None:
    """Under a 96 KiB command cap a megabyte of source code needs half or less of
    the round trips random bytes need; each lands intact (SHA-256, size), and
    so does data that turns incompressible half-way."""
    limited = LimitedSandbox(local, max_command_bytes=96 * 1024, max_output_bytes=1024 * 1024)
    payloads = {
        "random": os.urandom(1 << 20),
        "source": source_text(1 << 20),
        "mixed": source_text(1 << 19) + os.urandom(1 << 19),
    }
    trips = {}
    for name, data in payloads.items():
        before = limited.executed
        [response] = limited.upload_files([(f"packed/{name}", data)])
        assert response.error is None
        trips[name] = limited.executed - before
        assert (root / "packed" / name).read_bytes() == data
    assert trips["source"] * 2 <= trips["random"]
    assert trips["source"] < trips["mixed"] < trips["random"]
    assert sorted(os.listdir(root / "packed")) == ["mixed", "random", "source"]  # no staging file left


class CommandLog(LocalSandbox):
    """Keeps every command it runs."""

    commands: list[str]

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        self.commands.append(command)
        return super().execute(command, timeout=timeout)


def logged(root: Path, scratch: Path, path: str | None = None) -> CommandLog:
    env = {"PATH": path} if path is not None else None
    sandbox = CommandLog(root, env=env)
    sandbox.commands = []
    sandbox.limits = replace(sandbox.limits, max_command_bytes=96 * 1024)
    sandbox.scratch_dir = str(scratch)
    return sandbox


def test_chunks_that_travel_as_they_are_are_appended_by_the_shell(root: Path, tmp_path: Path) -> None:
    """The first and the last chunk run the script; the ones between are
    ``base64 -d | dd`` through a link in the scratch directory, named by our
    token, whose quoted path is the only name in the command."""
    scratch = tmp_path / "scratch $(touch pwned) 'q'"
    scratch.mkdir()
    sandbox = logged(root, scratch)
    data = os.urandom(1 << 20)
    [response] = sandbox.upload_files([("dest dir/$(touch pwned).bin", data)])
    assert response.error is None
    assert (root / "dest dir" / "$(touch pwned).bin").read_bytes() == data
    appends = [c for c in sandbox.commands if c.startswith("base64 -d")]
    scripts = [c for c in sandbox.commands if "python3" in c]
    assert len(scripts) == 2 and len(appends) == len(sandbox.commands) - 2 >= 10
    assert all("dest dir" not in c for c in appends)
    assert scratch_entries(scratch) == [] and sorted(os.listdir(root / "dest dir")) == ["$(touch pwned).bin"]
    assert not (root / "pwned").exists() and not (tmp_path / "pwned").exists()
    sandbox.commands.clear()
    text = source_text(1 << 20)
    [response] = sandbox.upload_files([("source.py", text)])
    assert response.error is None and (root / "source.py").read_bytes() == text
    appends = [c for c in sandbox.commands if c.startswith("base64 -d")]
    assert len(appends) >= 2 and all("| gzip -dc |" in c for c in appends)  # compressed, by the shell too


def test_without_base64_every_chunk_runs_the_script(root: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("bash", "dd"):
        (bin_dir / program).symlink_to(shutil.which(program) or program)
    (bin_dir / "python3").symlink_to(PYTHON3)
    sandbox = logged(root, tmp_path, path=str(bin_dir))
    data = os.urandom(300_000)
    [response] = sandbox.upload_files([("plain.bin", data)])
    assert response.error is None and (root / "plain.bin").read_bytes() == data
    assert all("python3" in c for c in sandbox.commands) and len(sandbox.commands) >= 4


def test_a_failed_append_removes_the_staging_file_and_the_link(root: Path, tmp_path: Path) -> None:
    class Failing(CommandLog):
        def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
            if command.startswith("base64 -d") and len(self.commands) > 3:
                self.commands.append(command)
                return ExecuteResponse(output="dd: No space left on device\n", exit_code=1)
            return super().execute(command, timeout=timeout)

    sandbox = Failing(root)
    sandbox.commands = []
    sandbox.limits = replace(sandbox.limits, max_command_bytes=96 * 1024)
    sandbox.scratch_dir = str(tmp_path)
    [response] = sandbox.upload_files([("gone.bin", os.urandom(1 << 20))])
    assert response.error is not None and "appending a chunk failed" in response.error
    assert os.listdir(root) == [] and not any(n.endswith(".lnk") for n in os.listdir(tmp_path))
