"""Shared runtime of the in-sandbox scripts (shipped in front of every one).

Wire format (see docs/protocol.md):

* stdin: line 1 is base64 JSON arguments; every further line is one base64
  binary blob, referred to from the arguments by index.
* stdout: one line ``@@SANDBOX_SDK <nonce> <base64 JSON>[ <base64 blob>...]``.
  The nonce comes from the client, so nothing else in the output can forge it.
* exit status: one code from ``EXIT`` below, equal to the one in the frame.
"""

from __future__ import annotations

import binascii
import posix
import sys

try:  # the C half of ``stat``, built into CPython: importing ``stat`` itself costs every round trip
    import _stat as stat
except ImportError:  # another implementation
    import stat  # type: ignore[no-redef]

# Every import costs every round trip its start-up time, so the scripts
# import only what they use: no ``typing`` (names for the type checker
# only; the shipped script has no annotations), no ``base64`` or
# ``contextlib``, ``hashlib`` only where a digest is taken, not even
# ``json`` where CPython's accelerator can be used directly (see json_codec),
# and no ``os``: its system calls are ``posix``'s own (built in, loaded before
# any script runs), and its Python part (``os.path``, ``_collections_abc``
# for ``os.environ``) costs every round trip a sizeable share of an
# interpreter's start. The few path helpers the scripts need are below;
# what only a rare path needs (``os.makedirs``, ``os.path.realpath``,
# ``os.execvpe``) imports ``os`` where it is used.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import (
        IO,
        Any,
        BinaryIO,
        Callable,
        Dict,
        Iterable,
        List,
        Literal,
        Optional,
        Pattern,
        Tuple,
        TypedDict,
        Union,
    )

    Args = Dict[str, Any]
    Blobs = List[bytes]
    #: What a user's command runs: a shell command, or an argument vector.
    Program = Union[bytes, List[bytes]]
    Result = Tuple[Any, Blobs]
    Handler = Callable[[Args, Blobs], Result]

    # Reply values, one TypedDict per operation, declared next to the handler
    # that builds them (the client's typed calls import them from here).

    FileType = Literal["file", "dir", "symlink", "other"]

    class Entry(TypedDict):
        """One path as ``lstat`` sees it (``stat``; items of ``ls`` and ``glob``)."""

        path: str  # base64 of the raw path
        type: FileType
        size: int
        mtime: float
        mode: int  # permission bits

    class Empty(TypedDict):
        """The reply of an operation that only succeeds or fails."""


# The exit-code table. It stays clear of 1 and 2 (Python), 64-78 (sysexits),
# 124-128 (timeout(1) and the shell) and 128+n (signals). docs/protocol.md
# documents it and sandbox_sdk/protocol/frame.py mirrors it; a test keeps them equal.
EXIT = {
    "OK": 0,
    "INVALID_ARGUMENT": 80,
    "NOT_FOUND": 81,
    "IS_DIRECTORY": 82,
    "NOT_DIRECTORY": 83,
    "PERMISSION_DENIED": 84,
    "ALREADY_EXISTS": 85,
    "INVALID_PATH": 86,
    "NOT_TEXT": 87,
    "EDIT_NO_MATCH": 88,
    "EDIT_AMBIGUOUS": 89,
    "OUTPUT_LIMIT": 90,
    "INTEGRITY": 91,
    "NOT_EMPTY": 92,
    "OS_ERROR": 93,
    "NO_PROCESS": 94,
    "NO_STDIN": 95,
    "INTERNAL": 99,
}


def errno_code(number: int) -> str:
    """The ``EXIT`` name for an ``OSError``'s errno (``errno`` is imported
    only on this error path)."""
    import errno

    codes = {
        errno.ENOENT: "NOT_FOUND",
        errno.EISDIR: "IS_DIRECTORY",
        errno.ENOTDIR: "NOT_DIRECTORY",
        errno.EACCES: "PERMISSION_DENIED",
        errno.EPERM: "PERMISSION_DENIED",
        errno.EROFS: "PERMISSION_DENIED",
        errno.EEXIST: "ALREADY_EXISTS",
        errno.ENAMETOOLONG: "INVALID_PATH",
        errno.ENOTEMPTY: "NOT_EMPTY",
        errno.ELOOP: "INVALID_PATH",
    }
    return codes.get(number, "OS_ERROR")


FRAME_MARKER = "@@SANDBOX_SDK"
NAME_MAX = 255
#: Age after which a transfer's leftover ``.sbx-*`` file is swept (see sweep_stale).
STALE_SECONDS = 24 * 3600
#: Where a user's lock files for unreadable directories live (see DirLock).
LOCK_DIR = b"/tmp/.sbx-locks-%d"
HASH_BLOCK = 1 << 20
B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


class Fail(Exception):
    """An expected failure: ends the script with ``EXIT[code]``."""

    def __init__(self, code: str, message: str, path: Optional[bytes] = None, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.path = path
        self.extra = extra


def b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def unb64(text: str | bytes) -> bytes:
    """Strict base64: padded, only the alphabet, ``=`` only at the end
    (``binascii`` alone skips stray characters before Python 3.11)."""
    raw = text.encode("ascii") if isinstance(text, str) else text
    pad = raw.find(b"=")
    if (
        len(raw) % 4
        or raw.translate(None, B64_ALPHABET)
        or (pad >= 0 and (pad < len(raw) - 2 or raw[pad:].strip(b"=")))
    ):
        raise binascii.Error("invalid base64")
    return binascii.a2b_base64(raw)


def sha256_hex(blocks: Iterable[bytes]) -> str:
    import hashlib  # not at start-up: loading OpenSSL costs a round trip milliseconds

    digest = hashlib.sha256()
    for block in blocks:
        digest.update(block)
    return digest.hexdigest()


def file_sha256(f: IO[bytes]) -> str:
    """SHA-256 of what is left in ``f``, read a block at a time."""
    return sha256_hex(iter(lambda: f.read(HASH_BLOCK), b""))


def path_arg(args: Args, key: str = "path") -> bytes:
    """Decode and check a path argument: raw bytes, never a mangled string."""
    raw = args.get(key)
    if not isinstance(raw, str):
        raise Fail("INVALID_ARGUMENT", "argument %r must be a path" % key)
    path = unb64(raw)
    check_path(path)
    return path


def check_path(path: bytes) -> None:
    if not path:
        raise Fail("INVALID_PATH", "path is empty", path)
    if b"\0" in path:
        raise Fail("INVALID_PATH", "path contains a NUL byte", path)
    for part in path.split(b"/"):
        if len(part) > NAME_MAX:
            raise Fail("INVALID_PATH", "a path component is longer than %d bytes" % NAME_MAX, path)


def fail_from_oserror(exc: OSError, path: Optional[bytes] = None) -> Fail:
    code = errno_code(exc.errno or 0)
    where = path if path is not None else _as_bytes(exc.filename)
    return Fail(code, exc.strerror or str(exc), where, errno=exc.errno)


def _as_bytes(name: Any) -> Optional[bytes]:
    if isinstance(name, bytes):
        return name
    if isinstance(name, str):
        return fsencode(name)
    return None


# -- what the scripts need of ``os`` and ``os.path`` (on POSIX, as they do it) ----------

DEV_NULL = b"/dev/null"
SEEK_SET = 0


def fsencode(name: str) -> bytes:
    """``os.fsencode(name)``."""
    return name.encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def fsdecode(name: bytes) -> str:
    """``os.fsdecode(name)``."""
    return name.decode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def dirname(path: bytes) -> bytes:
    """``os.path.dirname(path)``."""
    head = path[: path.rfind(b"/") + 1]
    if head and head != b"/" * len(head):
        head = head.rstrip(b"/")
    return head


def basename(path: bytes) -> bytes:
    """``os.path.basename(path)``."""
    return path[path.rfind(b"/") + 1 :]


def join(parent: bytes, name: bytes) -> bytes:
    """``os.path.join(parent, name)``."""
    if name.startswith(b"/") or not parent:
        return name
    return parent + name if parent.endswith(b"/") else parent + b"/" + name


def mode_of(path: bytes, follow_symlinks: bool = True) -> int:
    """``path``'s ``st_mode``, 0 if it cannot be had (as ``os.path``'s
    predicates treat a path they cannot ``stat``)."""
    try:
        return posix.stat(path, follow_symlinks=follow_symlinks).st_mode
    except (OSError, ValueError):
        return 0


def is_dir(path: bytes) -> bool:
    """``os.path.isdir(path)``."""
    return stat.S_ISDIR(mode_of(path))


def is_file(path: bytes) -> bool:
    """``os.path.isfile(path)``."""
    return stat.S_ISREG(mode_of(path))


def is_link(path: bytes) -> bool:
    """``os.path.islink(path)``."""
    return stat.S_ISLNK(mode_of(path, follow_symlinks=False))


def lexists(path: bytes) -> bool:
    """``os.path.lexists(path)``."""
    try:
        posix.lstat(path)
    except (OSError, ValueError):
        return False
    return True


def file_type(mode: int) -> FileType:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def entry(path: bytes, st: posix.stat_result) -> Entry:
    return {
        "path": b64(path),
        "type": file_type(st.st_mode),
        "size": st.st_size,
        "mtime": st.st_mtime,
        "mode": stat.S_IMODE(st.st_mode),
    }


def listing(items: List[Tuple[bytes, posix.stat_result]]) -> bytes:
    """Entries (of ``ls`` and ``glob``) as one zlib-compressed blob: a line
    of JSON columns, ``sizes``, ``mtimes`` (as ``st_mtime_ns``: integers
    encode at a fifth of a float's cost) and ``modes`` (the whole
    ``st_mode``, file type bits included), then the paths as they are, each
    after the first preceded by a NUL (which no path holds). Names share
    prefixes and the columns repeat, so a listing travels at a fraction of
    one object per entry; level 1 compresses at a tenth of level 9's cost."""
    import zlib

    columns = {
        "sizes": [st.st_size for _, st in items],
        "mtimes": [st.st_mtime_ns for _, st in items],
        "modes": [st.st_mode for _, st in items],
    }
    head = json_dumps(columns).encode("ascii")
    return zlib.compress(b"\n".join([head, b"\0".join([path for path, _ in items])]), 1)


def fitted_listing(
    items: List[Tuple[bytes, posix.stat_result]], budget: int, least: int
) -> Tuple[bytes, int]:
    """The listing of as many of ``items`` (at least ``least``) as fit in
    ``budget`` bytes, and how many that is."""
    count = len(items)
    while True:
        packed = listing(items[:count])
        if len(packed) <= budget or count <= least:
            return packed, count
        count = max(least, min(count - 1, count * budget // len(packed) * 9 // 10))


def open_regular(path: bytes) -> BinaryIO:
    """Open a regular file for reading; never block on a FIFO or a device."""
    fd = posix.open(path, posix.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
    mode = posix.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        posix.close(fd)
        raise Fail("IS_DIRECTORY", "is a directory", path)
    if not stat.S_ISREG(mode):
        posix.close(fd)
        raise Fail("INVALID_ARGUMENT", "not a regular file", path)
    return open(fd, "rb")


def temp_name(dest: bytes, token: str) -> bytes:
    """The staging file for ``dest``: hidden, in the same directory (so the
    final rename is atomic), short enough for any valid ``dest``."""
    parent = dirname(dest)
    name = b".sbx-" + token.encode("ascii") + b".tmp"
    return join(parent, name) if parent else name


def resolve_target(dest: bytes) -> bytes:
    """Writes go through a symlink to its target, as ``open()`` would."""
    if not is_link(dest):
        return dest
    import os  # only here: see the imports above

    return os.path.realpath(dest)


def check_destination(dest: bytes, overwrite: bool) -> Optional[posix.stat_result]:
    """Fail early if ``dest`` cannot be (re)placed: a directory, an existing
    file without ``overwrite``, or one the user may not write. Return its stat
    if it exists."""
    try:
        st = posix.stat(dest)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fail_from_oserror(exc, dest) from None
    if stat.S_ISDIR(st.st_mode):
        raise Fail("IS_DIRECTORY", "destination is a directory", dest)
    if not overwrite:
        raise Fail("ALREADY_EXISTS", "file already exists (pass overwrite=True to replace it)", dest)
    if not posix.access(dest, posix.W_OK):
        # The rename would need only the directory's permission; replacing a
        # file the user may not write is refused as writing it in place would
        # be. ``posix.access`` asks the kernel, so root passes as it would there.
        raise Fail("PERMISSION_DENIED", "no permission to write the file", dest)
    return st


def make_parents(dest: bytes) -> None:
    parent = dirname(dest)
    if parent and not is_dir(parent):
        import os  # only where a directory is missing

        try:
            os.makedirs(parent, exist_ok=True)
        except FileExistsError:
            raise Fail("NOT_DIRECTORY", "a parent of the path is not a directory", dest) from None
        except OSError as exc:
            raise fail_from_oserror(exc, dest) from None


def staging_failure(exc: OSError, dest: bytes) -> Fail:
    """A failure to write ``dest`` through its staging file, named as the caller
    named it: the staging file's name is the SDK's, not theirs."""
    return Fail(
        errno_code(exc.errno or 0), "cannot write the file: %s" % (exc.strerror or exc), dest, errno=exc.errno
    )


def write_new(tmp: bytes, data: bytes, dest: bytes) -> None:
    """``data`` into the new staging file ``tmp`` of ``dest``."""
    try:
        fd = posix.open(tmp, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[posix.write(fd, view) :]
            posix.fsync(fd)
        finally:
            posix.close(fd)
    except OSError as exc:
        raise staging_failure(exc, dest) from None


def commit(tmp: bytes, dest: bytes, overwrite: bool) -> None:
    """Move a fully written, fsynced ``tmp`` onto ``dest`` in one step.

    Replacing keeps the old file's permission bits; creating uses ``link`` so a
    file that appeared meanwhile is never clobbered. ``tmp`` is gone afterwards
    whatever happens."""
    try:
        st = check_destination(dest, overwrite)
        if st is not None:
            posix.chmod(tmp, stat.S_IMODE(st.st_mode))
            posix.rename(tmp, dest)
        else:
            try:
                posix.link(tmp, dest)
            except FileExistsError:
                if not overwrite:
                    raise Fail("ALREADY_EXISTS", "file already exists", dest) from None
                posix.rename(tmp, dest)
        sync_dir(dirname(dest) or b".")
    except OSError as exc:
        raise fail_from_oserror(exc, dest) from None
    finally:
        remove_quietly(tmp)


def sync_dir(path: bytes) -> None:
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
    except OSError:
        return
    try:
        posix.fsync(fd)
    except OSError:
        pass
    finally:
        posix.close(fd)


def sweep_stale(directory: bytes, now: float) -> None:
    """Remove the ``.sbx-*`` files and symlinks in ``directory`` older than a
    day: staging files, archives and upload links that transfers interrupted
    past their clean-up left (directories, such as ``DirLock``'s, are kept).
    ``now`` is the mtime of what the caller just made there (no ``time``
    import for it)."""
    cutoff = now - STALE_SECONDS
    try:
        with posix.scandir(directory or b".") as entries:
            stale = [
                e.path
                for e in entries
                if e.name.startswith(b".sbx-")
                and (e.is_file(follow_symlinks=False) or e.is_symlink())
                and e.stat(follow_symlinks=False).st_mtime < cutoff
            ]
    except OSError:
        return  # best effort: never a reason for the transfer to fail
    for path in stale:
        remove_quietly(path)


def find_program(name: bytes) -> Optional[bytes]:
    """``name``'s executable on ``PATH`` (``shutil.which`` would cost an import)."""
    for folder in posix.environ.get(b"PATH", b"").split(b":"):
        candidate = join(folder or b".", name)
        if is_file(candidate) and posix.access(candidate, posix.X_OK):
            return candidate
    return None


def remove_quietly(path: bytes) -> None:
    try:  # noqa: SIM105 - contextlib would cost every round trip an import
        posix.unlink(path)
    except OSError:
        pass


class DirLock:
    """An exclusive ``flock`` serialising the writers of a directory's files.

    Locking the directory, not the file, survives the rename that replaces the
    file's inode, and leaves no lock file behind. A directory the user may
    write but not read (mode 0333) cannot be opened to lock: then a lock file
    named by the directory's device and inode, in a private directory of the
    user's under ``/tmp``, stands for it (the same user always takes the same
    one, as readability is the same for all of that user's writers). When
    neither can be had the operation fails: it never runs unlocked."""

    def __init__(self, path: bytes) -> None:
        self.path = dirname(path) or b"."
        self.fd = -1

    def __enter__(self) -> "DirLock":
        import fcntl

        try:
            self.fd = posix.open(self.path, posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return self  # no directory to write in: the operation reports it
        except PermissionError:
            self.fd = self._open_stand_in()
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def _open_stand_in(self) -> int:
        """The lock file standing for an unreadable directory."""
        try:
            st = posix.stat(self.path)
            private = LOCK_DIR % posix.geteuid()
            import os  # only for an unreadable directory

            os.makedirs(private, 0o700, exist_ok=True)
            own = posix.lstat(private)
            if not stat.S_ISDIR(own.st_mode) or own.st_uid != posix.geteuid():
                import errno

                raise PermissionError(errno.EACCES, "not a private directory", private)
            name = b"%x-%x" % (st.st_dev, st.st_ino)
            flags = posix.O_RDONLY | posix.O_CREAT | posix.O_NOFOLLOW | posix.O_CLOEXEC
            return posix.open(join(private, name), flags, 0o600)
        except OSError as exc:
            raise Fail(
                "PERMISSION_DENIED",
                "cannot lock the unreadable directory: %s" % (exc.strerror or exc),
                self.path,
            ) from None

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            posix.close(self.fd)  # closing releases the lock


# -- glob patterns (glob, and grep's file filter) --------------------------------


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
    import re  # only where a pattern is compiled: importing it costs as much as a small script

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
    import re

    body = pattern[start:end]
    negate = body[:1] in (b"!", b"^")
    if negate:
        body = body[1:]
    # Only ``-`` keeps its meaning; escapes, brackets and set operators are characters.
    special = re.compile(rb"[\\\[\]&~|^]")
    return b"[" + (b"^" if negate else b"") + special.sub(rb"\\\g<0>", body) + b"]", end + 1


def name_matcher(segment: bytes) -> Callable[[bytes], Any]:
    """Whether a name (never holding ``/``) matches one segment of a glob,
    as ``compile_glob(segment).match`` says. A segment whose only wildcard
    is ``*`` (``*.py``, ``test_*``: most of them) is matched with ``bytes``
    methods: most globs then need no ``re``, whose import is costly."""
    if b"?" in segment or b"[" in segment:
        return compile_glob(segment).match
    parts = segment.split(b"*")
    head, middle, tail = parts[0], parts[1:-1], parts[-1]
    least = len(segment) - len(parts) + 1
    if len(parts) == 1:
        return segment.__eq__
    if not any(middle):
        return lambda name: len(name) >= least and name.startswith(head) and name.endswith(tail)

    def match(name: bytes) -> bool:
        if len(name) < least or not name.startswith(head) or not name.endswith(tail):
            return False
        at, end = len(head), len(name) - len(tail)
        for part in middle:  # each as early as it occurs leaves the most room for the rest
            at = name.find(part, at, end)
            if at < 0:
                return False
            at += len(part)
        return True

    return match


def compile_glob(pattern: bytes) -> Pattern[bytes]:
    import re

    try:
        return re.compile(translate(pattern) + b"\\Z", re.DOTALL)
    except re.error as exc:  # a reversed range such as ``[z-a]``
        raise Fail("INVALID_ARGUMENT", "invalid glob pattern %r: %s" % (pattern, exc)) from None


# -- commands (the run and proc modules) -----------------------------------------------
#
# Exit status, one rule: 0-255 from the command, 128+N when a signal N killed
# it, 124 with ``timed_out`` at our own timeout. A command's group is killed
# when the command ends (with what it left running in the background), as
# ``execute`` does at its timeout. ``signal``, ``select`` and ``time`` are
# imported where used: no other script pays for them.

TIMEOUT_STATUS = 124
READ_BYTES = 1 << 16
#: Seconds output is still collected from what a command left running
#: after it exited, before its group is killed.
DRAIN_SECONDS = 0.2
#: What one ``[stream, length]`` run costs a reply's budget, at most.
ORDER_ENTRY_BYTES = 24
#: Commands longer than this (Linux caps one argument at 128 KiB) reach bash
#: in a file it sources, which closes it before running anything.
ARGV_COMMAND_BYTES = 96 * 1024


def exit_status(status: int) -> int:
    if posix.WIFSIGNALED(status):
        return 128 + posix.WTERMSIG(status)
    return posix.WEXITSTATUS(status)


def prepare(args: Args, blobs: Blobs) -> Tuple[Program, Dict[bytes, bytes], int]:
    """The program (a shell command, or an argument vector run without a
    shell), its environment and its stdin; enters ``cwd``. A program too
    large for the command was staged (``program``: a JSON file of the
    arguments below, removed once read)."""
    if "program" in args:
        path = unb64(args["program"])
        with open(path, "rb") as staged:
            args = dict(args, **json_loads(staged.read().decode("ascii")))
        posix.unlink(path)
    if args.get("cwd") is not None:
        cwd = unb64(args["cwd"])
        check_path(cwd)
        posix.chdir(cwd)
    env = dict(posix.environ)  # bytes on POSIX, as os.environb
    for key, value in args.get("env", {}).items():
        env[unb64(key)] = unb64(value)
    stdin = args.get("stdin")
    if isinstance(stdin, int):
        fd = memory_file("stdin")
        write_all(fd, blobs[stdin])
        posix.lseek(fd, 0, SEEK_SET)
    elif isinstance(stdin, str):  # staged earlier because it was too large for the command
        path = unb64(stdin)
        fd = posix.open(path, posix.O_RDONLY)
        posix.unlink(path)
    else:
        fd = posix.open(DEV_NULL, posix.O_RDONLY)
    program = [unb64(arg) for arg in args["argv"]] if "argv" in args else unb64(args["command"])
    return program, env, fd


#: Bytes an argument may hold and still be shown without quotes (as shlex.quote leaves them).
SHELL_SAFE = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_"


def shown(program: Program) -> bytes:
    """A program as a shell command, for records and messages."""
    if isinstance(program, bytes):
        return program
    return b" ".join(
        arg if arg and not arg.strip(SHELL_SAFE) else b"'" + arg.replace(b"'", b"'\"'\"'") + b"'"
        for arg in program
    )


def memory_file(name: str) -> int:
    """An anonymous file: in memory where the kernel has ``memfd_create``."""
    return posix.memfd_create(name) if hasattr(posix, "memfd_create") else anonymous_file()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[posix.write(fd, view) :]


def anonymous_file() -> int:
    import tempfile

    fd, path = tempfile.mkstemp()
    posix.unlink(path)
    return fd


def launch(
    program: Program, env: Dict[bytes, bytes], fds: List[int], group: int, terminal: bool = False
) -> int:
    """Start ``program`` (``bash -c`` a command, or an argument vector as it
    is) with ``fds`` as its 0, 1 and 2, in process group ``group`` (0: a
    group of its own); a failed exec is a ``Fail``: for an argument vector,
    ``PERMISSION_DENIED`` or ``NOT_FOUND`` as its errno says. With
    ``terminal`` (``fds`` all a pseudo-terminal's slave) it leads a session
    of its own whose controlling terminal that is, so the terminal's line
    discipline signals its foreground group (Ctrl-C, window changes)."""
    import errno
    import os  # for os.execvpe, its search of PATH as the shell does it
    import signal

    command = program if isinstance(program, bytes) else b""
    script = command
    if len(command) > ARGV_COMMAND_BYTES:  # too long for one argument: bash sources it from a file
        source = memory_file("command")
        write_all(source, b"exec %d<&-; " % source)
        write_all(source, command)
        posix.lseek(source, 0, SEEK_SET)
        script = b". /dev/fd/%d" % source
    report_r, report_w = posix.pipe()
    pid = posix.fork()
    if pid == 0:
        try:
            posix.close(report_r)
            if terminal:
                posix.setsid()
            else:
                posix.setpgid(0, group)
            for target, fd in enumerate(fds):
                posix.dup2(fd, target)
            if terminal:
                import fcntl
                import termios

                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            if script is not command:
                posix.set_inheritable(source, True)
            for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):  # Python ignores the first two
                signal.signal(number, signal.SIG_DFL)
            if terminal:  # the keys' signals reach the program even if whoever started us ignored them
                for number in (signal.SIGINT, signal.SIGQUIT):  # (a shell does so for a command run with &)
                    signal.signal(number, signal.SIG_DFL)
            if isinstance(program, list):
                os.execvpe(program[0], program, env)
            os.execvpe(b"bash", [b"bash", b"-c", script], env)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, then this copy ends
            reason = getattr(exc, "errno", None) or 0
            message = posix.strerror(reason) if reason else str(exc)
            posix.write(report_w, b"%d %s" % (reason, message.encode("utf-8", "replace")))
        finally:
            posix._exit(127)
    posix.close(report_w)
    if script is not command:
        posix.close(source)
    if not terminal:  # (a session leader cannot be made one: its own setsid would fail)
        join_group(pid, group or pid)  # also here, so the group exists whichever runs first
    failure = posix.read(report_r, 4096)
    posix.close(report_r)
    if failure:
        posix.waitpid(pid, 0)
        reason, _, message = failure.decode("utf-8", "replace").partition(" ")
        if isinstance(program, bytes):
            raise Fail("NOT_FOUND", "cannot start bash: %s" % message)
        code = "PERMISSION_DENIED" if int(reason) in (errno.EACCES, errno.EPERM) else "NOT_FOUND"
        raise Fail(code, "cannot run %s: %s" % (fsdecode(program[0]), message), program[0])
    return pid


def join_group(pid: int, group: int) -> None:
    try:  # noqa: SIM105 - contextlib would cost every round trip an import
        posix.setpgid(pid, group)
    except OSError:
        pass  # the child did it itself, and may have exec'd since


def kill_group(group: int, number: int) -> None:
    try:  # noqa: SIM105 - as above
        posix.killpg(group, number)
    except OSError:
        pass  # nothing of the group is left


def child_wakeups() -> int:
    """A descriptor that becomes readable whenever a child exits, so a
    ``poll`` wakes at the exit instead of at its next timeout."""
    import signal

    wake_r, wake_w = posix.pipe()
    posix.set_blocking(wake_r, False)
    posix.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda number, frame: None)
    signal.set_wakeup_fd(wake_w)
    return wake_r


def drain(fd: int) -> None:
    try:
        while posix.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def to_null(*targets: int) -> None:
    null = posix.open(DEV_NULL, posix.O_RDWR)
    for target in targets:
        posix.dup2(null, target)
    posix.close(null)


def guard(watched: int, spare: int) -> int:
    """Fork the guard of a new process group: it waits on the pipe ``watched``
    (whose other end, ``spare``, only the caller holds) and kills its whole
    group once that closes, so a command in the group dies with the caller
    even when the caller is killed. Its pid is the group's id."""
    pid = posix.fork()
    if pid == 0:
        try:
            posix.setpgid(0, 0)
            posix.close(spare)
            to_null(0, 1, 2)
            while posix.read(watched, 1):
                pass
            posix.killpg(0, 9)  # SIGKILL
        finally:
            posix._exit(0)
    join_group(pid, pid)
    posix.close(watched)
    return pid


#: ``errno``'s EIO: what reading a terminal's master gives once every
#: descriptor of its slave is closed (where a pipe gives its end).
EIO = 5


def read_output(fd: int) -> bytes:
    """A piece of output from ``fd``; ``b""`` at its end."""
    try:
        return posix.read(fd, READ_BYTES)
    except OSError as exc:
        if exc.errno != EIO:
            raise
        return b""


class Pumps:
    """The command's output (two pipes, or a terminal's master), read as data
    arrives, and its exit. ``feeder``, if given, is handed the poller to
    register descriptors of its own (``attach``) and is called with their
    events (``ready``): a detached command's stdin is fed in the same loop."""

    def __init__(
        self, pid: int, pipes: List[int], wake: int, deadline: Optional[float], feeder: Any = None
    ) -> None:
        import select

        self.pid = pid
        self.open = {fd: stream for stream, fd in enumerate(pipes)}
        self.wake = wake
        self.deadline = deadline
        self.poller = select.poll()
        for fd in [wake, *pipes]:
            self.poller.register(fd, select.POLLIN)
        self.feeder = feeder
        if feeder is not None:
            feeder.attach(self.poller)
        self.status = None  # type: Optional[int]
        self.drain_until = 0.0
        self.timed_out = False

    def pieces(self) -> Iterable[Tuple[int, bytes]]:
        """``(stream, data)`` as the command writes, until it ended (and what it
        left running has had ``DRAIN_SECONDS`` to finish writing) or timed out."""
        import time

        while True:
            now = time.monotonic()
            if self.status is None:
                pid, status = posix.waitpid(self.pid, posix.WNOHANG)
                if pid:
                    self.status = exit_status(status)
                    self.drain_until = now + DRAIN_SECONDS
            if self.status is not None and (not self.open or now >= self.drain_until):
                return
            if self.status is None and self.deadline is not None and now >= self.deadline:
                self.timed_out = True
                return
            limit = self.drain_until if self.status is not None else self.deadline
            timeout = -1 if limit is None else max(0, int((limit - now) * 1000) + 1)
            for fd, events in self.poller.poll(timeout):
                if fd == self.wake:
                    drain(fd)
                    continue
                if fd not in self.open:
                    self.feeder.ready(fd, events)
                    continue
                data = read_output(fd)
                if data:
                    yield self.open[fd], data
                else:
                    self.poller.unregister(fd)
                    del self.open[fd]
                    posix.close(fd)

    def finish(self, group: int) -> int:
        """Kill what is left of ``group``; the exit status (124 after a timeout)."""
        kill_group(group, 9)  # SIGKILL
        if self.status is None:
            _, status = posix.waitpid(self.pid, 0)
            self.status = exit_status(status)
        return TIMEOUT_STATUS if self.timed_out else self.status


def deadline_of(args: Args) -> Optional[float]:
    import time

    timeout = args.get("timeout")
    return None if timeout is None else time.monotonic() + float(timeout)


class _ScanContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: plain JSON."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity


def _unserializable(value: Any) -> Any:
    raise TypeError("%s is not JSON serializable" % type(value).__name__)


JSON_PROBE = '{"a":[1,-2.5,true,false,null,"\\u00e9\\n"],"b":{}}'
JSON_PROBE_VALUE = {"a": [1, -2.5, True, False, None, "\u00e9\n"], "b": {}}


def json_codec() -> Tuple[Callable[[Union[str, bytes]], Any], Callable[[Any], str]]:
    """``json.loads`` and a compact, ASCII ``json.dumps``, from CPython's own
    accelerator ``_json`` when it is there and behaves on a probe.

    Importing ``json`` (for its import of ``re``) costs every round trip a
    third of a ``stat``; ``json`` is still the fallback, for another
    implementation or a version whose accelerator differs."""
    try:
        import _json

        scan = _json.make_scanner(_ScanContext())  # type: ignore[arg-type]  # duck-typed by CPython
        encoder = _json.make_encoder(
            None, _unserializable, _json.encode_basestring_ascii, None, ":", ",", False, False, True
        )

        def loads(text: Union[str, bytes]) -> Any:
            if not isinstance(text, str):
                text = text.decode("utf-8")
            try:
                value, end = scan(text, 0)
            except StopIteration:
                raise ValueError("not a JSON document") from None
            if end != len(text):
                raise ValueError("data after the JSON document")
            return value

        def dumps(value: Any) -> str:
            return "".join(encoder(value, 0))

        if loads(JSON_PROBE) != JSON_PROBE_VALUE or dumps(JSON_PROBE_VALUE) != JSON_PROBE:
            raise ValueError("_json does not behave as json does here")
        return loads, dumps
    except Exception:  # noqa: BLE001 - any trouble with the accelerator: the real thing
        import json

        return json.loads, lambda value: json.dumps(value, separators=(",", ":"))


json_loads, json_dumps = json_codec()


def read_payload() -> Tuple[Args, Blobs]:
    lines = sys.stdin.buffer.read().split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the heredoc's final newline (an empty blob is an empty line)
    if not lines:
        raise Fail("INVALID_ARGUMENT", "no payload on stdin")
    try:
        args = json_loads(unb64(lines[0]))
        blobs = [unb64(line) for line in lines[1:]]
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise Fail("INVALID_ARGUMENT", "malformed payload: %s" % exc) from None
    if not isinstance(args, dict):
        raise Fail("INVALID_ARGUMENT", "payload is not an object")
    return args, blobs


def emit(nonce: str, body: Dict[str, Any], blobs: Blobs) -> None:
    out = sys.stdout.buffer
    head = " ".join([FRAME_MARKER, nonce, b64(json_dumps(body).encode("ascii"))])
    out.write(b"\n" + head.encode("ascii"))
    for blob in blobs:  # written one by one: no joined copy of megabytes of base64
        out.write(b" ")
        out.write(binascii.b2a_base64(blob, newline=False))
    out.write(b"\n")
    out.flush()


def describe(failure: Fail) -> Dict[str, Any]:
    """The JSON form of a failure, as the client's ``error_from`` reads it."""
    error = {"code": EXIT[failure.code], "name": failure.code, "message": failure.message}
    if failure.path is not None:
        error["path"] = b64(failure.path)
    error.update(failure.extra)
    return error


def as_failure(exc: Exception) -> Fail:
    """Per-item failures in batch operations: expected errors become ``Fail``."""
    if isinstance(exc, Fail):
        return exc
    if isinstance(exc, OSError):
        return fail_from_oserror(exc)
    return Fail("INTERNAL", "%s: %s" % (type(exc).__name__, exc))


def main(ops: Dict[str, Handler]) -> None:
    nonce = "-"
    try:
        args, blobs = read_payload()
        nonce = str(args.get("nonce", "-"))
        handler = ops.get(str(args.get("op")))
        if handler is None:
            raise Fail("INVALID_ARGUMENT", "unknown operation %r" % args.get("op"))
        value, out_blobs = handler(args, blobs)
    except Fail as exc:
        failure = exc
    except OSError as exc:
        failure = fail_from_oserror(exc)
    except Exception:  # noqa: BLE001 - reported as an error, never passed off as data
        import traceback  # only here: every import costs each round trip's start-up time

        failure = Fail("INTERNAL", "unexpected error inside the sandbox:\n" + traceback.format_exc(limit=5))
    else:
        emit(nonce, {"ok": True, "value": value}, out_blobs)
        sys.exit(0)
    emit(nonce, {"ok": False, "error": describe(failure)}, [])
    sys.exit(EXIT[failure.code])
