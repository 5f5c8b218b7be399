"""List a directory (paged to the output budget) or stat one path."""

from __future__ import annotations

import os

from sandbox_sdk.remote._runtime import TYPE_CHECKING, Fail, entry, fitted_listing, path_arg

if TYPE_CHECKING:
    from typing import List, Optional, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs, Entry

    class LsReply(TypedDict):
        """The page's entries are blob 0, a ``listing``."""

        next: Optional[int]  # where the next page starts; None after the last one


def ls(args: Args, blobs: Blobs) -> Tuple[LsReply, Blobs]:
    path = path_arg(args)
    start = args["start"]
    os.stat(path)  # reports a missing path as such
    if not os.path.isdir(path):
        raise Fail("NOT_DIRECTORY", "not a directory", path)
    with os.scandir(path) as it:
        children = sorted(it, key=lambda e: e.name)
    items = []
    indexes: List[int] = []
    for index in range(start, len(children)):
        child = children[index]
        try:
            items.append((child.path, child.stat(follow_symlinks=False)))
        except FileNotFoundError:  # removed while we listed
            continue
        indexes.append(index)
    packed, count = fitted_listing(items, args["budget"], min(1, len(items)))
    return {"next": indexes[count] if count < len(items) else None}, [packed]


def stat_(args: Args, blobs: Blobs) -> Tuple[Entry, Blobs]:
    path = path_arg(args)
    return entry(path, os.lstat(path)), []


OPS = {"ls": ls, "stat": stat_}
