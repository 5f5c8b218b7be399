"""Replace text in a file atomically, under a lock so concurrent edits never lose one another."""

from __future__ import annotations

import posix

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    DirLock,
    Fail,
    commit,
    file_type,
    lexists,
    path_arg,
    remove_quietly,
    resolve_target,
    temp_name,
    unb64,
    write_new,
)

if TYPE_CHECKING:
    from typing import Optional, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs

    class EditReply(TypedDict):
        replacements: int

    class EditedReply(TypedDict):
        replacements: Optional[int]  # None: not committed, or cannot tell


def staged_argument(spec: object, blobs: Blobs) -> bytes:
    """An argument sent inline as a blob index, or staged earlier into a file
    (when it was too large for one command); see :func:`mark_done`."""
    if isinstance(spec, int):
        return blobs[spec]
    if not isinstance(spec, str):
        raise Fail("INVALID_ARGUMENT", "malformed staged argument")
    with open(unb64(spec), "rb") as f:
        return f.read()


def mark_done(args: Args, count: int) -> None:
    """After a committed edit of staged texts: their files go, except that
    with ``replace_all`` ``new``'s holds the count (which the client removes),
    so a client whose reply was lost can ask (``edited``). A failed edit
    leaves both to the client's clean-up, so ``old``'s file gone means
    committed."""
    if isinstance(args["new"], str):
        if args["replace_all"]:
            with open(unb64(args["new"]), "wb") as f:
                f.write(b"%d" % count)
        else:
            remove_quietly(unb64(args["new"]))
    if isinstance(args["old"], str):
        remove_quietly(unb64(args["old"]))


def edited(args: Args, blobs: Blobs) -> Tuple[EditedReply, Blobs]:
    """Whether a staged edit whose reply was lost committed, and its count."""
    if lexists(unb64(args["old"])):
        return {"replacements": None}, []
    if not args["replace_all"]:
        return {"replacements": 1}, []
    try:
        with open(unb64(args["new"]), "rb") as f:
            return {"replacements": int(f.read())}, []
    except (OSError, ValueError):
        return {"replacements": None}, []


def edit(args: Args, blobs: Blobs) -> Tuple[EditReply, Blobs]:
    old = staged_argument(args["old"], blobs)
    new = staged_argument(args["new"], blobs)
    dest = resolve_target(path_arg(args))
    if not old:
        raise Fail("INVALID_ARGUMENT", "old text is empty")
    with DirLock(dest):
        st = posix.stat(dest)
        kind = file_type(st.st_mode)
        if kind == "dir":
            raise Fail("IS_DIRECTORY", "is a directory", dest)
        if kind != "file":
            raise Fail("INVALID_ARGUMENT", "not a regular file", dest)
        with open(dest, "rb") as f:
            content = f.read()
        count = content.count(old)
        if count == 0:
            raise Fail("EDIT_NO_MATCH", "old text not found", dest)
        if count > 1 and not args["replace_all"]:
            raise Fail(
                "EDIT_AMBIGUOUS",
                "old text occurs %d times; pass replace_all=True or add context to make it unique" % count,
                dest,
                count=count,
            )
        tmp = temp_name(dest, args["token"])
        try:
            write_new(tmp, content.replace(old, new), dest)
        except BaseException:
            remove_quietly(tmp)
            raise
        commit(tmp, dest, True)
    mark_done(args, count)
    return {"replacements": count}, []


OPS = {"edit": edit, "edited": edited}
