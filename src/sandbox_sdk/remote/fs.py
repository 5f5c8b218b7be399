"""Create and delete directories and files."""

from __future__ import annotations

import posix
import sys

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    Fail,
    fail_from_oserror,
    file_type,
    fsencode,
    is_dir,
    path_arg,
)

if TYPE_CHECKING:
    from typing import Any, Tuple

    from sandbox_sdk.remote._runtime import Args, Blobs, Empty


def mkdir(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    path = path_arg(args)
    try:
        try:
            posix.mkdir(path)
        except FileNotFoundError:
            if not args["parents"]:
                raise
            import os  # only where a parent is missing

            os.makedirs(path, exist_ok=args["exist_ok"])
    except FileExistsError:
        if not is_dir(path):
            raise Fail("ALREADY_EXISTS", "exists and is not a directory", path) from None
        if not args["exist_ok"]:
            raise Fail("ALREADY_EXISTS", "directory already exists", path) from None
    return {}, []


def delete(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    path = path_arg(args)
    st = posix.lstat(path)
    if file_type(st.st_mode) != "dir":
        posix.unlink(path)
    elif args["recursive"]:
        import shutil

        shutil.rmtree(path, onerror=reraise)
    else:
        posix.rmdir(path)
    return {}, []


def reraise(function: Any, path: Any, info: Any) -> None:
    exc = sys.exc_info()[1]
    if isinstance(exc, OSError):
        raise fail_from_oserror(exc, fsencode(path))
    raise Fail("INTERNAL", "rmtree failed on %r" % path)


OPS = {"mkdir": mkdir, "delete": delete}
