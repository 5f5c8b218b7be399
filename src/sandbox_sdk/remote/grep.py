"""Find lines by text or regex.

The walk uses ``scandir`` and follows no symlink below the root (as ``grep
-r`` and ripgrep do: a symlink loop cannot trap it, a link cannot lead it out
of the tree), never opens anything but regular files (so a FIFO or a device
cannot block it), and reports directories or files it could not read instead
of silently skipping them. A binary file (a NUL in its first 8 KiB) is not
searched line by line: it is counted in ``skipped_binary`` if it holds a
match, as GNU grep reports "binary file matches". A fixed string is searched
by GNU grep where the sandbox has it and the files are worth its start (see
``grep``); the client runs GNU grep
without this script first where it can (docs/protocol.md).
"""

from __future__ import annotations

import posix

from sandbox_sdk.remote._runtime import (
    DEV_NULL,
    TYPE_CHECKING,
    Fail,
    b64,
    basename,
    compile_glob,
    expand_braces,
    file_type,
    find_program,
    join,
    name_matcher,
    path_arg,
    unb64,
)

if TYPE_CHECKING:
    from typing import Callable, Iterator, List, Optional, Tuple, TypedDict

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


def walk_files(root: bytes) -> Iterator[Tuple[bytes, Optional[bytes]]]:
    """(path, path relative to root) of every regular file below ``root``,
    and (path, ``None``) for each directory or entry that could not be read,
    in walk order: depth first, a directory's files (by name, descending)
    before its subdirectories (by name, ascending); ``walk_key`` in
    ``sandbox_sdk._calls`` sorts GNU grep's output into this order."""
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


#: Files (and argument bytes) one run of GNU grep is given.
GREP_BATCH_FILES = 1000
GREP_BATCH_BYTES = 64 * 1024
#: The longest pattern GNU grep is given: Linux refuses an argument over
#: 128 KiB (``MAX_ARG_STRLEN``); a longer one is searched in Python.
GREP_PATTERN_BYTES = 64 * 1024
#: A batch of at most this many files, this many bytes together, is searched
#: in Python: GNU grep's start costs ~1.5 ms of CPU, as much as the Python
#: search of ~256 KiB of short lines (measured, docs/benchmarks.md).
SMALL_BATCH_FILES = 64
SMALL_BATCH_BYTES = 128 * 1024
READ_BLOCK = 1 << 16
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
    walk = walk_files(root) if file_type(st.st_mode) == "dir" else iter([(root, basename(root))])
    # (path, whether it is a file to search): unreadable places stay in walk order.
    items = ((path, rel is not None) for path, rel in walk if not (rel and selected and not selected(rel)))
    # GNU grep finds a fixed string's lines far faster than a Python loop,
    # once a batch is worth its start (looked up on PATH then, once). A
    # Python match is always a byte match too, so grep's lines (searched as
    # bytes) are a superset that the same regex then checks: the result is
    # the same either way.
    fixed = is_literal(pattern, args["fixed_strings"]) and not args["ignore_case"] and grep_takes(pattern)
    grep_exe = None
    looked = False
    for batch in batches(items) if fixed else ([item] for item in items):
        large = fixed and not small_batch(batch)
        if large and not looked:
            grep_exe, looked = find_program(b"grep"), True
        if not large or grep_exe is None or not search.grep_batch(grep_exe, pattern, batch):
            search.python_batch(batch)
        if search.truncated:
            break
    return {
        "matches": [(b64(path), number, b64(line), cut) for path, number, line, cut in search.matches],
        "truncated": search.truncated,
        "unreadable": [b64(p) for p in search.unreadable],
        "skipped_binary": search.skipped_binary,
    }, []


def grep_takes(pattern: bytes) -> bool:
    """Whether GNU grep can be given ``pattern`` as an argument: no NUL (no
    argument holds one) and within :data:`GREP_PATTERN_BYTES`."""
    return b"\0" not in pattern and len(pattern) <= GREP_PATTERN_BYTES


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


def batches(items: Iterator[Tuple[bytes, bool]]) -> Iterator[List[Tuple[bytes, bool]]]:
    """``items`` in groups whose files fit one command line."""
    batch: List[Tuple[bytes, bool]] = []
    size = 0
    for item in items:
        batch.append(item)
        size += len(item[0]) + 1
        if len(batch) >= GREP_BATCH_FILES or size >= GREP_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def small_batch(batch: List[Tuple[bytes, bool]]) -> bool:
    """Whether ``batch`` is few files of few bytes together (see
    :data:`SMALL_BATCH_BYTES`); a file that cannot be sized counts nothing
    (its search reports it)."""
    if len(batch) > SMALL_BATCH_FILES:
        return False
    return sum(size_of(path) for path, is_file in batch if is_file) <= SMALL_BATCH_BYTES


def size_of(path: bytes) -> int:
    try:
        return posix.stat(path).st_size
    except OSError:
        return 0


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

    def count(self, path: bytes, kind: int) -> None:
        if kind == UNREADABLE:
            self.unreadable.append(path)

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

    def python_batch(self, batch: List[Tuple[bytes, bool]]) -> None:
        """Search the files of ``batch`` line by line in Python."""
        for path, is_file in batch:
            kind = classify(path) if is_file else UNREADABLE
            if kind not in (TEXT, BINARY):
                self.count(path, kind)
                continue
            try:
                fd = posix.open(path, posix.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
                with open(fd, "rb") as f:
                    if kind == BINARY:
                        self.skipped_binary += any(self.binary_matches(raw) for raw in f)
                        continue
                    for number, raw in enumerate(f, 1):
                        if not self.add(path, number, raw):
                            return
            except OSError:
                self.unreadable.append(path)

    def grep_batch(self, grep_exe: bytes, pattern: bytes, batch: List[Tuple[bytes, bool]]) -> bool:
        """Search the files of ``batch`` with one GNU grep run (an argument
        vector, no shell), taking its lines as :meth:`python_batch` would;
        ``False`` (and nothing taken) if grep failed. The files are sniffed
        for binary content while grep runs."""
        files = [path for path, is_file in batch if is_file]
        grep_run = GrepRun(grep_exe, pattern, files) if files else None
        kinds = [(path, classify(path) if is_file else UNREADABLE) for path, is_file in batch]
        replay = Replay(self, kinds)
        if grep_run is None:
            return replay.finish()
        before = (len(self.matches), self.budget, len(self.unreadable), self.skipped_binary)
        if grep_run.feed(replay):
            return True
        del self.matches[before[0] :]
        del self.unreadable[before[2] :]
        self.budget, self.skipped_binary, self.truncated = before[1], before[3], False
        return False


class GrepRun:
    """One GNU grep process over some files: ``-a`` (every byte is text:
    the script decides what is binary), ``-F -n -H -Z``, devices and
    directories skipped, the C locale (bytes, not characters)."""

    def __init__(self, grep_exe: bytes, pattern: bytes, paths: List[bytes]) -> None:
        argv = [grep_exe, b"-a", b"-F", b"-n", b"-H", b"-Z", b"-D", b"skip", b"-d", b"skip"]
        argv += [b"-e", pattern, b"--", *paths]
        self.read_end, write_end = posix.pipe()
        null = posix.open(DEV_NULL, posix.O_RDWR | posix.O_CLOEXEC)
        try:
            self.pid = posix.posix_spawn(
                grep_exe,
                argv,
                {b"LC_ALL": b"C"},
                file_actions=[
                    (posix.POSIX_SPAWN_DUP2, null, 0),
                    (posix.POSIX_SPAWN_DUP2, write_end, 1),
                    (posix.POSIX_SPAWN_DUP2, null, 2),
                ],
            )
        finally:
            posix.close(write_end)
            posix.close(null)

    def feed(self, replay: Replay) -> bool:
        """Give grep's output to ``replay``; ``False`` if grep failed or its
        output did not read as expected."""
        try:
            taken = replay.take(self.read_end)
        finally:
            posix.close(self.read_end)  # a grep still writing ends on SIGPIPE
            _, status = posix.waitpid(self.pid, 0)
        if replay.search.truncated:
            return taken
        return taken and posix.WIFEXITED(status) and posix.WEXITSTATUS(status) in (0, 1)


class Replay:
    """Takes grep's lines into a :class:`Search` in walk order: a line of a
    text file is checked and added, a binary file is counted at its first
    matching line, and the unreadable files of the batch are counted as the
    walk reaches them, so that caps cut the result where the Python search
    would."""

    def __init__(self, search: Search, kinds: List[Tuple[bytes, int]]) -> None:
        self.search = search
        self.kinds = kinds
        self.next = 0  # the first item not yet reached
        self.current = (b"", OTHER)  # the item whose lines come now
        self.binary_counted = False  # the current item is a binary file already counted

    def reach(self, path: bytes) -> bool:
        """Count the items up to ``path``; ``False`` if it is not further on."""
        while self.next < len(self.kinds):
            self.current = self.kinds[self.next]
            self.next += 1
            self.binary_counted = False
            self.search.count(*self.current)
            if self.current[0] == path:
                return True
        return False

    def finish(self) -> bool:
        """Count what is left of the batch."""
        self.reach(b"")  # no item has an empty path
        return True

    def take(self, fd: int) -> bool:
        """Take the lines of grep's ``-HnZ`` output (``path NUL number : line
        LF``) read from ``fd``; ``False`` if it does not read as that. A line
        of many blocks is looked through once: ``scanned`` is where its
        newline is still to be looked for."""
        buffer = bytearray()
        start = scanned = 0
        while True:
            block = posix.read(fd, READ_BLOCK)
            if not block:
                break
            buffer += block
            while True:
                nul = buffer.find(b"\0", start)
                end = buffer.find(b"\n", max(nul + 1, scanned)) if nul >= 0 else -1
                if end < 0:
                    scanned = len(buffer) if nul >= 0 else start
                    break
                colon = buffer.find(b":", nul + 1, end)
                path = bytes(buffer[start:nul])
                number = buffer[nul + 1 : colon]
                if colon < 0 or not number.isdigit() or (path != self.current[0] and not self.reach(path)):
                    return False
                line = bytes(buffer[colon + 1 : end])
                kind = self.current[1]
                if kind == TEXT and not self.search.add(path, int(number), line):
                    return True
                if kind == BINARY and not self.binary_counted and self.search.binary_matches(line):
                    self.search.skipped_binary += 1
                    self.binary_counted = True
                start = scanned = end + 1
            del buffer[:start]
            scanned -= start
            start = 0
        return not buffer and self.finish()


OPS = {"grep": grep}
