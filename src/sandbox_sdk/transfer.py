"""Moving files in and out of a sandbox: the transfer half of ``BaseSandbox``.

Through ``execute()`` alone, small files travel many to a command (or many to
an output); a large file is staged in chunks, each within
``max_command_bytes``, into a hidden temp file beside its destination, then
checked (size and SHA-256) and renamed in one step; a large download is read
in chunks sized to ``max_output_bytes`` and checked against the SHA-256 the
sandbox computed. Client memory stays bounded by a few chunks.

Providers with a native file API override ``upload_files`` / ``download_files``
and their async twins ``aupload_files`` / ``adownload_files`` (helpers:
:func:`transfer_error`, :func:`open_upload_source`); docs/transfers.md lists the
guarantees an override must keep, and
``sandbox_sdk.testing.transfer_suite.TransferContractTests`` checks them.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import posixpath
import stat
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import (
    ABORT,
    CREATE_ARCHIVE,
    DELETE,
    EXTRACT_ARCHIVE,
    GET_MANY,
    LANDED,
    PUT_MANY,
    READ_CHUNK,
    STAGE,
    Reply,
    ScriptCall,
)
from sandbox_sdk._core import (
    CLEANUP_TIMEOUT,
    Operation,
    PathArg,
    Pipeline,
    SandboxCore,
    check_path,
    new_token,
)
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk.models import FileDownloadResponse, FileUploadResponse
from sandbox_sdk.remote import archive as remote_archive
from sandbox_sdk.remote._runtime import Fail

if TYPE_CHECKING:
    from sandbox_sdk.remote.get import ChunkReply
    from sandbox_sdk.remote.write import SizeReply

#: ``(done_bytes, total_bytes)``; ``total_bytes`` counts what is known so far.
Progress = Callable[[int, int], None]
#: Bytes, a local path, or a binary file object (read from its position).
UploadSource = bytes | bytearray | memoryview | str | os.PathLike[str] | BinaryIO
#: Where a directory archive is built and read inside the sandbox.
REMOTE_ARCHIVE_DIR = "/tmp"
#: Directory archives are spooled in memory up to this size, then to disk.
SPOOL_BYTES = 8 * 1024 * 1024
#: Raw chunk bytes a transfer keeps in flight at most beyond its first two
#: chunks (each costs a few copies on the client: base64 text, command or
#: output string), so client memory stays bounded by the budgets, whatever
#: ``transfer_concurrency`` is and however large the file.
IN_FLIGHT_BYTES = 6 * 1024 * 1024

#: The per-file ``error`` of a transfer response for each error type (else its message).
TRANSFER_ERROR_CODES: dict[type[errors.SandboxError], str] = {
    errors.SandboxFileNotFoundError: "file_not_found",
    errors.SandboxPermissionError: "permission_denied",
    errors.SandboxIsADirectoryError: "is_directory",
    errors.InvalidPathError: "invalid_path",
}


#: Errors a staged upload's commit reports when it refused, having changed
#: nothing; after any other failure the client asks whether it landed.
_COMMIT_REFUSED = (
    errors.IntegrityError,
    errors.SandboxFileNotFoundError,
    errors.SandboxIsADirectoryError,
    errors.SandboxNotADirectoryError,
    errors.SandboxPermissionError,
    errors.SandboxFileExistsError,
    errors.InvalidPathError,
    errors.InvalidArgumentError,
)


def transfer_error(exc: BaseException) -> str:
    """The per-file error string of a transfer response for ``exc``."""
    for kind, code in TRANSFER_ERROR_CODES.items():
        if isinstance(exc, kind):
            return code
    return str(exc) or type(exc).__name__


def upload_result(path: str, error: BaseException | None = None) -> FileUploadResponse:
    """A native upload's per-file result: success, or ``error`` as its code."""
    return FileUploadResponse(path=path, error=None if error is None else transfer_error(error))


def download_result(
    path: str, content: bytes | None = None, error: BaseException | None = None
) -> FileDownloadResponse:
    """A native download's per-file result: ``content``, or ``error`` as its code."""
    if error is not None:
        return FileDownloadResponse(path=path, error=transfer_error(error))
    return FileDownloadResponse(path=path, content=content)


@dataclass
class OpenedUpload:
    """An upload source, opened: its stream and size (``None`` if unknown)."""

    stream: BinaryIO
    size: int | None
    owned: bool

    def close(self) -> None:
        if self.owned:
            self.stream.close()


def open_upload_source(data: UploadSource) -> OpenedUpload:
    if isinstance(data, bytes | bytearray | memoryview):
        return OpenedUpload(io.BytesIO(bytes(data)), len(data), True)
    if isinstance(data, str | os.PathLike):
        stream = open(data, "rb")  # noqa: SIM115 - closed by OpenedUpload.close
        return OpenedUpload(stream, os.fstat(stream.fileno()).st_size, True)
    if hasattr(data, "read"):
        size = None
        if data.seekable():
            here = data.tell()
            size = data.seek(0, io.SEEK_END) - here
            data.seek(here)
        return OpenedUpload(data, size, False)
    raise errors.InvalidArgumentError(f"cannot upload a {type(data).__name__}: pass bytes, a path or a file")


def _chunks(stream: IO[bytes], size: int) -> Iterator[tuple[bytes, bool]]:
    """``stream`` in chunks of ``size`` bytes, each with whether it is the
    last (at least one chunk, empty for an empty stream; one is read ahead)."""
    chunk = _read_full(stream, size)
    while True:
        following = _read_full(stream, size) if len(chunk) == size else b""
        yield chunk, not following
        if not following:
            return
        chunk = following


def _changed_size(expected: int, read: int) -> str:
    if read > expected:
        return f"the local source grew while it was read (past its {expected} bytes)"
    return f"the local source shrank while it was read ({read} of {expected} bytes)"


def _read_full(stream: IO[bytes], size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at end of stream."""
    parts = []
    while size > 0:
        block = stream.read(size)
        if not block:
            break
        parts.append(block)
        size -= len(block)
    return b"".join(parts)


class _Tally:
    """Bytes moved so far, reported to an optional progress callback."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def add(self, count: int) -> None:
        self.done += count
        self.total = max(self.total, self.done)
        if self.progress is not None:
            self.progress(self.done, self.total)


class TransferMethods(SandboxCore):
    """Upload and download methods; mixed into :class:`~sandbox_sdk.BaseSandbox`."""

    # -- staged upload and chunked download (shared with write/edit/read_bytes) ---------

    def _window(self, chunk_bytes: int) -> int:
        """Chunks to keep in flight: ``transfer_concurrency``, fewer if that
        many would hold more than ``IN_FLIGHT_BYTES``, but two in any case
        (the sandbox works on one while the client takes in the other)."""
        return max(1, min(self.transfer_concurrency, max(2, IN_FLIGHT_BYTES // max(chunk_bytes, 1))))

    def _op_stage(
        self,
        dest: str,
        source: IO[bytes],
        overwrite: bool,
        tally: _Tally | None,
        size: int | None = None,
    ) -> Operation[int]:
        """Upload ``source`` to ``dest`` (payload-encoded) in chunks; all or nothing.

        The first chunk creates the staging file (after checking ``dest``),
        the middle ones are pipelined, the last one verifies size and SHA-256
        and commits. A source that does not hold the ``size`` bytes it was
        expected to is not committed. On any failure the staging file is
        removed and the error re-raised."""
        token = new_token()
        base = {"path": dest, "token": token, "overwrite": overwrite}
        capacity = self._blob_capacity(
            "stage", {**base, "offset": 1 << 60, "final": {"size": 1 << 60, "sha256": "0" * 64}}
        )
        digest = hashlib.sha256()
        what = f"upload to {protocol.decode_path(dest)!r}"
        sent = 0
        unacknowledged: deque[int] = deque()  # sizes of the chunks sent, in order

        def call(data: bytes, final: bool) -> ScriptCall[SizeReply]:
            nonlocal sent
            args: dict[str, Any] = {**base, "offset": sent}
            digest.update(data)
            sent += len(data)
            unacknowledged.append(len(data))
            if final:
                if size is not None and sent != size:
                    raise errors.IntegrityError(f"{what}: {_changed_size(size, sent)}")
                args["final"] = {"size": sent, "sha256": digest.hexdigest()}
            return STAGE(args, [data], what=what)

        def count(reply: Reply[SizeReply] | None) -> None:
            done = unacknowledged.popleft()
            if tally:
                tally.add(done)

        chunks = _chunks(source, capacity)
        data, last = next(chunks)
        try:
            if not last:
                count((yield call(data, False)))  # creates the staging file, so it runs alone
                held_back: list[bytes] = []

                def middle() -> Iterator[ScriptCall[SizeReply]]:
                    for chunk, is_last in chunks:
                        if is_last:  # the commit waits for every other chunk
                            held_back.append(chunk)
                            return
                        yield call(chunk, False)

                yield Pipeline(middle(), count, self._window(capacity))
                [data] = held_back
            commit = call(data, True)
            try:
                reply: Reply[SizeReply] | None = yield from commit
            except errors.SandboxError as exc:
                # The reply is lost, not necessarily the commit: ask.
                if isinstance(exc, _COMMIT_REFUSED) or not (yield from self._op_landed(commit.args)):
                    raise
                reply = None
            count(reply)
            return sent
        except BaseException as exc:
            if can_clean_up(exc):
                with contextlib.suppress(Exception):
                    yield from ABORT(
                        {"path": dest, "token": token}, what="abort upload", timeout=CLEANUP_TIMEOUT
                    )
            raise

    def _op_landed(self, commit: Mapping[str, Any]) -> Operation[bool]:
        """Whether the commit call ``commit`` (its arguments) took effect
        although its reply was lost; ``False`` if that cannot be told."""
        final = commit["final"]
        args = {"path": commit["path"], "token": commit["token"], **final}
        try:
            value, _ = yield from LANDED(args, what="check a commit", timeout=CLEANUP_TIMEOUT)
        except errors.SandboxError:
            return False
        return value["landed"] is True

    def _op_discard(self, paths: Sequence[str]) -> Operation[None]:
        """Best-effort removal of staged files (payload-encoded paths) that a
        failed operation may have left; a file already gone is fine."""
        for path in paths:
            with contextlib.suppress(errors.SandboxError):
                yield from DELETE(
                    {"path": path, "recursive": False}, what="clean up staged data", timeout=CLEANUP_TIMEOUT
                )

    def _op_download(
        self, path: str, sink: IO[bytes], max_size: int | None, tally: _Tally | None, what: str
    ) -> Operation[int]:
        """Copy a remote file into ``sink`` in output-sized chunks, pipelined,
        verified against the SHA-256 the sandbox computes of the whole file.

        The first call learns the size; its chunk is decoded and taken in
        once the next calls are under way. A file that fits in it comes with
        the SHA-256 of what was read; otherwise the last chunk's call hashes
        the whole file, while the client is still taking in the chunks before it."""
        capacity = self._result_budget()
        args = {"path": path, "length": capacity}
        first: protocol.LazyBlob | None
        value, (first,) = yield from READ_CHUNK.lazy({**args, "offset": 0, "max_size": max_size}, what=what)
        size = value["size"]
        if tally:
            tally.total += size
        digest = hashlib.sha256()
        expected: list[str] = [value["sha256"]] if "sha256" in value else []
        received = 0

        def take(data: protocol.Blob) -> None:
            nonlocal received
            if len(data) != min(capacity, size - received):
                raise errors.IntegrityError(f"{what}: the file changed size while it was being read")
            digest.update(data)
            sink.write(data)
            received += len(data)
            if tally:
                tally.add(len(data))

        def consume(reply: Reply[ChunkReply]) -> None:
            chunk_value, (data,) = reply
            take(data)
            if "sha256" in chunk_value:
                expected.append(chunk_value["sha256"])

        def take_first() -> None:
            nonlocal first
            assert first is not None
            data, first = first.decode(), None  # frees the output it came in before the write
            take(data)

        starts = range(capacity, size, capacity)
        if starts:
            last = starts[-1]
            calls = (READ_CHUNK({**args, "offset": at, "digest": at == last}, what=what) for at in starts)
            yield Pipeline(calls, consume, self._window(capacity), meanwhile=take_first)
        else:
            take_first()
        if received != size or expected != [digest.hexdigest()]:
            raise errors.IntegrityError(
                f"{what}: the file changed while it was being read (or was corrupted)"
            )
        return size

    # -- upload_files / download_files ------------------------------------------------------

    def _op_upload_files(
        self, files: Sequence[tuple[str, UploadSource]], progress: Progress | None
    ) -> Operation[list[FileUploadResponse]]:
        files = list(files)
        results: list[FileUploadResponse | None] = [None] * len(files)
        sources: list[OpenedUpload | None] = []
        try:
            for index, (path, data) in enumerate(files):
                try:
                    sources.append(open_upload_source(data))
                except OSError as exc:
                    sources.append(None)
                    results[index] = FileUploadResponse(path=path, error=f"cannot read local source: {exc}")
            tally = _Tally(progress, sum(s.size or 0 for s in sources if s is not None))
            packer = _Packer(
                self.max_command_bytes, protocol.command_overhead("put_many", _put_many_args([]))
            )
            for index, source in enumerate(sources):
                if source is None:
                    continue
                path = files[index][0]
                try:
                    encoded = check_path(path)
                except errors.SandboxError as exc:
                    results[index] = FileUploadResponse(path=path, error=transfer_error(exc))
                    continue
                if source.size is None or not packer.accepts(encoded, source.size):
                    # Send what is packed first, so items land in their order
                    # (a later item to the same path wins).
                    yield from self._op_put_many(packer.take(), files, results, tally)
                if source.size is not None and packer.accepts(encoded, source.size):
                    try:
                        data = _read_full(source.stream, source.size + 1)
                    except OSError as exc:
                        results[index] = FileUploadResponse(
                            path=path, error=f"cannot read local source: {exc}"
                        )
                        continue
                    if len(data) == source.size:
                        packer.add(index, encoded, data)
                    else:
                        error = f"upload to {path!r}: {_changed_size(source.size, len(data))}"
                        results[index] = FileUploadResponse(path=path, error=error)
                    continue
                try:
                    yield from self._op_stage(encoded, source.stream, True, tally, source.size)
                    results[index] = FileUploadResponse(path=path)
                except errors.SandboxError as exc:
                    results[index] = FileUploadResponse(path=path, error=transfer_error(exc))
                except OSError as exc:  # reading the source failed part-way; the staging was aborted
                    results[index] = FileUploadResponse(path=path, error=f"cannot read local source: {exc}")
            yield from self._op_put_many(packer.take(), files, results, tally)
        finally:
            for source in sources:
                if source is not None:
                    source.close()
        return [r for r in results if r is not None]

    def _op_put_many(
        self,
        batch: list[tuple[int, str, bytes]],
        files: Sequence[tuple[str, UploadSource]],
        results: list[FileUploadResponse | None],
        tally: _Tally,
    ) -> Operation[None]:
        if not batch:
            return
        args = _put_many_args([(encoded, data) for _, encoded, data in batch])
        try:
            value, _ = yield from PUT_MANY(args, [data for _, _, data in batch], what="upload")
        except errors.SandboxError as exc:
            for index, _, _ in batch:
                results[index] = FileUploadResponse(path=files[index][0], error=transfer_error(exc))
            return
        for (index, _, data), item in zip(batch, value["items"], strict=True):
            error = item.get("error")
            failure = protocol.error_from(error, "upload") if error else None
            results[index] = FileUploadResponse(
                path=files[index][0], error=None if failure is None else transfer_error(failure)
            )
            tally.add(len(data))

    def upload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> list[FileUploadResponse]:
        """Upload each ``(remote_path, data)``, replacing existing files and
        creating parents; one response per item, in order, with ``error=None``
        on success. One item failing never stops the others.

        Native-transfer providers override this and :meth:`aupload_files`."""
        return self._drive(self._op_upload_files(list(files), progress))

    async def aupload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> list[FileUploadResponse]:
        return await self._adrive(self._op_upload_files(list(files), progress))

    def _op_download_files(
        self, paths: Sequence[str], progress: Progress | None
    ) -> Operation[list[FileDownloadResponse]]:
        results: list[FileDownloadResponse | None] = [None] * len(paths)
        tally = _Tally(progress, 0)
        pending: list[tuple[int, str]] = []
        for index, path in enumerate(paths):
            try:
                pending.append((index, check_path(path)))
            except errors.SandboxError as exc:
                results[index] = FileDownloadResponse(path=path, error=transfer_error(exc))
        budget = self._result_budget()
        while pending:
            group = _fit_paths(pending, self.max_command_bytes // 2)
            args = {"paths": [encoded for _, encoded in group], "budget": budget}
            try:
                value, blobs = yield from GET_MANY(args, what="download")
            except errors.SandboxError as exc:
                for index, _ in group:
                    results[index] = FileDownloadResponse(path=paths[index], error=transfer_error(exc))
                pending = pending[len(group) :]
                continue
            for (index, encoded), item in zip(group, value["items"], strict=False):
                path = paths[index]
                if "blob" in item:
                    content = blobs[item["blob"]]
                    if hashlib.sha256(content).hexdigest() != item["sha256"]:
                        mismatch = errors.IntegrityError(
                            f"download {path!r}: content does not match its SHA-256"
                        )
                        results[index] = FileDownloadResponse(path=path, error=transfer_error(mismatch))
                        continue
                    tally.total += len(content)
                    tally.add(len(content))
                    results[index] = FileDownloadResponse(path=path, content=bytes(content))
                elif "error" in item:
                    failure = protocol.error_from(item["error"], "download")
                    results[index] = FileDownloadResponse(path=path, error=transfer_error(failure))
                else:  # too large for a batch: fetch it in chunks
                    sink = io.BytesIO()
                    try:
                        yield from self._op_download(encoded, sink, None, tally, f"download {path!r}")
                        results[index] = FileDownloadResponse(path=path, content=sink.getvalue())
                    except errors.SandboxError as exc:
                        results[index] = FileDownloadResponse(path=path, error=transfer_error(exc))
            pending = pending[len(value["items"]) :]
        return [r for r in results if r is not None]

    def download_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> list[FileDownloadResponse]:
        """Download each path: one response per path, in order, with ``content``
        or ``error``. Each file is verified against the sandbox's SHA-256.

        Native-transfer providers override this and :meth:`adownload_files`."""
        return self._drive(self._op_download_files(list(paths), progress))

    async def adownload_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> list[FileDownloadResponse]:
        return await self._adrive(self._op_download_files(list(paths), progress))

    # -- download_file: streaming into a local file -------------------------------------------

    def _op_download_file(
        self, remote_path: PathArg, dest: str | os.PathLike[str] | BinaryIO, progress: Progress | None
    ) -> Operation[int]:
        encoded = check_path(remote_path)
        what = f"download {os.fsdecode(remote_path)!r}"
        tally = _Tally(progress, 0)
        if not isinstance(dest, str | os.PathLike):
            size: int = yield from self._op_download(encoded, dest, None, tally, what)
            return size
        target = Path(dest)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as sink:
                size = yield from self._op_download(encoded, sink, None, tally, what)
                sink.flush()
                os.fchmod(sink.fileno(), _local_file_mode(target))
                os.fsync(sink.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return size

    def download_file(
        self,
        remote_path: PathArg,
        dest: str | os.PathLike[str] | BinaryIO,
        *,
        progress: Progress | None = None,
    ) -> int:
        """Stream one file into a local path (via a temp file and rename, so
        ``dest`` is whole or untouched) or a binary file object; returns its size."""
        return self._drive(self._op_download_file(remote_path, dest, progress))

    async def adownload_file(
        self,
        remote_path: PathArg,
        dest: str | os.PathLike[str] | BinaryIO,
        *,
        progress: Progress | None = None,
    ) -> int:
        return await self._adrive(self._op_download_file(remote_path, dest, progress))

    # -- directories --------------------------------------------------------------------------

    def _op_upload_dir(
        self, local_dir: str | os.PathLike[str], remote_dir: PathArg, progress: Progress | None
    ) -> Operation[int]:
        root = Path(local_dir)
        if not root.is_dir():
            raise errors.SandboxNotADirectoryError(f"not a local directory: {root}", path=str(root))
        remote = check_path(remote_dir)
        archive = posixpath.join(REMOTE_ARCHIVE_DIR, f".sbx-upload-{new_token()}.tar")
        with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
            with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for child in sorted(root.iterdir()):
                    tar.add(child, arcname=child.name)
            size = spool.tell()
            spool.seek(0)
            try:
                yield from self._op_stage(protocol.encode_path(archive), spool, False, _Tally(progress, size))
                value, _ = yield from EXTRACT_ARCHIVE(
                    {"archive": protocol.encode_path(archive), "path": remote},
                    what=f"upload_dir to {os.fsdecode(remote_dir)!r}",
                )
            except BaseException as exc:
                # The extract script removes the archive itself, but a call
                # that failed may never have run it, or lost the reply of
                # the commit that put the archive in place.
                if can_clean_up(exc):
                    yield from self._op_discard([protocol.encode_path(archive)])
                raise
        return value["members"]

    def upload_dir(
        self, local_dir: str | os.PathLike[str], remote_dir: PathArg, *, progress: Progress | None = None
    ) -> int:
        """Copy a local directory tree (files, empty folders, symlinks, modes)
        into ``remote_dir``, creating it; returns the number of entries.

        The tree travels as one tar archive; the sandbox refuses members that
        would land outside ``remote_dir`` before extracting anything."""
        return self._drive(self._op_upload_dir(local_dir, remote_dir, progress))

    async def aupload_dir(
        self, local_dir: str | os.PathLike[str], remote_dir: PathArg, *, progress: Progress | None = None
    ) -> int:
        return await self._adrive(self._op_upload_dir(local_dir, remote_dir, progress))

    def _op_download_dir(
        self, remote_dir: PathArg, local_dir: str | os.PathLike[str], progress: Progress | None
    ) -> Operation[int]:
        what = f"download_dir {os.fsdecode(remote_dir)!r}"
        archive = protocol.encode_path(posixpath.join(REMOTE_ARCHIVE_DIR, f".sbx-download-{new_token()}.tar"))
        create = CREATE_ARCHIVE({"archive": archive, "path": check_path(remote_dir)}, what=what)
        try:
            yield create
            with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
                yield from self._op_download(archive, spool, None, _Tally(progress, 0), what)
                spool.seek(0)
                count = safe_extract(spool, Path(local_dir))
        except BaseException as exc:
            # Also after a failed create: it may have run and lost its reply.
            if can_clean_up(exc):
                yield from self._op_discard([archive])
            raise
        yield from self._op_discard([archive])
        return count

    def download_dir(
        self, remote_dir: PathArg, local_dir: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> int:
        """Copy a sandbox directory tree into ``local_dir`` (created if needed);
        returns the number of entries. Members that would land outside
        ``local_dir`` (``..``, absolute names, links pointing out) are refused
        before anything is written."""
        return self._drive(self._op_download_dir(remote_dir, local_dir, progress))

    async def adownload_dir(
        self, remote_dir: PathArg, local_dir: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> int:
        return await self._adrive(self._op_download_dir(remote_dir, local_dir, progress))


class _Packer:
    """Collects small files for one ``put_many`` command within the budget."""

    def __init__(self, max_command_bytes: int, overhead: int) -> None:
        self.room = max_command_bytes - overhead
        self.used = 0
        self.items: list[tuple[int, str, bytes]] = []

    @staticmethod
    def cost(encoded: str, size: int) -> int:
        # the item's JSON (path, blob index, SHA-256) in the header, base64
        # again, plus the blob's own line
        return (len(encoded) + 100) * 4 // 3 + 4 * ((size + 2) // 3) + 1

    def accepts(self, encoded: str, size: int) -> bool:
        return self.used + self.cost(encoded, size) <= self.room

    def add(self, index: int, encoded: str, data: bytes) -> None:
        self.used += self.cost(encoded, len(data))
        self.items.append((index, encoded, data))

    def take(self) -> list[tuple[int, str, bytes]]:
        items, self.items, self.used = self.items, [], 0
        return items


def _local_file_mode(target: Path) -> int:
    """The mode a downloaded file gets: the replaced file's, else what a plain
    ``open(path, "w")`` would give (``mkstemp`` makes temp files 0600)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


def _put_many_args(files: list[tuple[str, bytes]]) -> dict[str, Any]:
    """Arguments of one ``put_many``; each item carries its SHA-256, checked before it is written."""
    return {
        "token": new_token(),
        "items": [
            {"path": path, "blob": index, "sha256": hashlib.sha256(data).hexdigest()}
            for index, (path, data) in enumerate(files)
        ],
    }


def _fit_paths(pending: list[tuple[int, str]], budget: int) -> list[tuple[int, str]]:
    """The longest prefix of ``pending`` whose paths fit in one command."""
    used = 0
    for count, (_, encoded) in enumerate(pending):
        used += len(encoded) * 4 // 3 + 8
        if used > budget and count:
            return pending[:count]
    return pending


def safe_extract(archive: IO[bytes], dest: Path) -> int:
    """Extract a tar archive into ``dest`` after checking every member.

    Nothing is written unless the archive as a whole passes the sandbox's own
    :func:`~sandbox_sdk.remote.archive.check_members` (no absolute names, no
    ``..``, no links pointing outside ``dest``, nothing below or through a
    symlink member, no device files). Extraction then re-checks each member
    with :func:`tarfile.data_filter` where it exists (Python 3.11.4+), and
    drops the sandbox's owners; permission bits of files and directories are
    kept. Returns the number of members."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=archive, mode="r:") as tar:
        members = tar.getmembers()
        try:
            remote_archive.check_members(os.path.realpath(dest), members)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter=_data_keeping_modes)
            else:  # Python before 3.11.4 (Debian 12's 3.11.2): check_members alone guards
                for member in members:
                    member.mode &= 0o777
                    member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
                tar.extractall(dest, members=members)
        except Fail as exc:
            raise errors.InvalidPathError(f"refusing the archive: {exc.message}") from None
        except tarfile.FilterError as exc:
            raise errors.InvalidPathError(f"refusing the archive: {exc}") from None
    return len(members)


def _data_keeping_modes(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    checked = tarfile.data_filter(member, dest)
    if member.isreg() or member.isdir():
        return checked.replace(mode=member.mode & 0o777, deep=False)
    return checked
