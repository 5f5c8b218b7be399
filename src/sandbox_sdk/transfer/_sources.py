"""The client side of a transfer: what an upload reads (bytes, a path, a file
object), read in chunks, and the bytes moved so far for a progress callback."""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, BinaryIO

from sandbox_sdk import errors

#: ``(done_bytes, total_bytes)``; ``total_bytes`` counts what is known so far.
Progress = Callable[[int, int], None]
#: Bytes, a local path, or a binary file object (read from its position).
UploadSource = bytes | bytearray | memoryview | str | os.PathLike[str] | BinaryIO


@dataclass
class OpenedUpload:
    """An upload source, opened: its stream and size (``None`` if unknown)."""

    stream: BinaryIO
    size: int | None
    owned: bool

    def close(self) -> None:
        """Close the stream if it was opened here (a caller's file object stays open)."""
        if self.owned:
            self.stream.close()


def open_upload_source(data: UploadSource) -> OpenedUpload:
    """``data`` as a stream to read from, with its size when it can be told."""
    if isinstance(data, bytes | bytearray | memoryview):
        return OpenedUpload(io.BytesIO(bytes(data)), len(data), True)
    if isinstance(data, str | os.PathLike):
        stream = open_regular(data, text_given=isinstance(data, str))
        return OpenedUpload(stream, os.fstat(stream.fileno()).st_size, True)
    if hasattr(data, "read"):
        size = None
        if data.seekable():
            here = data.tell()
            size = data.seek(0, io.SEEK_END) - here
            data.seek(here)
        return OpenedUpload(data, size, False)
    raise errors.InvalidArgumentError(f"cannot upload a {type(data).__name__}: pass bytes, a path or a file")


def open_regular(
    path: str | os.PathLike[str], *, text_given: bool = False, follow_symlinks: bool = True
) -> BinaryIO:
    """A local regular file, opened to read. Opened without blocking, so a
    FIFO (which would wait for a writer forever) or a device is refused with
    an ``OSError`` instead of stalling the transfer. A ``str`` that names no
    file was most likely meant as the content: the error says how to pass it
    (``text_given``). Without ``follow_symlinks``, a symlink as the last
    component is refused (``ELOOP``): for a path already resolved and checked."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the "path"
        not_a_path = isinstance(exc, ValueError) or exc.errno in (errno.ENOENT, errno.ENAMETOOLONG)
        if not (text_given and not_a_path):
            raise
        shown = os.fspath(path)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise FileNotFoundError(
            errno.ENOENT, "no such local file (a str is a local path: pass bytes for content)", shown
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_full(stream: IO[bytes], size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at end of stream."""
    parts = []
    while size > 0:
        block = stream.read(size)
        if not block:
            break
        parts.append(block)
        size -= len(block)
    return b"".join(parts)


def changed_size(expected: int, read: int) -> str:
    """Why a source that did not hold its ``expected`` bytes is refused."""
    if read > expected:
        return f"the local source grew while it was read (past its {expected} bytes)"
    return f"the local source shrank while it was read ({read} of {expected} bytes)"


class Tally:
    """Bytes moved so far, reported to an optional progress callback."""

    def __init__(self, progress: Progress | None, total: int = 0) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def add(self, count: int) -> None:
        """Count ``count`` more bytes moved (the total grows to match if it must)."""
        self.done += count
        self.total = max(self.total, self.done)
        if self.progress is not None:
            self.progress(self.done, self.total)
