"""List a directory (paged to the output budget) or stat one path."""

from __future__ import annotations

import os

from sandbox_sdk.remote._runtime import TYPE_CHECKING, Fail, entry, json_size, path_arg

if TYPE_CHECKING:
    from typing import List, Optional, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs, Entry

    class LsReply(TypedDict):
        entries: List[Entry]
        next: Optional[int]  # where the next page starts; None after the last one


def ls(args: Args, blobs: Blobs) -> Tuple[LsReply, Blobs]:
    path = path_arg(args)
    start = args["start"]
    budget = args["budget"]
    os.stat(path)  # reports a missing path as such
    if not os.path.isdir(path):
        raise Fail("NOT_DIRECTORY", "not a directory", path)
    names = sorted(os.listdir(path))
    entries: List[Entry] = []
    used = 0
    index = start
    while index < len(names):
        child = os.path.join(path, names[index])
        try:
            item = entry(child, os.lstat(child))
        except FileNotFoundError:  # removed while we listed
            index += 1
            continue
        used += json_size(item)
        if entries and used > budget:
            break
        entries.append(item)
        index += 1
    return {"entries": entries, "next": index if index < len(names) else None}, []


def stat_(args: Args, blobs: Blobs) -> Tuple[Entry, Blobs]:
    path = path_arg(args)
    return entry(path, os.lstat(path)), []


OPS = {"ls": ls, "stat": stat_}
