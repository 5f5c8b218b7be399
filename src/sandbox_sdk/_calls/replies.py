"""Replies decoded into the SDK's models: listings, ``stat`` entries, glob and grep results."""

from __future__ import annotations

import base64
import gc
import json
import posixpath
import sys
import zlib
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from sandbox_sdk import errors, protocol
from sandbox_sdk.models import FileInfo, FileType, GlobResult, GrepMatch, GrepResult
from sandbox_sdk.protocol import Blob

if TYPE_CHECKING:
    from sandbox_sdk.remote._runtime import Entry
    from sandbox_sdk.remote.glob import GlobReply
    from sandbox_sdk.remote.grep import GrepReply


#: A listing's file types, by the type bits of ``st_mode`` (the same on
#: every POSIX system: remote/_runtime.py, ``file_type``).
FILE_TYPES: dict[int, FileType] = {0o100000: "file", 0o040000: "dir", 0o120000: "symlink"}

#: ``st_mode``'s file type bits (``stat.S_IFMT``).
TYPE_BITS = 0o170000

NANOSECONDS = 1_000_000_000

#: How ``os.fsdecode`` decodes a path.
FS_ENCODING, FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()

#: A listing's entries, validated in one call (pydantic-core walks the list).
FILE_INFOS = TypeAdapter(list[FileInfo])


def _name(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) or path


def file_info(item: Entry) -> FileInfo:
    """A :class:`~sandbox_sdk.models.FileInfo` from a script's entry (``stat``)."""
    path = protocol.decode_path(item["path"])
    return FileInfo(
        path=path,
        name=_name(path),
        type=item["type"],
        size=item["size"],
        mtime=item["mtime"],
        mode=item["mode"],
    )


def _integers(column: object) -> list[int]:
    if type(column) is not list or not set(map(type, column)) <= {int}:  # not bool: a subclass
        raise ValueError("a column of integers expected")
    return column


def listing(packed: Blob) -> list[FileInfo]:
    """The entries of a listing (``ls``, ``glob``; remote/_runtime.py,
    ``listing``): zlib-compressed JSON columns, then the paths separated by
    NULs, decoded at once as ``os.fsdecode`` decodes each (a NUL is one byte
    in every encoding it may use). ``mtime`` is ``st_mtime`` as CPython
    computes it from the seconds and nanoseconds (``sec + nsec * 1e-9``).
    Each entry is validated as pydantic validates any model.

    The garbage collector is paused while they are built, as CPython's own
    ``subprocess`` paused it around a fork: each entry is an object it
    tracks, and 10,000 of them at once were promoted to its oldest
    generation, so that every few listings paid a full collection (~100 ms
    in a process with LangChain loaded). Entries dropped soon are now freed
    before any collection sees them."""
    try:
        head, newline, names = zlib.decompress(packed).partition(b"\n")
        if not newline:
            raise ValueError("no line of paths")
        columns = json.loads(head)
        sizes, mtimes, modes = (_integers(columns[key]) for key in ("sizes", "mtimes", "modes"))
        paths = names.decode(FS_ENCODING, FS_ERRORS).split("\0") if sizes else []
        if not len(paths) == len(mtimes) == len(modes) == len(sizes):
            raise ValueError("columns of different lengths")
    except (zlib.error, ValueError, KeyError, TypeError) as exc:
        raise errors.SandboxRuntimeError(f"malformed listing from the sandbox: {exc!r}") from None
    collecting = gc.isenabled()
    gc.disable()
    try:
        entries = FILE_INFOS.validate_python([
            {
                "path": path,
                "name": path.rpartition("/")[2] or _name(path),
                "type": FILE_TYPES.get(mode & TYPE_BITS, "other"),
                "size": size,
                "mtime": ns // NANOSECONDS + ns % NANOSECONDS * 1e-9,
                "mode": mode & 0o7777,
            }
            for path, size, ns, mode in zip(paths, sizes, mtimes, modes, strict=True)
        ])  # fmt: skip
    finally:
        if collecting:
            gc.enable()
    return entries


def glob_result(value: GlobReply, blobs: list[Blob]) -> GlobResult:
    return GlobResult(
        matches=listing(blobs[0]),
        truncated=value["truncated"],
        unreadable=[protocol.decode_path(p) for p in value["unreadable"]],
    )


def grep_result(value: GrepReply) -> GrepResult:
    return GrepResult(
        matches=[
            GrepMatch(
                path=protocol.decode_path(p),
                line_number=n,
                line=base64.b64decode(text).decode("utf-8", "replace"),
                line_truncated=cut,
            )
            for p, n, text, cut in value["matches"]
        ],
        truncated=value["truncated"],
        unreadable=[protocol.decode_path(p) for p in value["unreadable"]],
        skipped_binary=value["skipped_binary"],
    )
