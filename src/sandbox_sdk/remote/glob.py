"""Find files by glob pattern.

The walk uses ``scandir``, never follows a symlink into a directory while
recursing (so a symlink loop cannot trap it), and reports directories it
could not list or search instead of silently skipping them.
"""

from __future__ import annotations

import os

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    Fail,
    b64,
    compile_glob,
    expand_braces,
    fitted_listing,
    path_arg,
    unb64,
)

if TYPE_CHECKING:
    from typing import Dict, List, Pattern, Set, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs

    class GlobReply(TypedDict):
        """The matches are blob 0, a ``listing``."""

        truncated: bool
        unreadable: List[str]  # base64 paths of directories that could not be read


#: Bytes that make a glob segment a pattern rather than a name.
MAGIC = b"*?[{"


class Walker:
    """Matches glob segments against the tree below ``root``."""

    def __init__(self, root: bytes, include_hidden: bool, limit: int) -> None:
        self.root = root
        self.prefix = root if root.endswith(b"/") else root + b"/"  # root + prefix = os.path.join
        self.listed: Dict[bytes, List[Tuple[bytes, bool]]] = {}  # ``**/x`` lists a directory twice
        self.regexes: Dict[bytes, Pattern[bytes]] = {}
        self.include_hidden = include_hidden
        self.limit = limit
        self.found: Set[bytes] = set()
        self.unreadable: Set[bytes] = set()
        self.truncated = False
        self.dirs_only = False  # the pattern being matched ends with ``/``

    def full(self) -> bool:
        return len(self.found) >= self.limit

    def path(self, rel: bytes) -> bytes:
        """``os.path.join(root, rel)``, without its cost per entry (``rel``
        is relative and never ends with ``/``)."""
        return self.prefix + rel if rel else self.root

    def children(self, rel: bytes) -> List[Tuple[bytes, bool]]:
        """(name, is a real directory) for each entry of ``rel``."""
        listed = self.listed.get(rel)
        if listed is None:
            listed = self.listed[rel] = self.list(rel)
        return listed

    def list(self, rel: bytes) -> List[Tuple[bytes, bool]]:
        try:
            with os.scandir(self.path(rel)) as it:
                return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except NotADirectoryError:
            return []
        except OSError:
            self.unreadable.add(rel or b".")
            return []

    def regex(self, segment: bytes) -> Pattern[bytes]:
        regex = self.regexes.get(segment)
        if regex is None:
            regex = self.regexes[segment] = compile_glob(segment)
        return regex

    def add(self, rel: bytes) -> None:
        if not self.dirs_only or os.path.isdir(self.path(rel)):
            self.found.add(rel)

    def exists(self, rel: bytes) -> bool:
        """Whether ``rel`` is there; a parent that cannot be searched is reported."""
        try:
            os.lstat(self.path(rel))
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            self.unreadable.add(os.path.dirname(rel) or b".")
            return False
        return True

    def visible(self, name: bytes, segment: bytes) -> bool:
        return self.include_hidden or not name.startswith(b".") or segment.startswith(b".")

    def match(self, rel: bytes, segments: List[bytes]) -> None:
        if self.full():
            self.truncated = True
            return
        if not segments:
            if rel:
                self.add(rel)
            return
        segment, rest = segments[0], segments[1:]
        if segment == b"**":
            # ``**`` spans zero or more directories; a trailing one matches
            # everything inside (not the directory itself), as in gitignore.
            if rest:
                self.match(rel, rest)
            for name, is_dir in self.children(rel):
                if not self.visible(name, b""):
                    continue
                child = rel + b"/" + name if rel else name
                if not rest:
                    self.add(child)
                if is_dir:
                    self.match(child, segments)
        elif not any(ch in MAGIC for ch in segment):
            child = rel + b"/" + segment if rel else segment
            if self.exists(child):
                self.match(child, rest)
        else:
            regex = self.regex(segment)
            for name, _ in self.children(rel):
                if regex.match(name) and self.visible(name, segment):
                    self.match(rel + b"/" + name if rel else name, rest)


def glob(args: Args, blobs: Blobs) -> Tuple[GlobReply, Blobs]:
    pattern = unb64(args["pattern"])
    root = path_arg(args)
    if pattern.startswith(b"/"):
        root, pattern = b"/", pattern.lstrip(b"/")
    if not os.path.isdir(root):
        os.stat(root)  # a missing root is reported as such
        raise Fail("NOT_DIRECTORY", "search root is not a directory", root)
    walker = Walker(root, args["include_hidden"], args["max_results"])
    for variant in expand_braces(pattern):
        walker.dirs_only = variant.endswith(b"/")
        walker.match(b"", [s for s in variant.split(b"/") if s and s != b"."])
    items = []
    for rel in sorted(walker.found):
        full = walker.path(rel)
        try:
            items.append((rel if args["relative"] else full, os.lstat(full)))
        except FileNotFoundError:
            continue  # gone since the walk
        except OSError:  # listed, but its directory cannot be searched (mode 0666)
            walker.unreadable.add(os.path.dirname(rel) or b".")
    packed, count = fitted_listing(items, args["budget"], 0)
    return {
        "truncated": walker.truncated or count < len(items),
        "unreadable": [b64(os.path.join(root, p)) for p in sorted(walker.unreadable)],
    }, [packed]


OPS = {"glob": glob}
