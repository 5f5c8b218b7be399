"""Find lines by text or regex.

The walk uses ``scandir`` and follows no symlink below the root (as ``grep
-r`` and ripgrep do: a symlink loop cannot trap it, a link cannot lead it out
of the tree), never opens anything but regular files (so a FIFO or a device
cannot block it), and reports directories or files it could not read instead
of silently skipping them. A binary file (a NUL in its first 8 KiB) is not
searched line by line: it is counted in ``skipped_binary`` if it holds a
match, as GNU grep reports "binary file matches". The search is Python's
alone: the client runs GNU grep without this script first where it finds
what this script would, and hands over to it for the rest
(docs/protocol.md, "grep").
"""

from __future__ import annotations

import posix

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    Fail,
    b64,
    basename,
    compile_glob,
    expand_braces,
    file_type,
    join,
    name_matcher,
    path_arg,
    unb64,
)

if TYPE_CHECKING:
    from typing import AbstractSet, Callable, Iterator, List, Optional, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs

    #: base64 path, line number, base64 line (cut to ``max_line_bytes``), whether it was cut
    GrepLine = Tuple[str, int, str, bool]
    #: A :data:`GrepLine` before base64: path, line number, line, whether it was cut
    Match = Tuple[bytes, int, bytes, bool]

    class GrepReply(TypedDict):
        matches: List[GrepLine]
        truncated: bool
        unreadable: List[str]  # base64 paths
        skipped_binary: int


SNIFF_BYTES = 8192


def walk_files(root: bytes, excluded: AbstractSet[bytes]) -> Iterator[Tuple[bytes, Optional[bytes]]]:
    """(path, path relative to root) of every regular file below ``root``,
    and (path, ``None``) for each directory or entry that could not be read,
    in walk order: depth first, a directory's files (by name, descending)
    before its subdirectories (by name, ascending); ``walk_key`` in
    ``sandbox_sdk._calls`` sorts GNU grep's output into this order.

    A directory below ``root`` whose name is in ``excluded`` is not entered
    (nor reported unreadable): the names are whole base names at any depth,
    never the root itself, as the shell grep's ``--exclude-dir`` takes them
    (``sandbox_sdk._calls``, ``ShellGrepCall``)."""
    stack = [b""]
    while stack:
        rel = stack.pop()
        try:
            with posix.scandir(join(root, rel) if rel else root) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError:
            yield (join(root, rel) if rel else root), None
            continue
        for e in entries:
            child = join(rel, e.name)
            try:
                if e.is_dir(follow_symlinks=False):
                    if e.name not in excluded:
                        stack.append(child)
                elif e.is_file(follow_symlinks=False):
                    yield join(root, child), child
            except OSError:
                yield join(root, child), None


def file_filter(pattern: bytes) -> Callable[[bytes], bool]:
    """A pattern without ``/`` matches a file's name (with ``name_matcher``:
    ``*.py`` or ``*.{txt,md}`` import no ``re``); one with ``/`` matches its
    path relative to the search root (``**`` included)."""
    if b"/" not in pattern:
        names = [name_matcher(v) for v in expand_braces(pattern)]
        return lambda rel: any(match(basename(rel)) for match in names)
    regexes = [compile_glob(v[2:] if v.startswith(b"./") else v) for v in expand_braces(pattern)]
    return lambda rel: any(r.match(rel) for r in regexes)


#: What a file of the walk turned out to be (``UNREADABLE`` also stands for
#: what the walk itself could not read).
TEXT, BINARY, UNREADABLE, OTHER = range(4)


def grep(args: Args, blobs: Blobs) -> Tuple[GrepReply, Blobs]:
    root = path_arg(args)
    pattern = unb64(args["pattern"])
    matcher = line_matcher(pattern, args["fixed_strings"], args["ignore_case"])
    selected = file_filter(unb64(args["glob"])) if args.get("glob") is not None else None
    search = Search(matcher, args["max_matches"], args["max_line_bytes"], args["budget"])
    st = posix.stat(root)
    excluded = frozenset(unb64(name) for name in args["exclude_dirs"])
    walk = walk_files(root, excluded) if file_type(st.st_mode) == "dir" else iter([(root, basename(root))])
    for path, rel in walk:
        if not (rel and selected and not selected(rel)) and not search.file(path, rel is not None):
            break
    return {
        "matches": [(b64(path), number, b64(line), cut) for path, number, line, cut in search.matches],
        "truncated": search.truncated,
        "unreadable": [b64(p) for p in search.unreadable],
        "skipped_binary": search.skipped_binary,
    }, []


#: The characters that make a Python regex more than the text it is (no
#: ``re.VERBOSE``): a pattern without them matches itself, as a fixed string.
REGEX_SYNTAX = b".^$*+?{}[]\\|()"


def is_literal(pattern: bytes, fixed_strings: bool) -> bool:
    """Whether ``pattern`` is searched as the text it is: a fixed string, or
    a regex with none of :data:`REGEX_SYNTAX` (``fixed_strings=False`` is the
    default of many callers, for plain words too)."""
    return fixed_strings or not any(c in REGEX_SYNTAX for c in pattern)


def line_matcher(pattern: bytes, fixed_strings: bool, ignore_case: bool) -> Callable[[bytes], bool]:
    """Whether a line (bytes, no newline) matches: the pattern searched in the
    line decoded as UTF-8 (undecodable bytes kept as surrogates). A literal
    pattern that is valid UTF-8 is found in the line's bytes exactly where it
    is found in that text (a valid sequence decodes the same wherever it
    starts), with no ``re`` to import (~6 ms of a ~10 ms script); so is an
    ASCII one regardless of case in an ASCII line."""
    literal = is_literal(pattern, fixed_strings)
    if literal and pattern.isascii() and ignore_case:
        return ascii_folded(pattern)
    if literal and not ignore_case:
        try:
            pattern.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return lambda line: pattern in line
    return regex_matcher(pattern, literal, ignore_case)


def ascii_folded(pattern: bytes) -> Callable[[bytes], bool]:
    """``ignore_case`` for an ASCII literal: in an ASCII line, ``re``'s case
    folding is ASCII's, so the lowered pattern is in the lowered line exactly
    when ``re`` finds it; any other line goes to ``re`` (where ``k`` also
    matches the Kelvin sign, ``s`` the long s)."""
    folded = pattern.lower()
    unicode: List[Callable[[bytes], bool]] = []

    def matches(line: bytes) -> bool:
        if line.isascii():
            return folded in line.lower()
        if not unicode:
            unicode.append(regex_matcher(pattern, True, True))
        return unicode[0](line)

    return matches


def regex_matcher(pattern: bytes, literal: bool, ignore_case: bool) -> Callable[[bytes], bool]:
    """:func:`line_matcher` by ``re``."""
    import re

    text = pattern.decode("utf-8", "surrogateescape")
    try:
        regex = re.compile(re.escape(text) if literal else text, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise Fail("INVALID_ARGUMENT", "invalid regular expression: %s" % exc) from None
    return lambda line: regex.search(line.decode("utf-8", "surrogateescape")) is not None


def classify(path: bytes) -> int:
    """What ``path`` is: a regular text file (no NUL in its first bytes),
    binary, unreadable, or something else (never opened blocking)."""
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
    except OSError:
        return UNREADABLE
    try:
        if file_type(posix.fstat(fd).st_mode) != "file":
            return OTHER
        return BINARY if b"\0" in posix.read(fd, SNIFF_BYTES) else TEXT
    except OSError:
        return UNREADABLE
    finally:
        posix.close(fd)


def reply_size(match: Match) -> int:
    """Bytes ``match`` adds to the reply's JSON (the output budget counts
    them), as its :data:`GrepLine` and a comma, counted without encoding it:
    ``["<path>",<number>,"<line>",true]``, the strings base64 (4 characters
    for each 3 bytes begun)."""
    path, number, line, cut = match
    return (len(path) + 2) // 3 * 4 + len(str(number)) + (len(line) + 2) // 3 * 4 + (14 if cut else 15)


class Search:
    """The matches of one grep, file by file in walk order, within its caps."""

    def __init__(self, matches: Callable[[bytes], bool], limit: int, line_cap: int, budget: int) -> None:
        self.line_matches = matches
        self.limit = limit
        self.line_cap = line_cap
        self.budget = budget
        self.matches: List[Match] = []
        self.unreadable: List[bytes] = []
        self.truncated = False
        self.skipped_binary = 0

    def binary_matches(self, raw: bytes) -> bool:
        """Whether a line of a binary file matches: a NUL ends a line too, as
        GNU grep reads a binary file."""
        return any(self.line_matches(part.rstrip(b"\r\n")) for part in raw.split(b"\0"))

    def add(self, path: bytes, number: int, raw: bytes) -> bool:
        """Record line ``number`` (``raw``, newline or not) if it matches;
        ``False`` once the caps are reached."""
        line = raw.rstrip(b"\r\n")
        if not self.line_matches(line):
            return True
        if len(self.matches) >= self.limit:
            self.truncated = True
            return False
        match = (path, number, line[: self.line_cap], len(line) > self.line_cap)
        self.budget -= reply_size(match)
        if self.budget < 0:
            self.truncated = True
            return False
        self.matches.append(match)
        return True

    def file(self, path: bytes, is_file: bool) -> bool:
        """Search the file at ``path`` line by line (``is_file``: the walk
        could read it as one); ``False`` once the caps are reached."""
        kind = classify(path) if is_file else UNREADABLE
        if kind not in (TEXT, BINARY):
            if kind == UNREADABLE:
                self.unreadable.append(path)
            return True
        try:
            fd = posix.open(path, posix.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
            with open(fd, "rb") as f:
                if kind == BINARY:
                    self.skipped_binary += any(self.binary_matches(raw) for raw in f)
                    return True
                for number, raw in enumerate(f, 1):
                    if not self.add(path, number, raw):
                        return False
        except OSError:
            self.unreadable.append(path)
        return True


OPS = {"grep": grep}
