"""``TransferContractTests``: what ``upload_files`` / ``download_files`` (and
their async twins, and ``download_file``) must guarantee, however a provider
implements them. docs/transfers.md explains each guarantee.

Providers with a native file API run it against their override; the
``execute()``-based implementation runs it too. Subclass it and supply a
``sandbox`` fixture (any scope)::

    class TestMyTransfers(TransferContractTests):
        @pytest.fixture(scope="class")
        @classmethod
        def sandbox(cls, provider: MyProvider) -> Iterator[BaseSandbox]:
            yield from provided_sandbox(provider, "conformance")

Every test works in its own fresh directory and checks results through the
sandbox's own API. Declare what the platform cannot do in ``known_gaps``
(``{"test_name": "reason"}``, or a :class:`~sandbox_sdk.testing.Gap` for a
check that raises something other than ``AssertionError``): each becomes a
strict xfail naming what the check raises.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import ClassVar

import anyio
import anyio.to_thread
import pytest

from sandbox_sdk import TransferFailedError, TransferResults
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.testing._suite import SandboxSuite
from sandbox_sdk.testing.sandbox_suite import HOSTILE_CONTENTS, HOSTILE_NAME_PARAMS


class _FailingReader(io.RawIOBase):
    """A stream that yields ``good`` bytes, then fails as a broken disk or pipe would."""

    def __init__(self, good: int) -> None:
        self._left = good

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._left <= 0:
            raise OSError(5, "injected read error")
        count = min(len(buffer), self._left)
        buffer[:count] = b"r" * count
        self._left -= count
        return count


class TransferContractTests(SandboxSuite):
    """The transfer contract: per-item results, error codes, atomicity, fidelity."""

    #: Size of the "large" file: several chunks for any execute()-based budget.
    large_bytes: ClassVar[int] = 5 * 1024 * 1024 + 17

    def names_in(self, sandbox: BaseSandbox, path: str) -> list[str]:
        """The names of the entries of a sandbox directory."""
        return [entry.name for entry in sandbox.ls(path)]

    # -- fidelity --------------------------------------------------------------------------

    def test_contents_round_trip_byte_for_byte(self, sandbox: BaseSandbox, workdir: str) -> None:
        files = [(self.p(workdir, f"f{i}.bin"), data) for i, data in enumerate(HOSTILE_CONTENTS)]
        assert [r.error for r in sandbox.upload_files(files)] == [None] * len(files)
        downloads = sandbox.download_files([path for path, _ in files])
        assert [(r.path, r.content, r.error) for r in downloads] == [
            (path, data, None) for path, data in files
        ]

    def test_large_file_round_trip(self, sandbox: BaseSandbox, workdir: str, tmp_path: Path) -> None:
        data = os.urandom(self.large_bytes)
        path = self.p(workdir, "large.bin")
        [response] = sandbox.upload_files([(path, data)])
        assert response.error is None
        [download] = sandbox.download_files([path])
        assert download.content is not None
        assert hashlib.sha256(download.content).digest() == hashlib.sha256(data).digest()
        local = tmp_path / "large.bin"
        assert sandbox.download_file(path, local) == len(data)
        assert local.read_bytes() == data

    @pytest.mark.parametrize("name", HOSTILE_NAME_PARAMS)
    def test_hostile_names_round_trip(self, sandbox: BaseSandbox, workdir: str, name: str | bytes) -> None:
        path = os.fsdecode(os.path.join(os.fsencode(workdir), os.fsencode(name)))
        [response] = sandbox.upload_files([(path, b"named")])
        assert response.error is None
        assert response.path == path
        assert self.names_in(sandbox, workdir) == [os.fsdecode(name)]
        [download] = sandbox.download_files([path])
        assert download.content == b"named"

    def test_sources_bytes_path_and_file_object(
        self, sandbox: BaseSandbox, workdir: str, tmp_path: Path
    ) -> None:
        data = bytes(range(256)) * 64
        local = tmp_path / "source.bin"
        local.write_bytes(data)
        stream = io.BytesIO(b"skip" + data)
        stream.seek(4)  # a file object is read from its position
        sources: list[tuple[str, bytes | bytearray | Path | str | io.BytesIO]] = [
            (self.p(workdir, "bytes"), data),
            (self.p(workdir, "bytearray"), bytearray(data)),
            (self.p(workdir, "path"), local),
            (self.p(workdir, "str-path"), str(local)),
            (self.p(workdir, "file-object"), stream),
        ]
        assert [r.error for r in sandbox.upload_files(sources)] == [None] * len(sources)
        assert [r.content for r in sandbox.download_files([p for p, _ in sources])] == [data] * len(sources)

    def test_upload_creates_parents_and_replaces_whole_files(
        self, sandbox: BaseSandbox, workdir: str
    ) -> None:
        path = self.p(workdir, "a", "b", "c.txt")
        assert sandbox.upload_files([(path, b"a much longer first version\n")])[0].error is None
        assert sandbox.upload_files([(path, b"short\n")])[0].error is None
        assert sandbox.download_files([path])[0].content == b"short\n"

    def test_replacing_keeps_permission_bits(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "tool.sh")
        sandbox.upload_files([(path, b"echo one\n")])
        sandbox.execute(f"chmod 750 {path}")
        sandbox.upload_files([(path, b"echo two\n")])
        assert sandbox.stat(path).mode == 0o750

    # -- per-item results and error codes -----------------------------------------------------

    def test_mixed_upload_batch_reports_each_item(
        self, sandbox: BaseSandbox, workdir: str, tmp_path: Path
    ) -> None:
        sandbox.mkdir(self.p(workdir, "dir"))
        sandbox.upload_files([(self.p(workdir, "file"), b"a file")])
        files: list[tuple[str, bytes | Path]] = [
            (self.p(workdir, "ok1"), b"one"),
            (self.p(workdir, "dir"), b"onto a directory"),
            (self.p(workdir, "bad\0name"), b"NUL in the path"),
            (self.p(workdir, "file", "child"), b"below a file"),
            (self.p(workdir, "from-missing"), tmp_path / "no-such-local-file"),
            (self.p(workdir, "ok2"), b"two"),
        ]
        responses = sandbox.upload_files(files)
        assert [r.path for r in responses] == [path for path, _ in files]
        codes = [r.error for r in responses]
        assert codes[0] is None and codes[5] is None
        assert codes[1] == "is_directory"
        assert codes[2] == "invalid_path"
        assert codes[3] and codes[4]
        assert sandbox.download_files([self.p(workdir, "ok1"), self.p(workdir, "ok2")])[1].content == b"two"
        assert sandbox.download_files([self.p(workdir, "file")])[0].content == b"a file"

    def test_results_raise_for_their_errors(self, sandbox: BaseSandbox, workdir: str) -> None:
        """Every provider's batches return :class:`~sandbox_sdk.TransferResults`;
        a str that names no local file says to pass bytes for content."""
        ok = self.p(workdir, "ok")
        uploaded = sandbox.upload_files([(ok, b"bytes"), (self.p(workdir, "text"), "print('hi')\n")])
        assert isinstance(uploaded, TransferResults)
        assert [r.path for r in uploaded.failed] == [self.p(workdir, "text")]
        assert "pass bytes for content" in (uploaded[1].error or "")
        with pytest.raises(TransferFailedError, match="1 of 2 items failed") as raised:
            uploaded.raise_for_errors()
        assert raised.value.failures == [uploaded[1]]
        fetched = sandbox.download_files([ok]).raise_for_errors()
        assert isinstance(fetched, TransferResults) and fetched[0].content == b"bytes"
        missing = sandbox.download_files([ok, self.p(workdir, "missing")])
        with pytest.raises(TransferFailedError, match=r"missing'.*: file_not_found"):
            missing.raise_for_errors()

    def test_mixed_download_batch_reports_each_item(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.mkdir(self.p(workdir, "dir"))
        sandbox.upload_files([(self.p(workdir, "here"), b"here")])
        paths = [
            self.p(workdir, "missing"),
            self.p(workdir, "here"),
            self.p(workdir, "dir"),
            self.p(workdir, "bad\0name"),
            self.p(workdir, "missing-dir", "x"),
        ]
        responses = sandbox.download_files(paths)
        assert [r.path for r in responses] == paths
        assert [(r.content, r.error) for r in responses] == [
            (None, "file_not_found"),
            (b"here", None),
            (None, "is_directory"),
            (None, "invalid_path"),
            (None, "file_not_found"),
        ]

    def test_empty_batches(self, sandbox: BaseSandbox) -> None:
        assert sandbox.upload_files([]) == []
        assert sandbox.download_files([]) == []

    # -- atomicity ------------------------------------------------------------------------------

    def test_failed_upload_leaves_destination_and_directory_as_they_were(
        self, sandbox: BaseSandbox, workdir: str
    ) -> None:
        path = self.p(workdir, "precious.bin")
        sandbox.upload_files([(path, b"original")])
        failing = io.BufferedReader(_FailingReader(self.large_bytes // 2))
        responses = sandbox.upload_files([(path, failing), (self.p(workdir, "other"), b"other")])
        assert responses[0].error, "a source that fails part-way must be reported"
        assert responses[1].error is None, "one failing item never stops the others"
        assert sandbox.download_files([path])[0].content == b"original"
        assert self.names_in(sandbox, workdir) == ["other", "precious.bin"]

    def test_failed_download_leaves_local_file_as_it_was(
        self, sandbox: BaseSandbox, workdir: str, tmp_path: Path
    ) -> None:
        local = tmp_path / "keep.txt"
        local.write_bytes(b"local original")
        with pytest.raises(FileNotFoundError):
            sandbox.download_file(self.p(workdir, "missing"), local)
        assert local.read_bytes() == b"local original"
        assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]

    # -- progress and async -----------------------------------------------------------------------

    def test_progress_reaches_the_total(self, sandbox: BaseSandbox, workdir: str) -> None:
        data = os.urandom(self.large_bytes)
        seen: list[tuple[int, int]] = []
        sandbox.upload_files([(self.p(workdir, "p"), data)], progress=lambda d, t: seen.append((d, t)))
        assert seen and seen[-1] == (len(data), len(data))
        assert all(done <= total for done, total in seen)
        seen.clear()
        sandbox.download_files([self.p(workdir, "p")], progress=lambda d, t: seen.append((d, t)))
        assert seen and seen[-1] == (len(data), len(data))

    async def test_async_twins_give_identical_results(self, sandbox: BaseSandbox, workdir: str) -> None:
        files = [(self.p(workdir, f"f{i}"), data) for i, data in enumerate(HOSTILE_CONTENTS)]
        files.append((self.p(workdir, "large"), os.urandom(self.large_bytes)))
        files.append((workdir, b"onto a directory"))
        # The sync twins run in a worker thread, as sync code must in an event loop.
        sync_up = await anyio.to_thread.run_sync(sandbox.upload_files, files)
        assert await sandbox.aupload_files(files) == sync_up
        paths = [path for path, _ in files] + [self.p(workdir, "missing")]
        sync_down = await anyio.to_thread.run_sync(sandbox.download_files, paths)
        async_down = await sandbox.adownload_files(paths)
        assert async_down == sync_down
        assert isinstance(async_down, TransferResults) and async_down.failed == sync_down.failed
        assert [r.content for r in async_down[: len(files) - 1]] == [data for _, data in files[:-1]]
