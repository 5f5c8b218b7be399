"""Find files by glob pattern and lines by text or regex.

Both walk with ``scandir`` and never follow a symlink into a directory while
recursing (so a symlink loop cannot trap them), never open anything but
regular files (so a FIFO or a device cannot block them), and report
directories or files they could not read instead of silently skipping them.
"""

from __future__ import annotations

import os
import re
import stat

from sandbox_sdk.remote._runtime import TYPE_CHECKING, Fail, b64, entry, json_size, path_arg, unb64

if TYPE_CHECKING:
    from typing import Callable, Iterator, List, Pattern, Set, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs, Entry

    class GlobReply(TypedDict):
        matches: List[Entry]
        truncated: bool
        unreadable: List[str]  # base64 paths of directories that could not be read

    #: base64 path, line number, base64 line (cut to ``max_line_bytes``), whether it was cut
    GrepLine = Tuple[str, int, str, bool]

    class GrepReply(TypedDict):
        matches: List[GrepLine]
        truncated: bool
        unreadable: List[str]  # base64 paths
        skipped_binary: int


SNIFF_BYTES = 8192
MAGIC = re.compile(rb"[*?\[{]")
CLASS_SPECIAL = re.compile(rb"[\\\[\]&~|^]")


def expand_braces(pattern: bytes) -> List[bytes]:
    """``a{b,c}d`` -> ``[abd, acd]``, nested braces included."""
    depth = 0
    start = -1
    for i, ch in enumerate(pattern):
        if ch == ord("{"):
            if depth == 0:
                start = i
            depth += 1
        elif ch == ord("}") and depth:
            depth -= 1
            if depth == 0:
                options = split_top_level(pattern[start + 1 : i])
                if len(options) < 2:
                    continue
                head, tail = pattern[:start], pattern[i + 1 :]
                out: List[bytes] = []
                for option in options:
                    out.extend(expand_braces(head + option + tail))
                return out
    return [pattern]


def split_top_level(body: bytes) -> List[bytes]:
    parts: List[bytes] = []
    depth = 0
    current = bytearray()
    for ch in body:
        if ch == ord(",") and depth == 0:
            parts.append(bytes(current))
            current = bytearray()
            continue
        if ch == ord("{"):
            depth += 1
        elif ch == ord("}"):
            depth -= 1
        current.append(ch)
    parts.append(bytes(current))
    return parts


def translate(pattern: bytes) -> bytes:
    """A glob as regex source: ``*``, ``?`` and ``[...]`` never match ``/``;
    a whole ``**`` segment matches any number of directories."""
    out = bytearray()
    i = 0
    while i < len(pattern):
        if pattern[i : i + 3] == b"**/" and (i == 0 or pattern[i - 1 : i] == b"/"):
            out += b"(?:.*/)?"
            i += 3
            continue
        if pattern[i:] == b"**" and (i == 0 or pattern[i - 1 : i] == b"/"):
            out += b".*"
            break
        ch = pattern[i : i + 1]
        i += 1
        if ch == b"*":
            out += b"[^/]*"
        elif ch == b"?":
            out += b"[^/]"
        elif ch == b"[":
            cls, i = bracket(pattern, i)
            out += cls
        else:
            out += re.escape(ch)
    return bytes(out)


def bracket(pattern: bytes, start: int) -> Tuple[bytes, int]:
    """The class opened by the ``[`` before ``start``, as regex source, and
    where the pattern goes on. As in Python's ``fnmatch``, a ``]`` first in the
    class is one of its characters and an unclosed ``[`` is itself; ``!`` or
    ``^`` first negates (as bash does)."""
    body_start = start + 1 if pattern[start : start + 1] in (b"!", b"^") else start
    if pattern[body_start : body_start + 1] == b"]":
        body_start += 1
    end = pattern.find(b"]", body_start)
    if end < 0:
        return b"\\[", start
    body = pattern[start:end]
    negate = body[:1] in (b"!", b"^")
    if negate:
        body = body[1:]
    # Only ``-`` keeps its meaning; escapes, brackets and set operators are characters.
    return b"[" + (b"^" if negate else b"") + CLASS_SPECIAL.sub(rb"\\\g<0>", body) + b"]", end + 1


def compile_glob(pattern: bytes) -> Pattern[bytes]:
    try:
        return re.compile(translate(pattern) + b"\\Z", re.DOTALL)
    except re.error as exc:  # a reversed range such as ``[z-a]``
        raise Fail("INVALID_ARGUMENT", "invalid glob pattern %r: %s" % (pattern, exc)) from None


class Walker:
    """Matches glob segments against the tree below ``root``."""

    def __init__(self, root: bytes, include_hidden: bool, limit: int) -> None:
        self.root = root
        self.include_hidden = include_hidden
        self.limit = limit
        self.found: Set[bytes] = set()
        self.unreadable: Set[bytes] = set()
        self.truncated = False
        self.dirs_only = False  # the pattern being matched ends with ``/``

    def full(self) -> bool:
        return len(self.found) >= self.limit

    def children(self, rel: bytes) -> List[Tuple[bytes, bool]]:
        """(name, is a real directory) for each entry of ``rel``."""
        try:
            with os.scandir(os.path.join(self.root, rel) if rel else self.root) as it:
                return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except NotADirectoryError:
            return []
        except OSError:
            self.unreadable.add(rel or b".")
            return []

    def add(self, rel: bytes) -> None:
        if not self.dirs_only or os.path.isdir(os.path.join(self.root, rel)):
            self.found.add(rel)

    def exists(self, rel: bytes) -> bool:
        """Whether ``rel`` is there; a parent that cannot be searched is reported."""
        try:
            os.lstat(os.path.join(self.root, rel))
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
                child = os.path.join(rel, name)
                if not rest:
                    self.add(child)
                if is_dir:
                    self.match(child, segments)
        elif not MAGIC.search(segment):
            child = os.path.join(rel, segment)
            if self.exists(child):
                self.match(child, rest)
        else:
            regex = compile_glob(segment)
            for name, _ in self.children(rel):
                if regex.match(name) and self.visible(name, segment):
                    self.match(os.path.join(rel, name), rest)


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
    budget = args["budget"]
    matches = []
    for rel in sorted(walker.found):
        path = rel if args["relative"] else os.path.join(root, rel)
        try:
            item = entry(path, os.lstat(os.path.join(root, rel)))
        except FileNotFoundError:
            continue  # gone since the walk
        except OSError:  # listed, but its directory cannot be searched (mode 0666)
            walker.unreadable.add(os.path.dirname(rel) or b".")
            continue
        budget -= json_size(item)
        if budget < 0:
            walker.truncated = True
            break
        matches.append(item)
    return {
        "matches": matches,
        "truncated": walker.truncated,
        "unreadable": [b64(os.path.join(root, p)) for p in sorted(walker.unreadable)],
    }, []


def walk_files(root: bytes, unreadable: List[bytes]) -> Iterator[Tuple[bytes, bytes]]:
    """(path, path relative to root) of every regular file below ``root``."""
    stack = [b""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError:
            unreadable.append(os.path.join(root, rel) if rel else root)
            continue
        for e in entries:
            child = os.path.join(rel, e.name)
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(child)
                elif e.is_file(follow_symlinks=True):
                    yield os.path.join(root, child), child
            except OSError:
                unreadable.append(os.path.join(root, child))


def file_filter(pattern: bytes) -> Callable[[bytes], bool]:
    """A pattern without ``/`` matches a file's name; one with ``/`` matches its
    path relative to the search root (``**`` included)."""
    regexes = [compile_glob(v[2:] if v.startswith(b"./") else v) for v in expand_braces(pattern)]
    if b"/" not in pattern:
        return lambda rel: any(r.match(os.path.basename(rel)) for r in regexes)
    return lambda rel: any(r.match(rel) for r in regexes)


def grep(args: Args, blobs: Blobs) -> Tuple[GrepReply, Blobs]:
    root = path_arg(args)
    text = unb64(args["pattern"]).decode("utf-8", "surrogateescape")
    flags = re.IGNORECASE if args["ignore_case"] else 0
    try:
        regex = re.compile(re.escape(text) if args["fixed_strings"] else text, flags)
    except re.error as exc:
        raise Fail("INVALID_ARGUMENT", "invalid regular expression: %s" % exc) from None
    selected = file_filter(unb64(args["glob"])) if args.get("glob") is not None else None
    limit = args["max_matches"]
    line_cap = args["max_line_bytes"]
    budget = args["budget"]
    unreadable: List[bytes] = []
    matches: List[GrepLine] = []
    truncated = False
    skipped_binary = 0
    st = os.stat(root)
    files = (
        walk_files(root, unreadable) if stat.S_ISDIR(st.st_mode) else iter([(root, os.path.basename(root))])
    )
    for path, rel in files:
        if selected is not None and not selected(rel):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                if b"\0" in f.read(SNIFF_BYTES):
                    skipped_binary += 1
                    continue
                f.seek(0)
                for number, raw in enumerate(f, 1):
                    line = raw.rstrip(b"\r\n")
                    if not regex.search(line.decode("utf-8", "surrogateescape")):
                        continue
                    if len(matches) >= limit:
                        truncated = True
                        break
                    match = (b64(path), number, b64(line[:line_cap]), len(line) > line_cap)
                    budget -= json_size(match)
                    if budget < 0:
                        truncated = True
                        break
                    matches.append(match)
        except OSError:
            unreadable.append(path)
        if truncated:
            break
    return {
        "matches": matches,
        "truncated": truncated,
        "unreadable": [b64(p) for p in unreadable],
        "skipped_binary": skipped_binary,
    }, []


OPS = {"glob": glob, "grep": grep}
