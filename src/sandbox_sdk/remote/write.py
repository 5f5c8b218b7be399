"""Create or replace files atomically: whole small files, many at once, or a
large one staged in chunks at their offsets and committed after a check."""

from __future__ import annotations

import posix

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    DirLock,
    Fail,
    as_failure,
    check_destination,
    check_path,
    commit,
    describe,
    dirname,
    file_sha256,
    find_program,
    make_parents,
    open_regular,
    path_arg,
    remove_quietly,
    resolve_target,
    sha256_hex,
    staging_failure,
    sweep_stale,
    temp_name,
    unb64,
    write_new,
)

if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs, Empty

    class SizeReply(TypedDict):
        size: int  # bytes of the file written so far

    class StageReply(SizeReply, total=False):
        append: bool  # the first chunk's: later chunks may be appended through the link
        gunzip: bool  # and compressed ones too (gzip is there)

    class PutManyItem(TypedDict, total=False):
        error: Dict[str, Any]  # absent when the item was written

    class PutManyReply(TypedDict):
        items: List[PutManyItem]

    class LandedReply(TypedDict):
        landed: bool

    class SettledReply(TypedDict):
        landed: List[bool]  # per item of the put_many, in order


def put(dest: bytes, data: bytes, overwrite: bool, token: str) -> None:
    dest = resolve_target(dest)
    check_destination(dest, overwrite)
    make_parents(dest)
    tmp = temp_name(dest, token)
    with DirLock(dest):
        try:
            write_new(tmp, data, dest)
        except BaseException:
            remove_quietly(tmp)
            raise
        commit(tmp, dest, overwrite)


def write(args: Args, blobs: Blobs) -> Tuple[SizeReply, Blobs]:
    dest = path_arg(args)
    put(dest, blobs[0], args["overwrite"], args["token"])
    return {"size": len(blobs[0])}, []


def put_many(args: Args, blobs: Blobs) -> Tuple[PutManyReply, Blobs]:
    """Each item succeeds or fails alone; one failure never stops the rest."""
    results: List[PutManyItem] = []
    for index, item in enumerate(args["items"]):
        try:
            dest = unb64(item["path"])
            check_path(dest)
            data = blobs[item["blob"]]
            if sha256_hex([data]) != item["sha256"]:
                raise Fail("INTEGRITY", "content does not match its SHA-256", dest)
            put(dest, data, True, "%s-%d" % (args["token"], index))
        except Exception as exc:  # noqa: BLE001 - reported per item
            results.append({"error": describe(as_failure(exc))})
        else:
            results.append({})
    return {"items": results}, []


def stage(args: Args, blobs: Blobs) -> Tuple[StageReply, Blobs]:
    """Write one chunk into the staging file; the final chunk also verifies
    size and SHA-256 of the whole staging file and commits it.

    Given a ``link`` (a fresh name in the scratch directory), the first chunk
    also makes it a symlink to the staging file when ``base64`` and ``dd``
    are there, so that later chunks can be written by a shell pipeline to
    that name, with no interpreter start and no user path in the command;
    the final chunk (or ``abort``) removes it."""
    dest = resolve_target(path_arg(args))
    tmp = temp_name(dest, args["token"])
    link = path_arg(args, "link") if args.get("link") is not None else None
    offset = args["offset"]
    final = args.get("final")
    data = blobs[0]
    if args.get("gzip"):
        import zlib  # loaded by the bootstrap already

        try:
            data = zlib.decompress(data, 31)  # 31: the gzip format
        except zlib.error as exc:
            raise Fail("INVALID_ARGUMENT", "chunk does not decompress: %s" % exc) from None
    try:
        if offset == 0:
            check_destination(dest, args["overwrite"])
            make_parents(dest)
            flags = posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL
        else:
            flags = posix.O_WRONLY
        try:
            fd = posix.open(tmp, flags | posix.O_CLOEXEC, 0o666)
            try:
                if offset == 0:
                    sweep_stale(dirname(tmp), posix.fstat(fd).st_mtime)
                posix.pwrite(fd, data, offset)
                if final:
                    posix.fsync(fd)
            finally:
                posix.close(fd)
        except OSError as exc:
            raise staging_failure(exc, dest) from None
        if final:
            verify(tmp, final["size"], final["sha256"], dest)
            with DirLock(dest):
                commit(tmp, dest, args["overwrite"])
    except BaseException:
        remove_quietly(tmp)
        if link is not None:
            remove_quietly(link)
        raise
    reply: StageReply = {"size": offset + len(data)}
    if link is not None and final:
        remove_quietly(link)
    elif link is not None and offset == 0 and make_link(tmp, link):
        reply["append"] = True
        reply["gunzip"] = find_program(b"gzip") is not None
    return reply, []


def make_link(tmp: bytes, link: bytes) -> bool:
    """Link ``link`` to ``tmp`` if chunks can be appended by the shell."""
    if find_program(b"base64") is None or find_program(b"dd") is None:
        return False
    import os  # for os.path.abspath, once per staged upload

    try:
        posix.symlink(os.path.abspath(tmp), link)
    except OSError:
        return False
    sweep_stale(dirname(link), posix.lstat(link).st_mtime)
    return True


def verify(path: bytes, size: int, sha256: str, dest: Optional[bytes] = None) -> None:
    """Fail unless the regular file ``path`` holds ``size`` bytes with this SHA-256;
    a failure names ``dest`` (the file ``path`` stages) where given."""
    dest = path if dest is None else dest
    with open_regular(path) as f:
        actual = posix.fstat(f.fileno()).st_size
        if actual != size:
            raise Fail("INTEGRITY", "%d bytes arrived of the %d sent" % (actual, size), dest)
        if file_sha256(f) != sha256:
            raise Fail("INTEGRITY", "what arrived does not match the SHA-256 of what was sent", dest)


def landed(args: Args, blobs: Blobs) -> Tuple[LandedReply, Blobs]:
    """Whether a staged upload whose final reply was lost did commit: the
    destination holds exactly the staged bytes."""
    dest = resolve_target(path_arg(args))
    try:
        verify(dest, args["size"], args["sha256"])
    except (OSError, Fail):
        return {"landed": False}, []
    # A commit cut short between linking a new file in and removing the
    # staging name landed too: the name goes now.
    remove_quietly(temp_name(dest, args["token"]))
    return {"landed": True}, []


def settle_many(args: Args, blobs: Blobs) -> Tuple[SettledReply, Blobs]:
    """After a ``put_many`` whose reply was lost (or that was killed at its
    timeout): remove the staging file of each item it left, and tell which
    items landed (the destination holding exactly their bytes)."""
    landed = []
    for index, item in enumerate(args["items"]):
        try:
            dest = resolve_target(unb64(item["path"]))
            # Under the lock put_many held: a killed put_many may still be
            # finishing the one call it was in (a rename, say) as it dies.
            with DirLock(dest):
                # Left by a kill before its commit, or between linking a new
                # file in and removing the name: the destination tells which.
                remove_quietly(temp_name(dest, "%s-%d" % (args["token"], index)))
                verify(dest, item["size"], item["sha256"])
        except Exception:  # noqa: BLE001 - whatever stands in the way, the item did not land
            landed.append(False)
        else:
            landed.append(True)
    return {"landed": landed}, []


def abort(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    """Remove a staging file left by a failed transfer (a no-op if it is gone)."""
    dest = resolve_target(path_arg(args))
    remove_quietly(temp_name(dest, args["token"]))
    if args.get("link") is not None:
        remove_quietly(path_arg(args, "link"))
    return {}, []


OPS = {
    "write": write,
    "put_many": put_many,
    "settle_many": settle_many,
    "stage": stage,
    "landed": landed,
    "abort": abort,
}
