"""Create and delete directories and files."""

from __future__ import annotations

import binascii
import posix
import sys

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    Fail,
    basename,
    fail_from_oserror,
    file_type,
    fsencode,
    is_dir,
    join,
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


#: ``renameat2``'s flag that swaps two paths in one step (linux/fs.h).
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def replace_tree(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    """Put the tree staged at ``staged`` in place of the directory ``path``.

    With ``renameat2(RENAME_EXCHANGE)`` the two trade places in one step,
    so whoever looks sees the old tree or the new one, whole; the old one
    is then removed from where the new one was staged. A ``path`` that does
    not exist is renamed to. A tree staged ``inside`` its ``path`` (the
    working directory itself), or a ``path`` that cannot be renamed (a
    mount point: ``EBUSY``; a kernel or file system without the exchange),
    gets the new tree's entries moved in one by one after the old ones are
    moved out: each entry whole, the tree as a whole not (docs/state.md)."""
    path, staged = path_arg(args), path_arg(args, "staged")
    try:
        st = posix.lstat(path)
    except FileNotFoundError:
        posix.rename(staged, path)
        return {}, []
    if file_type(st.st_mode) != "dir":
        raise Fail("NOT_A_DIRECTORY", "not a directory", path)
    if args["inside"] or not exchange(staged, path):
        move_entries(staged, path, args["inside"])
    import shutil

    shutil.rmtree(staged, onerror=reraise)
    return {}, []


def exchange(a: bytes, b: bytes) -> bool:
    """Swap ``a`` and ``b`` in one step; ``False`` where that cannot be done."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
        return True
    number = ctypes.get_errno()
    import errno

    if number in (errno.EBUSY, errno.EINVAL, errno.ENOSYS, errno.EXDEV, errno.EPERM):
        return False
    raise fail_from_oserror(OSError(number, posix.strerror(number)), b)


def move_entries(staged: bytes, path: bytes, inside: bool) -> None:
    """Trade the entries of ``path`` for those of ``staged`` (one of them,
    if ``inside``): the old ones into a directory beside the new ones
    (removed with ``staged``), then the new ones in."""
    aside = b".sbx-replaced-" + binascii.hexlify(posix.urandom(8))
    old = join(staged, aside)
    posix.mkdir(old, 0o700)
    own = basename(staged) if inside else None
    for name in posix.listdir(path):
        if name != own:
            posix.rename(join(path, name), join(old, name))
    for name in posix.listdir(staged):
        if name != aside:
            posix.rename(join(staged, name), join(path, name))


OPS = {"mkdir": mkdir, "delete": delete, "replace_tree": replace_tree}
