"""Find files by glob pattern.

The walk uses ``scandir``, never follows a symlink into a directory while
recursing (so a symlink loop cannot trap it), and reports directories it
could not list or search instead of silently skipping them.
"""

from __future__ import annotations

import posix

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    Fail,
    b64,
    dirname,
    expand_braces,
    fitted_listing,
    is_dir,
    join,
    name_matcher,
    path_arg,
    unb64,
)

if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Set, Tuple, TypedDict

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
        self.matchers: Dict[bytes, Callable[[bytes], Any]] = {}
        self.include_hidden = include_hidden
        self.limit = limit
        self.found: Set[bytes] = set()
        self.unreadable: Set[bytes] = set()
        self.truncated = False
        self.dirs_only = False  # the pattern being matched ends with ``/``

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
            with posix.scandir(self.path(rel)) as it:
                return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except (NotADirectoryError, FileNotFoundError):  # not a directory, a dangling symlink, gone
            return []
        except OSError:
            self.unreadable.add(rel or b".")
            return []

    def matcher(self, segment: bytes) -> Callable[[bytes], Any]:
        matcher = self.matchers.get(segment)
        if matcher is None:
            matcher = self.matchers[segment] = name_matcher(segment)
        return matcher

    def add(self, rel: bytes) -> None:
        """Count a match; one more than the limit ends the walk as ``truncated``."""
        if self.dirs_only and not is_dir(self.path(rel)):
            return
        if len(self.found) < self.limit:
            self.found.add(rel)
        elif rel not in self.found:
            self.truncated = True

    def add_all(self, rels: List[bytes]) -> None:
        """``add`` each, at once where they all fit."""
        if not self.dirs_only and len(self.found) + len(rels) <= self.limit:
            self.found.update(rels)
        else:
            for rel in rels:
                self.add(rel)

    def exists(self, rel: bytes) -> bool:
        """Whether ``rel`` is there; a parent that cannot be searched is reported."""
        try:
            posix.lstat(self.path(rel))
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            self.unreadable.add(dirname(rel) or b".")
            return False
        return True

    def match(self, rel: bytes, segments: List[bytes]) -> None:
        """Add what below ``rel`` matches ``segments``. A name starting with
        a dot matches only with ``include_hidden`` or a segment that starts
        with one. Each directory's entries are filtered by one comprehension:
        these run once per entry of the tree."""
        if self.truncated:
            return
        if not segments:
            if rel:
                self.add(rel)
            return
        segment, rest = segments[0], segments[1:]
        prefix = rel + b"/" if rel else b""
        if segment == b"**":
            # ``**`` spans zero or more directories; a trailing one matches
            # everything inside (not the directory itself), as in gitignore.
            if rest:
                self.match(rel, rest)
            hidden = self.include_hidden
            listed = self.children(rel)
            if not rest:
                self.add_all([prefix + name for name, _ in listed if hidden or name[:1] != b"."])
            for child in [
                prefix + name for name, is_dir in listed if is_dir and (hidden or name[:1] != b".")
            ]:
                self.match(child, segments)
        elif not any(ch in MAGIC for ch in segment):
            if self.exists(prefix + segment):
                self.match(prefix + segment, rest)
        else:
            matches = self.matcher(segment)
            hidden = self.include_hidden or segment[:1] == b"."
            found = [
                prefix + name
                for name, _ in self.children(rel)
                if matches(name) and (hidden or name[:1] != b".")
            ]
            if not rest:
                self.add_all(found)
            else:
                for child in found:
                    self.match(child, rest)


def glob(args: Args, blobs: Blobs) -> Tuple[GlobReply, Blobs]:
    pattern = unb64(args["pattern"])
    root = path_arg(args)
    if pattern.startswith(b"/"):
        root, pattern = b"/", pattern.lstrip(b"/")
    if not is_dir(root):
        posix.stat(root)  # a missing root is reported as such
        raise Fail("NOT_DIRECTORY", "search root is not a directory", root)
    walker = Walker(root, args["include_hidden"], args["max_results"])
    for variant in expand_braces(pattern):
        walker.dirs_only = variant.endswith(b"/")
        walker.match(b"", [s for s in variant.split(b"/") if s and s != b"."])
    items = []
    relative, prefix = args["relative"], walker.prefix
    for rel in sorted(walker.found):
        full = prefix + rel  # a match is never the root itself
        try:
            items.append((rel if relative else full, posix.lstat(full)))
        except FileNotFoundError:
            continue  # gone since the walk
        except OSError:  # listed, but its directory cannot be searched (mode 0666)
            walker.unreadable.add(dirname(rel) or b".")
    packed, count = fitted_listing(items, args["budget"], 0)
    return {
        "truncated": walker.truncated or count < len(items),
        "unreadable": [b64(join(root, p)) for p in sorted(walker.unreadable)],
    }, [packed]


OPS = {"glob": glob}
