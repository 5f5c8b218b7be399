"""``upload_files`` and ``download_files``: one result per item, in order.

Small files travel many to a round trip (``put_many`` packs them into one
command, ``get_many`` into one output); a file too large for that is staged
or downloaded in chunks on its own. One item failing never stops the others.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from typing import Any

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import GET_MANY, PUT_MANY, SETTLE_MANY
from sandbox_sdk._core import CLEANUP_TIMEOUT, Operation, SandboxCore, check_path, new_token
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import FileDownloadResponse, FileUploadResponse
from sandbox_sdk.transfer._download import download
from sandbox_sdk.transfer._results import malformed_reply, transfer_error
from sandbox_sdk.transfer._sources import (
    OpenedUpload,
    Progress,
    Tally,
    UploadSource,
    changed_size,
    open_upload_source,
    read_full,
)
from sandbox_sdk.transfer._staging import stage

#: One item of a ``put_many``: its index among the files, payload path and content.
Packed = tuple[int, str, bytes]
#: Each file a ``put_many`` writes is fsynced: this much time is allowed per
#: file, against half the call's timeout, when packing (local disks take about
#: a millisecond; a busy or networked one, tens).
SECONDS_PER_FILE = 0.02


def _cannot_read(exc: OSError) -> str:
    return f"cannot read local source: {exc}"


class _Packer:
    """Collects small files for one ``put_many`` command within the budget:
    the command's bytes, and the files its timeout leaves time to write."""

    def __init__(self, limits: Limits, scratch_dir: str) -> None:
        self.room = limits.room("put_many", put_many_args([]), scratch_dir)
        self.max_items = max(1, int(limits.operation_timeout / 2 / SECONDS_PER_FILE))
        self.used = 0
        self.items: list[Packed] = []

    @staticmethod
    def cost(encoded: str, size: int) -> int:
        # the item's JSON (path, blob index, size, SHA-256) in the header, base64
        # again, plus the blob's own line
        return (len(encoded) + 120) * 4 // 3 + 4 * ((size + 2) // 3) + 1

    def accepts(self, encoded: str, size: int) -> bool:
        return len(self.items) < self.max_items and self.used + self.cost(encoded, size) <= self.room

    def add(self, index: int, encoded: str, data: bytes) -> None:
        self.used += self.cost(encoded, len(data))
        self.items.append((index, encoded, data))

    def take(self) -> list[Packed]:
        items, self.items, self.used = self.items, [], 0
        return items


def put_many_args(files: list[tuple[str, bytes]]) -> dict[str, Any]:
    """Arguments of one ``put_many``; each item carries its SHA-256, checked before it is written."""
    return {
        "token": new_token(),
        "items": [
            {"path": path, "blob": index, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for index, (path, data) in enumerate(files)
        ],
    }


class _Uploads:
    """One ``upload_files`` call: the items, their results so far, the
    progress tally and the small files packed for the next ``put_many``."""

    def __init__(self, sandbox: SandboxCore, files: Sequence[tuple[str, UploadSource]]) -> None:
        self.files = files
        self.results: list[FileUploadResponse | None] = [None] * len(files)
        self.packer = _Packer(sandbox.limits, sandbox.scratch_dir)
        self.tally = Tally(None)

    def open(self, index: int) -> OpenedUpload | None:
        try:
            return open_upload_source(self.files[index][1])
        except OSError as exc:
            self.finish(index, _cannot_read(exc))
            return None

    def finish(self, index: int, error: str | errors.SandboxError | None = None) -> None:
        """Record item ``index``: a success, or its error (an exception becomes its code)."""
        if isinstance(error, errors.SandboxError):
            error = transfer_error(error)
        self.results[index] = FileUploadResponse(path=self.files[index][0], error=error)

    def pack(self, index: int, encoded: str, source: OpenedUpload, size: int) -> None:
        """Read a small source whole into the next ``put_many``."""
        try:
            data = read_full(source.stream, size + 1)
        except OSError as exc:
            self.finish(index, _cannot_read(exc))
            return
        if len(data) == size:
            self.packer.add(index, encoded, data)
        else:
            self.finish(index, f"upload to {self.files[index][0]!r}: {changed_size(size, len(data))}")

    def responses(self) -> list[FileUploadResponse]:
        return [result for result in self.results if result is not None]


def upload_files(
    sandbox: SandboxCore, files: Sequence[tuple[str, UploadSource]], progress: Progress | None
) -> Operation[list[FileUploadResponse]]:
    """Upload each ``(remote_path, data)``, in order (a later item to the same path wins)."""
    uploads = _Uploads(sandbox, files)
    sources: list[OpenedUpload | None] = []
    try:
        for index in range(len(files)):
            sources.append(uploads.open(index))
        uploads.tally = Tally(progress, sum(s.size or 0 for s in sources if s is not None))
        for index, source in enumerate(sources):
            if source is not None:
                yield from _upload_one(sandbox, uploads, index, source)
        yield from _put_many(uploads)
    finally:
        for source in sources:
            if source is not None:
                source.close()
    return uploads.responses()


def _upload_one(sandbox: SandboxCore, uploads: _Uploads, index: int, source: OpenedUpload) -> Operation[None]:
    """Pack item ``index`` for a ``put_many`` if it fits one, else stage it."""
    try:
        encoded = check_path(uploads.files[index][0])
    except errors.SandboxError as exc:
        uploads.finish(index, exc)
        return
    if source.size is None or not uploads.packer.accepts(encoded, source.size):
        yield from _put_many(uploads)  # what is packed goes first, so items land in their order
    if source.size is not None and uploads.packer.accepts(encoded, source.size):
        uploads.pack(index, encoded, source, source.size)
        return
    try:
        yield from stage(
            sandbox, encoded, source.stream, overwrite=True, tally=uploads.tally, size=source.size
        )
    except errors.SandboxError as exc:
        uploads.finish(index, exc)
    except OSError as exc:  # reading the source failed part-way; the staging was aborted
        uploads.finish(index, _cannot_read(exc))
    else:
        uploads.finish(index)


def _put_many(uploads: _Uploads) -> Operation[None]:
    """Send the packed files in one command; each succeeds or fails alone."""
    batch = uploads.packer.take()
    if not batch:
        return
    args = put_many_args([(encoded, data) for _, encoded, data in batch])
    try:
        value, _ = yield from PUT_MANY(args, [data for _, _, data in batch], what="upload")
        outcomes = _put_many_outcomes(value, len(batch))
    except errors.SandboxError as exc:
        landed = yield from _settle(args)
        for (index, _, data), done in zip(batch, landed or [False] * len(batch), strict=True):
            uploads.finish(index, None if done else exc)
            if done:
                uploads.tally.add(len(data))
        return
    for (index, _, data), outcome in zip(batch, outcomes, strict=True):
        uploads.finish(index, outcome)
        uploads.tally.add(len(data))


def _put_many_outcomes(value: object, count: int) -> list[errors.SandboxError | None]:
    """Each packed file's outcome in a ``put_many`` reply. A reply of any
    other shape (a sandbox answering for the script) is a
    :class:`~sandbox_sdk.errors.SandboxRuntimeError`, and the upload is then
    settled as after a lost reply."""
    items = value.get("items") if isinstance(value, dict) else None
    if not (isinstance(items, list) and len(items) == count and all(map(_is_put_many_item, items))):
        raise malformed_reply("upload", value)
    return [protocol.error_from(item["error"], "upload") if "error" in item else None for item in items]


def _is_put_many_item(item: object) -> bool:
    return isinstance(item, dict) and isinstance(item.get("error", {}), dict)


def _settle(args: dict[str, Any]) -> Operation[list[bool] | None]:
    """After a failed ``put_many`` (its reply lost, or killed at its timeout
    part-way): remove the staging files it left and learn which items landed;
    ``None`` if that cannot be told (a malformed reply too)."""
    try:
        value, _ = yield from SETTLE_MANY(args, what="check an upload", timeout=CLEANUP_TIMEOUT)
    except errors.SandboxError:
        return None
    landed = value.get("landed") if isinstance(value, dict) else None
    if not (isinstance(landed, list) and len(landed) == len(args["items"])):
        return None
    return [done is True for done in landed]


class _Downloads:
    """One ``download_files`` call: the paths, their results so far, the progress tally."""

    def __init__(self, paths: Sequence[str], progress: Progress | None) -> None:
        self.paths = paths
        self.results: list[FileDownloadResponse | None] = [None] * len(paths)
        self.tally = Tally(progress)

    def checked(self) -> list[tuple[int, str]]:
        """``(index, payload path)`` of each valid path; the others fail at once."""
        valid = []
        for index, path in enumerate(self.paths):
            try:
                valid.append((index, check_path(path)))
            except errors.SandboxError as exc:
                self.fail(index, exc)
        return valid

    def fail(self, index: int, exc: errors.SandboxError) -> None:
        self.results[index] = FileDownloadResponse(path=self.paths[index], error=transfer_error(exc))

    def take(self, index: int, content: bytes, sha256: str) -> None:
        """Record a file that came in a batch, if it matches the sandbox's SHA-256."""
        if hashlib.sha256(content).hexdigest() != sha256:
            what = f"download {self.paths[index]!r}"
            self.fail(index, errors.IntegrityError(f"{what}: content does not match its SHA-256"))
            return
        self.tally.total += len(content)
        self.tally.add(len(content))
        self.results[index] = FileDownloadResponse(path=self.paths[index], content=content)

    def responses(self) -> list[FileDownloadResponse]:
        return [result for result in self.results if result is not None]


def download_files(
    sandbox: SandboxCore, paths: Sequence[str], progress: Progress | None
) -> Operation[list[FileDownloadResponse]]:
    """Download each path, as many to a round trip as one output holds."""
    downloads = _Downloads(paths, progress)
    pending = downloads.checked()
    while pending:
        group = _fit_paths(pending, sandbox.limits.max_command_bytes // 2)
        answered = yield from _get_many(sandbox, downloads, group)
        pending = pending[answered:]
    return downloads.responses()


def _get_many(sandbox: SandboxCore, downloads: _Downloads, group: list[tuple[int, str]]) -> Operation[int]:
    """One ``get_many`` for ``group``; returns how many of its paths it answered
    (a prefix: the rest did not fit in the output)."""
    args = {"paths": [encoded for _, encoded in group], "budget": sandbox.limits.result_budget}
    try:
        value, blobs = yield from GET_MANY(args, what="download")
        items = _get_many_items(value, len(group), len(blobs))
    except errors.SandboxError as exc:
        for index, _ in group:
            downloads.fail(index, exc)
        return len(group)
    for (index, encoded), item in zip(group, items, strict=False):
        if "blob" in item:
            downloads.take(index, bytes(blobs[item["blob"]]), item["sha256"])
        elif "error" in item:
            downloads.fail(index, protocol.error_from(item["error"], "download"))
        else:  # too large for a batch: fetch it in chunks
            yield from _download_large(sandbox, downloads, index, encoded)
    return len(items)


def _get_many_items(value: object, asked: int, blob_count: int) -> list[dict[str, Any]]:
    """The items of a ``get_many`` reply: at least one, for a prefix of the
    ``asked`` paths; a reply of any other shape is malformed."""
    items = value.get("items") if isinstance(value, dict) else None
    if not (isinstance(items, list) and 0 < len(items) <= asked):
        raise malformed_reply("download", value)
    if not all(_is_get_many_item(item, blob_count) for item in items):
        raise malformed_reply("download", value)
    return items


def _is_get_many_item(item: object, blob_count: int) -> bool:
    """A file's blob (an index into the reply's) and SHA-256, its error, or
    neither (too large for a batch)."""
    if not isinstance(item, dict):
        return False
    if "blob" in item:
        blob = item["blob"]
        return type(blob) is int and 0 <= blob < blob_count and isinstance(item.get("sha256"), str)
    return isinstance(item.get("error", {}), dict)


def _download_large(sandbox: SandboxCore, downloads: _Downloads, index: int, encoded: str) -> Operation[None]:
    sink = io.BytesIO()
    what = f"download {downloads.paths[index]!r}"
    try:
        yield from download(sandbox, encoded, sink, max_size=None, tally=downloads.tally, what=what)
    except errors.SandboxError as exc:
        downloads.fail(index, exc)
    else:
        downloads.results[index] = FileDownloadResponse(path=downloads.paths[index], content=sink.getvalue())


def _fit_paths(pending: list[tuple[int, str]], budget: int) -> list[tuple[int, str]]:
    """The longest prefix of ``pending`` whose paths fit in one command."""
    used = 0
    for count, (_, encoded) in enumerate(pending):
        used += len(encoded) * 4 // 3 + 8
        if used > budget and count:
            return pending[:count]
    return pending
