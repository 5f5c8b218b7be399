"""A large download: read in output-sized chunks, pipelined, and verified
against the SHA-256 the sandbox computes of the whole file.

The first call learns the size; its chunk is decoded and taken in once the
next calls are under way. A file that fits in it comes with the SHA-256 of
what was read; otherwise the last chunk's call hashes the whole file, while
the client is still taking in the chunks before it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO

from sandbox_sdk import errors
from sandbox_sdk._calls import READ_CHUNK, Reply
from sandbox_sdk._core import Operation, Pipeline, SandboxCore
from sandbox_sdk.protocol import Blob, LazyBlob
from sandbox_sdk.transfer._results import malformed_reply
from sandbox_sdk.transfer._sources import Tally

if TYPE_CHECKING:
    from sandbox_sdk.remote.get import ChunkReply


class ChunkedDownload:
    """One download into ``sink``: the bytes taken in, their digest, and the
    digest(s) the sandbox reported to check them against."""

    def __init__(self, sink: IO[bytes], size: int, chunk_bytes: int, tally: Tally | None, what: str) -> None:
        self.sink = sink
        self.size = size
        self.chunk_bytes = chunk_bytes
        self.tally = tally
        self.what = what
        self.received = 0
        self.digest = hashlib.sha256()
        self.expected: list[str] = []
        self.first: LazyBlob | None = None  # the first chunk, still base64 in its call's output

    def take(self, data: Blob) -> None:
        """Write the next chunk, which must be as long as its place in the file says."""
        if len(data) != min(self.chunk_bytes, self.size - self.received):
            raise errors.IntegrityError(f"{self.what}: the file changed size while it was being read")
        self.digest.update(data)
        self.sink.write(data)
        self.received += len(data)
        if self.tally:
            self.tally.add(len(data))

    def take_reply(self, reply: Reply[ChunkReply]) -> None:
        """Take in the chunk of a reply, and the whole file's digest if it carries it."""
        value, blobs = reply
        if not isinstance(value, dict) or len(blobs) != 1:
            raise malformed_reply(self.what, value)
        self.take(blobs[0])
        self.expect(value)

    def expect(self, value: ChunkReply) -> None:
        """Keep the whole file's digest if this reply carries it."""
        if "sha256" in value:
            self.expected.append(value["sha256"])

    def take_first(self) -> None:
        """Take in the first chunk, dropping the output it came in before the write."""
        assert self.first is not None
        data = self.first.decode()
        self.first = None
        self.take(data)

    def check(self) -> None:
        """Fail unless the whole file came in, matching the sandbox's digest."""
        if self.received != self.size or self.expected != [self.digest.hexdigest()]:
            raise errors.IntegrityError(
                f"{self.what}: the file changed while it was being read (or was corrupted)"
            )


def download(
    sandbox: SandboxCore, path: str, sink: IO[bytes], *, max_size: int | None, tally: Tally | None, what: str
) -> Operation[int]:
    """Copy the remote file ``path`` (payload-encoded) into ``sink``; returns its size.
    A file over ``max_size`` is refused before any of it is read."""
    chunk_bytes = sandbox.limits.result_budget
    args = {"path": path, "length": chunk_bytes}
    value, blobs = yield from READ_CHUNK.lazy({**args, "offset": 0, "max_size": max_size}, what=what)
    size = value.get("size") if isinstance(value, dict) else None
    if not (type(size) is int and size >= 0 and len(blobs) == 1):
        raise malformed_reply(what, value)
    transfer = ChunkedDownload(sink, size, chunk_bytes, tally, what)
    transfer.expect(value)
    transfer.first = blobs.pop()  # held only there, so taking it in frees its output
    if tally:
        tally.total += transfer.size
    starts = range(chunk_bytes, transfer.size, chunk_bytes)
    if starts:
        last = starts[-1]
        calls = (READ_CHUNK({**args, "offset": at, "digest": at == last}, what=what) for at in starts)
        window = sandbox.limits.window(chunk_bytes)
        yield Pipeline(calls, transfer.take_reply, window, meanwhile=transfer.take_first)
    else:
        transfer.take_first()
    transfer.check()
    return transfer.size


def download_to(
    sandbox: SandboxCore, path: str, dest: str | os.PathLike[str] | BinaryIO, *, tally: Tally, what: str
) -> Operation[int]:
    """Download ``path`` into a binary file object, or into a local path
    through a temp file renamed over it (so ``dest`` is whole or untouched)."""
    if not isinstance(dest, str | os.PathLike):
        return (yield from download(sandbox, path, dest, max_size=None, tally=tally, what=what))
    target = Path(dest)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as sink:
            size = yield from download(sandbox, path, sink, max_size=None, tally=tally, what=what)
            sink.flush()
            os.fchmod(sink.fileno(), local_file_mode(target))
            os.fsync(sink.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return size


def local_file_mode(target: Path) -> int:
    """The mode a downloaded file gets: the replaced file's, else what a plain
    ``open(path, "w")`` would give (``mkstemp`` makes temp files 0600)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask
