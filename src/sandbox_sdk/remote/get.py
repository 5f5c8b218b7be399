"""Read raw bytes out of the sandbox: one chunk of a file, or many small files at once."""

from __future__ import annotations

import posix

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    Fail,
    as_failure,
    check_path,
    describe,
    file_sha256,
    open_regular,
    sha256_hex,
    unb64,
)

if TYPE_CHECKING:
    from typing import Any, Dict, List, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs

    class _ChunkSize(TypedDict):
        size: int  # of the whole file

    class ChunkReply(_ChunkSize, total=False):
        """The chunk itself is the reply's one blob."""

        sha256: str  # of the whole file: when the chunk is all of it, or on request

    class GetManyItem(TypedDict, total=False):
        """One of: the file's blob and SHA-256, its size (too large for a
        batch), or the error reading it."""

        blob: int
        sha256: str
        large: int
        error: Dict[str, Any]

    class GetManyReply(TypedDict):
        items: List[GetManyItem]  # for a prefix of the paths asked for


#: What one item of a ``get_many`` result costs besides its data: its JSON
#: (with a SHA-256) and separators, counted against the output budget.
ITEM_BYTES = 128


def read_chunk(args: Args, blobs: Blobs) -> Tuple[ChunkReply, Blobs]:
    """``length`` bytes at ``offset`` and the file's size. The SHA-256 of the
    whole file comes too when this chunk is the whole file (hashed in memory)
    or on request (``digest``: the file is read again), so the client can
    verify what it reassembles."""
    path = unb64(args["path"])
    check_path(path)
    with open_regular(path) as f:
        size = posix.fstat(f.fileno()).st_size
        limit = args.get("max_size")
        if limit is not None and size > limit:
            raise Fail(
                "OUTPUT_LIMIT", "file is %d bytes, over the %d-byte cap" % (size, limit), path, size=size
            )
        offset = args["offset"]
        f.seek(offset)
        data = f.read(args["length"])
        info: ChunkReply = {"size": size}
        if offset == 0 and len(data) == size and not f.read(1):
            info["sha256"] = sha256_hex([data])
        elif args.get("digest"):
            f.seek(0)
            info["sha256"] = file_sha256(f)
    return info, [data]


def get_many(args: Args, blobs: Blobs) -> Tuple[GetManyReply, Blobs]:
    """Whole files, each with its SHA-256, while they fit in ``budget``; a file
    too big for a batch is reported with its size (the client fetches it in chunks)."""
    budget = args["budget"]
    items: List[GetManyItem] = []
    out: Blobs = []
    used = 0
    for raw in args["paths"]:
        path = unb64(raw)
        if used + ITEM_BYTES > budget and items:
            break
        used += ITEM_BYTES
        try:
            check_path(path)
            with open_regular(path) as f:
                size = posix.fstat(f.fileno()).st_size
                if size > budget:
                    items.append({"large": size})
                    continue
                if used + size > budget and items:
                    break
                data = f.read()
        except Exception as exc:  # noqa: BLE001 - reported per item
            items.append({"error": describe(as_failure(exc))})
            continue
        items.append({"blob": len(out), "sha256": sha256_hex([data])})
        out.append(data)
        used += len(data)
    return {"items": items}, out


OPS = {"read_chunk": read_chunk, "get_many": get_many}
