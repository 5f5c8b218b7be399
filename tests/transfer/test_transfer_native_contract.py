"""``TransferContractTests`` on native overrides: one that keeps the contract
passes the whole kit, and one that writes in place is caught by it.

``LocalSandbox``'s files are the host's, so host file I/O is its "native file
API": the override below is built the way a cloud provider's would be, with
``transfer_error`` and ``open_upload_source``.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import anyio.to_thread
import pytest

from sandbox_sdk import errors
from sandbox_sdk.models import FileDownloadResponse, FileUploadResponse
from sandbox_sdk.provider_kit import check_path
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.transfer_suite import TransferContractTests
from sandbox_sdk.transfer import Progress, TransferResults, UploadSource, open_upload_source, transfer_error

_TYPED: dict[int, type[errors.SandboxError]] = {
    errno.ENOENT: errors.SandboxFileNotFoundError,
    errno.EISDIR: errors.SandboxIsADirectoryError,
    errno.ENOTDIR: errors.SandboxNotADirectoryError,
    errno.EACCES: errors.SandboxPermissionError,
    errno.EPERM: errors.SandboxPermissionError,
}


def _typed(exc: OSError, path: str) -> errors.SandboxError:
    return _TYPED.get(exc.errno or 0, errors.SandboxError)(exc.strerror or str(exc), path=path)


class NativeLocalSandbox(LocalSandbox):
    """Transfers through host file I/O, keeping the contract: temp file and rename."""

    def _target(self, path: str) -> Path:
        check_path(path)  # empty or NUL: invalid_path before touching anything
        return self.root_dir / os.fsdecode(path)

    def _write(self, target: Path, source: UploadSource) -> None:
        if target.is_dir():
            raise errors.SandboxIsADirectoryError("is a directory", path=str(target))
        opened = open_upload_source(source)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:200]}.", dir=target.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(opened.stream, out, 1 << 20)
                    out.flush()
                    os.fsync(out.fileno())
                mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_umask()
                os.chmod(tmp, mode)
                os.replace(tmp, target)
            except BaseException:
                os.unlink(tmp)
                raise
        finally:
            opened.close()

    def upload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> TransferResults[FileUploadResponse]:
        results: TransferResults[FileUploadResponse] = TransferResults()
        done = 0
        for path, data in files:
            try:
                self._write(self._target(path), data)
            except errors.SandboxError as exc:
                results.append(FileUploadResponse(path=path, error=transfer_error(exc)))
            except OSError as exc:
                is_local = isinstance(exc, FileNotFoundError) and exc.filename != str(self._target(path))
                failure = (
                    f"cannot read local source: {exc}" if is_local else transfer_error(_typed(exc, path))
                )
                results.append(FileUploadResponse(path=path, error=failure))
            else:
                results.append(FileUploadResponse(path=path))
                done += (self.root_dir / os.fsdecode(path)).stat().st_size
                if progress is not None:
                    progress(done, done)
        return results

    def download_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> TransferResults[FileDownloadResponse]:
        results: TransferResults[FileDownloadResponse] = TransferResults()
        done = 0
        for path in paths:
            try:
                content = self._target(path).read_bytes()
            except errors.SandboxError as exc:
                results.append(FileDownloadResponse(path=path, error=transfer_error(exc)))
            except OSError as exc:
                results.append(FileDownloadResponse(path=path, error=transfer_error(_typed(exc, path))))
            else:
                results.append(FileDownloadResponse(path=path, content=content))
                done += len(content)
                if progress is not None:
                    progress(done, done)
        return results

    async def aupload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> TransferResults[FileUploadResponse]:
        items = list(files)
        return await anyio.to_thread.run_sync(lambda: self.upload_files(items, progress=progress))

    async def adownload_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> TransferResults[FileDownloadResponse]:
        items = list(paths)
        return await anyio.to_thread.run_sync(lambda: self.download_files(items, progress=progress))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class InPlaceLocalSandbox(NativeLocalSandbox):
    """A native override that breaks the contract: it writes straight into the destination."""

    def _write(self, target: Path, source: UploadSource) -> None:
        opened = open_upload_source(source)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                shutil.copyfileobj(opened.stream, out)
        finally:
            opened.close()


class TestNativeTransfers(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeLocalSandbox]:
        yield NativeLocalSandbox(tmp_path_factory.mktemp("native-contract"))


def test_the_kit_catches_an_override_that_is_not_atomic(tmp_path: Path) -> None:
    sandbox = InPlaceLocalSandbox(tmp_path)
    sandbox.mkdir("work")
    kit = TransferContractTests()
    with pytest.raises(AssertionError) as caught:
        kit.test_failed_upload_leaves_destination_and_directory_as_they_were(sandbox, "work")
    # the failure is the destination check, not the per-item results
    assert "must be reported" not in str(caught.value)
    assert "never stops" not in str(caught.value)
    assert (tmp_path / "work" / "precious.bin").read_bytes() != b"original"
