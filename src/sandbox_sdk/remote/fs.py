"""Create and delete directories and files."""

from __future__ import annotations

import os
import stat
import sys

from sandbox_sdk.remote._runtime import TYPE_CHECKING, Fail, fail_from_oserror, path_arg

if TYPE_CHECKING:
    from typing import Any, Tuple

    from sandbox_sdk.remote._runtime import Args, Blobs, Empty


def mkdir(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    path = path_arg(args)
    try:
        if args["parents"]:
            os.makedirs(path, exist_ok=args["exist_ok"])
        else:
            os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise Fail("ALREADY_EXISTS", "exists and is not a directory", path) from None
        if not args["exist_ok"]:
            raise Fail("ALREADY_EXISTS", "directory already exists", path) from None
    return {}, []


def delete(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    path = path_arg(args)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
    elif args["recursive"]:
        import shutil

        shutil.rmtree(path, onerror=reraise)
    else:
        os.rmdir(path)
    return {}, []


def reraise(function: Any, path: Any, info: Any) -> None:
    exc = sys.exc_info()[1]
    if isinstance(exc, OSError):
        raise fail_from_oserror(exc, os.fsencode(path))
    raise Fail("INTERNAL", "rmtree failed on %r" % path)


OPS = {"mkdir": mkdir, "delete": delete}
