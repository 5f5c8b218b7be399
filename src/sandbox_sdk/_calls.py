"""The ``execute()`` round trips an operation yields, one class per way of
decoding the reply.

- :class:`ScriptCall` runs an operation of an in-sandbox script and decodes
  its result frame into ``(value, blobs)``; :class:`LazyScriptCall` leaves
  the blobs base64 until the caller takes them in.
- :class:`CommandCall` runs the user's command in a script (``run``): it
  gets the provider's default timeout, as ``execute`` does, and a response
  the provider cut at its timeout is its reply (``None``), not an error.

A call is typed by its reply: ``reply = yield from call`` inside an operation
yields the call to the driver and gives back the reply as the call's type
says. Each operation of a script is declared once below as a :class:`Script`
typed by the reply the script declares (the ``TypedDict`` s in
``remote/<module>.py``), so ``mypy`` checks every field an operation reads.
The operation's name picks the module that runs it.
"""

from __future__ import annotations

import base64
import binascii
import gc
import json
import posixpath
import re
import secrets
import shlex
import sys
import zlib
from abc import ABC, abstractmethod
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar, cast

from pydantic import TypeAdapter

from sandbox_sdk import errors, protocol
from sandbox_sdk.models import ExecuteResponse, FileInfo, FileType, GlobResult, GrepMatch, GrepResult
from sandbox_sdk.protocol import Blob, LazyBlob
from sandbox_sdk.remote.grep import Search, line_matcher

if TYPE_CHECKING:
    from sandbox_sdk._session import Session
    from sandbox_sdk.remote._runtime import Empty, Entry
    from sandbox_sdk.remote.archive import CreateReply, ExtractReply
    from sandbox_sdk.remote.edit import EditedReply, EditReply
    from sandbox_sdk.remote.get import ChunkReply, GetManyReply
    from sandbox_sdk.remote.glob import GlobReply
    from sandbox_sdk.remote.grep import GrepReply
    from sandbox_sdk.remote.ls import LsReply
    from sandbox_sdk.remote.proc import FollowReply, ProcessesReply, SignalReply, SpawnReply
    from sandbox_sdk.remote.read import ReadReply
    from sandbox_sdk.remote.run import RunReply
    from sandbox_sdk.remote.write import LandedReply, PutManyReply, SettledReply, SizeReply, StageReply

R = TypeVar("R")
V = TypeVar("V")

#: A script's decoded reply: its value and its blobs.
Reply: TypeAlias = tuple[V, list[Blob]]


def check_command(command: object) -> bytes:
    """A user's command in UTF-8. A command must be text a shell can be given:
    not a NUL (no argument can hold one), nor a lone surrogate (no encoding
    can); either is an :class:`~sandbox_sdk.errors.InvalidArgumentError`
    before any round trip (``run`` checks it, and so does the provider kit's
    ``bash_script`` for every ``execute`` built on it)."""
    if not isinstance(command, str):
        raise errors.InvalidArgumentError(f"command must be a str, not {type(command).__name__}")
    if "\0" in command:
        raise errors.InvalidArgumentError("command contains a NUL character")
    try:
        return command.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.InvalidArgumentError(
            f"command is not valid Unicode text: {exc.reason} at {exc.start}"
        ) from None


class Call(ABC, Generic[R]):
    """One ``execute()`` round trip whose decoded reply is an ``R``."""

    what: str
    timeout: float | None
    #: The call only reads, so a cancelled async caller need not wait for it
    #: to finish (a poll of a process: its clean-up, the kill, goes at once).
    interruptible: bool = False

    @abstractmethod
    def command(self, max_bytes: int, scripts: Session) -> tuple[str, str]:
        """The command to run and the nonce its result must carry; a script
        command over ``max_bytes`` is refused before it is sent. A script is
        installed in (and run from) the sandbox's scratch directory, and left
        out of the command once ``scripts`` knows it is there."""

    def resend(self, scripts: Session, response: ExecuteResponse, nonce: str) -> bool:
        """Whether the command must be sent again, in full: it left out a
        script whose installed copy was missing (the script never started)."""
        return False

    @abstractmethod
    def decode(self, response: ExecuteResponse, nonce: str) -> R:
        """The reply, from the command's response; or the error it reports."""

    def timeout_or(self, default: float) -> float | None:
        """This call's timeout: its own, else ``default`` (``operation_timeout``)."""
        return default if self.timeout is None else self.timeout

    def __iter__(self) -> Generator[Call[R], Any, R]:
        """``reply = yield from call``: the driver performs the call, and the
        reply comes back typed."""
        return cast(R, (yield self))


#: Block size of a chunk appended by the shell: offsets are multiples of it.
APPEND_BLOCK = 4096
#: Printed with the nonce by an append that wrote its chunk.
APPENDED_MARKER = f"{protocol.FRAME_MARKER}_APPENDED"


@dataclass(frozen=True)
class AppendCall(Call[None]):
    """A chunk of a staged upload written at ``offset`` (a multiple of
    :data:`APPEND_BLOCK`) by ``base64 -d [| gzip -dc] | dd`` through
    ``link``, the symlink the first chunk made to the staging file: no
    interpreter start. ``data`` is gzip-compressed if ``packed``.
    The command holds only the link (in the scratch directory, named by our
    random token), numbers and base64; an append cut short is caught by the
    SHA-256 check at the commit."""

    link: str
    offset: int
    data: bytes
    packed: bool
    what: str
    timeout: float | None = None

    def command(self, max_bytes: int, scripts: Session) -> tuple[str, str]:
        nonce = secrets.token_hex(16)
        delimiter = f"SBX_{nonce}"
        seek = self.offset // APPEND_BLOCK
        dd = f"dd of={shlex.quote(self.link)} bs={APPEND_BLOCK} seek={seek} conv=notrunc"
        text = binascii.b2a_base64(self.data, newline=False).decode("ascii")
        command = (
            f"base64 -d <<'{delimiter}' | {'gzip -dc | ' if self.packed else ''}{dd} 2>/dev/null"
            f" && echo {APPENDED_MARKER} {nonce}\n"
            f"{text}\n{delimiter}\n"
        )
        if len(command) > max_bytes:
            raise errors.SandboxRuntimeError(f"{self.what}: append of {len(command)} bytes > {max_bytes}")
        return command, nonce

    def decode(self, response: ExecuteResponse, nonce: str) -> None:
        if response.timed_out:
            raise errors.SandboxTimeoutError(f"{self.what} timed out")
        if response.exit_code != 0 or f"{APPENDED_MARKER} {nonce}" not in response.output:
            raise errors.SandboxRuntimeError(
                f"{self.what}: appending a chunk failed (exit code {response.exit_code}): "
                f"{response.output[-300:]!r}"
            )


@dataclass(frozen=True)
class _ScriptedCall(Call[R]):
    """A call of the in-sandbox script that has operation ``op``."""

    op: str
    args: Mapping[str, Any] = field(default_factory=dict)
    blobs: Sequence[bytes] = ()
    what: str = "operation"
    timeout: float | None = None
    interruptible: bool = False

    @property
    def payload(self) -> dict[str, Any]:
        """The arguments as the script reads them."""
        return {"op": self.op, **self.args}

    def command(self, max_bytes: int, scripts: Session, *, seldom_run: bool = False) -> tuple[str, str]:
        """The command and its nonce; ``seldom_run``: the command runs the
        script only now and then (a shell grep's fallback), so it leaves the
        script out until it is known missing (see ``Session.plan``)."""
        module = protocol.module_of(self.op)
        plan = scripts.plan(module, seldom_run=seldom_run)
        build = partial(
            protocol.build_command,
            module,
            self.payload,
            self.blobs,
            scratch_dir=plan.scratch_dir,
            omit_script=plan.omit_script,
            served=plan.served,
            installed=plan.installed,
        )
        command, nonce = build(launch=plan.launch)
        if plan.launch is not None:
            if protocol.command_bytes(command) <= max_bytes:
                scripts.launching(nonce)
            else:  # left to a later command with room for it
                scripts.launch_dropped()
                command, nonce = build()
        size = protocol.command_bytes(command)
        if size > max_bytes:
            raise errors.SandboxRuntimeError(
                f"{self.what}: command of {size} bytes exceeds max_command_bytes="
                f"{max_bytes} (please report: operations should stage large data)"
            )
        return command, nonce

    def resend(self, scripts: Session, response: ExecuteResponse, nonce: str) -> bool:
        return scripts.learn(protocol.module_of(self.op), response, nonce)


@dataclass(frozen=True)
class ScriptCall(_ScriptedCall[Reply[V]]):
    """A script operation; the reply is its value (a ``V``) and its blobs."""

    def decode(self, response: ExecuteResponse, nonce: str) -> Reply[V]:
        value, blobs = protocol.parse_result(response, nonce, self.what)
        return cast(V, value), blobs


@dataclass(frozen=True)
class LazyScriptCall(_ScriptedCall[tuple[V, list[LazyBlob]]]):
    """A script operation whose blobs stay base64 in the output until decoded."""

    def decode(self, response: ExecuteResponse, nonce: str) -> tuple[V, list[LazyBlob]]:
        value, blobs = protocol.parse_result(response, nonce, self.what, lazy_blobs=True)
        return cast(V, value), blobs


@dataclass(frozen=True)
class CommandCall(_ScriptedCall["Reply[V] | None"]):
    """A script that runs the user's command: without a timeout it gets the
    provider's default, and a response the provider cut at its timeout (the
    script killed before it could report) is ``None``."""

    def decode(self, response: ExecuteResponse, nonce: str) -> Reply[V] | None:
        if response.timed_out:
            return None
        value, blobs = protocol.parse_result(response, nonce, self.what)
        return cast(V, value), blobs

    def timeout_or(self, default: float) -> float | None:
        return self.timeout


#: Printed with the nonce after GNU grep's records, twice (see :class:`ShellGrepCall`).
SHELL_GREP_MARKER = f"{protocol.FRAME_MARKER}_GREP"
#: Printed with the nonce when the shell grep hands the search over to the script.
SHELL_GREP_FALLBACK_MARKER = f"{protocol.FRAME_MARKER}_GREP_FALLBACK"
#: The pattern, root and glob bytes a shell grep takes, together (each byte
#: is four in the command).
SHELL_GREP_VALUE_BYTES = 4096
#: An escape of GNU sed's ``l`` in the C locale: a backslash, a C escape or
#: three octal digits (every other byte is printable ASCII, itself).
_SED_ESCAPE = re.compile(rb"\\([0-7]{3}|[\\abfnrtv])")
_SED_ESCAPED = {
    **{f"{byte:03o}".encode(): bytes([byte]) for byte in range(256)},
    **{bytes([c]): bytes([byte]) for c, byte in zip(b"\\abfnrtv", b"\\\a\b\f\n\r\t\v", strict=True)},
}


def sed_unescaped(text: bytes) -> bytes:
    """The bytes GNU sed's ``l`` printed as ``text`` (no ``$`` at its end)."""
    return _SED_ESCAPE.sub(lambda escape: _SED_ESCAPED[escape[1]], text)


def printf_escapes(data: bytes) -> str:
    """``data`` as ``printf`` octal escapes: no byte of a value appears as
    itself in a command (and no ``%``, quote or newline)."""
    return "".join(map(_OCTAL.__getitem__, data))


_OCTAL = tuple(f"\\{byte:03o}" for byte in range(256))


def walk_key(rel: bytes) -> bytes:
    """Where ``rel`` (a path below the search root) comes in the script's
    walk (``remote/grep.py``, ``walk_files``): depth first, a directory's
    files by name descending before its subdirectories by name ascending.
    Keys compare as bytes: a directory is 0x01, its name and a NUL (below
    every byte of a name: a name before the longer names it begins); a file
    is 0x00 and its name with each byte b as 255 - b, then 0xff (a name has
    no NUL, so no byte maps to 0xff: a name after the longer names it
    begins, as a descending order puts it)."""
    dirs, slash, name = rel.rpartition(b"/")
    last = b"\0" + name.translate(_DESCENDING) + b"\xff"
    return b"\1" + dirs.replace(b"/", b"\0\1") + b"\0" + last if slash else last


_DESCENDING = bytes(255 - b for b in range(256))
#: One of GNU grep's ``--null`` records: name NUL number : line LF (a name
#: with a newline is not taken; nor a line with a NUL, which grep calls
#: binary: ``ShellGrepCall._search`` counts them).
_GREP_RECORD = re.compile(rb"([^\0\n]*)\0([0-9]+):(.*)\n")


@dataclass(frozen=True)
class ShellGrepCall(Call["GrepResult | None"]):
    """A fixed-string grep by GNU grep, no interpreter started.

    The command gives bash the pattern, the root and the file glob of the
    ``grep`` script's call (``script``) as ``printf -v`` octal escapes (no
    value appears as itself in it) and runs ``grep -r -H -n --null -F`` with
    them as separate arguments, in the C locale, through ``sed``, which
    holds grep's lines and stops at the first one that is one of grep's
    messages (a binary file that matches, an unreadable entry, an option it
    lacks: ``--no-ignore-case`` excludes busybox and GNU grep before 3.3)
    and past ``max_matches`` lines: the script then searches in the same
    round trip. Otherwise sed prints the lines once grep is done, then the
    same lines escaped (its ``l``: ASCII only), and a marker with the nonce
    follows: the client takes the lines only if the two copies are the same
    bytes, so that a reply garbled in transit (one copy changed) or with a
    byte the provider replaced or dropped (the raw copy lost it, the escaped
    one kept it) is never a result.

    Without bash, for a missing root, or where grep cannot start, the same
    command runs the script (with the same nonce), whose frame is the
    reply. Otherwise the client puts grep's lines in the walk's order and
    cuts them at the caps and budget with the script's own
    :class:`~sandbox_sdk.remote.grep.Search`, so the result is what the
    script would find (docs/protocol.md, "grep"); ``None`` when the client
    cannot tell (the output cut by the provider, as a line of megabytes is,
    garbled, or with bytes the provider did not keep): the script then
    searches, in a second round trip."""

    script: ScriptCall[GrepReply]
    what: str
    #: The script's pattern, root and glob, as bytes (its arguments hold them base64).
    pattern: bytes
    root: bytes
    glob: bytes | None
    #: The script's ``exclude_dirs``: directory names, none with a ``/``.
    exclude_dirs: tuple[bytes, ...] = ()
    timeout: float | None = None

    @staticmethod
    def takes(pattern: bytes, root: bytes, glob: bytes | None, exclude_dirs: tuple[bytes, ...] = ()) -> bool:
        """Whether GNU grep finds exactly the script's lines and files: a
        pattern that is UTF-8 (a byte match is then a text match), one line,
        not ending in CR (the script strips a line's CRs before matching),
        with no NUL (no argument can hold one); a glob of a name with no
        class, brace, escape or ``/`` (fnmatch reads those otherwise); a
        root other than ``-`` (grep's standard input, even after ``--``);
        ``exclude_dirs`` with no ``*?[]\\`` (``--exclude-dir`` reads a
        value with none as the whole name, as the script's walk does) and
        none the root's own name (``--exclude-dir`` also skips a directory
        operand of that name; the script searches it); and values small
        enough to be escaped beside the script in one command."""
        try:
            pattern.decode("utf-8")
        except UnicodeDecodeError:
            return False
        plain_glob = glob is None or not any(c in glob for c in b"/[]{}\\")
        plain_names = not any(c in name for name in exclude_dirs for c in b"*?[]\\")
        outside = root.rstrip(b"/").rpartition(b"/")[2] not in exclude_dirs
        values = (pattern, root, glob or b"", *exclude_dirs)
        small = sum(map(len, values)) <= SHELL_GREP_VALUE_BYTES
        one_line = b"\n" not in pattern and b"\0" not in pattern and not pattern.endswith(b"\r")
        return one_line and plain_glob and plain_names and outside and small and root != b"-"

    def command(self, max_bytes: int, scripts: Session) -> tuple[str, str]:
        # The script runs only when grep cannot answer: the command leaves it
        # out (8 KB less for bash to take: ~0.5 ms of a 10 ms grep) unless it
        # is known missing; a fallback that finds none is sent again in full.
        script, nonce = self.script.command(max_bytes, scripts, seldom_run=True)
        excluded = {f"x{i}": name for i, name in enumerate(self.exclude_dirs)}
        values = {"p": self.pattern, "r": self.root, "g": self.glob, **excluded}
        assign = "; ".join(f"printf -v {k} '{printf_escapes(v)}'" for k, v in values.items() if v is not None)
        # --include is matched against a file operand's whole path: hence a
        # directory root with a glob.
        include, root = (' --include="$g"', "-d") if values["g"] is not None else ("", "-e")
        include += "".join(f' --exclude-dir="${k}"' for k in excluded)
        cap = self.script.args["max_matches"]
        # grep's messages join its lines (each written whole). sed holds the
        # lines and quits, printing none, with status 6 at the first line
        # with no NUL (a message, or a name with a newline), or with 5 past
        # the cap (-m bounds one file only): the script then takes over in
        # this round trip (it stops at the cap in walk order). At the last
        # line, sed prints them, then the same escaped on one line (``l 0``,
        # ending in ``$``): nothing is written while grep runs (output then
        # wakes the provider's reader for nothing), and the marker follows.
        # Two copies, not a digest: a digest took a third process.
        held = f"/\\x00/!Q6;{cap + 1}Q5;H;$!d;x;s/^\\n//;p;l 0"
        run = (
            f"LC_ALL=C grep -r -H -n --null --line-buffered -F -D skip --no-ignore-case"
            f' -m {cap + 1}{include} -e "$p" -- "$r" 2>&1 | LC_ALL=C sed -n \'{held}\';'
            f' case "${{PIPESTATUS[*]}}" in "0 0" | "1 0")'
            f" printf '%s %s\\n' {SHELL_GREP_MARKER} {nonce}; exit 0 ;; esac"
        )
        command = (
            f'if [ -n "${{BASH_VERSION-}}" ]; then {assign}; if [ {root} "$r" ]; then {run}; fi; fi;'
            f" printf '\\n%s %s\\n' {SHELL_GREP_FALLBACK_MARKER} {nonce}\n{script}"
        )
        size = protocol.command_bytes(command)
        if size > max_bytes:
            raise errors.SandboxRuntimeError(f"{self.what}: command of {size} bytes > {max_bytes}")
        return command, nonce

    def resend(self, scripts: Session, response: ExecuteResponse, nonce: str) -> bool:
        return self.script.resend(scripts, response, nonce)  # the script took over, with this nonce

    def decode(self, response: ExecuteResponse, nonce: str) -> GrepResult | None:
        if response.timed_out:
            raise errors.SandboxTimeoutError(f"{self.what} timed out")
        output = response.output
        if f"{SHELL_GREP_FALLBACK_MARKER} {nonce}" in output:  # the script searched, in this round trip
            if response.truncated:  # its frame did not fit beside what came before
                return None
            return grep_result(self.script.decode(response, nonce)[0])
        # grep's lines, escaped, and the marker, whole: else (cut, garbled,
        # a byte the provider replaced or dropped) the script searches.
        lines, marker, rest = output.rpartition(f"{SHELL_GREP_MARKER} {nonce}")
        if not marker or rest not in ("\n", "") or response.truncated or response.exit_code:
            return None
        if not lines:  # no line matched: sed printed nothing
            return self._search(b"")
        raw, newline, escaped = lines.removesuffix("$\n").rpartition("\n")
        if not newline or not lines.endswith("$\n"):
            return None
        try:
            data = raw.encode("utf-8", "surrogateescape") + b"\n"
            copy = sed_unescaped(escaped.encode("ascii")) + b"\n"
        except UnicodeEncodeError:  # a character no byte decodes to, in either copy
            return None
        return self._search(data) if data == copy else None

    def _search(self, data: bytes) -> GrepResult | None:
        """The script's result from GNU grep's ``path NUL number : line LF``
        records; ``None`` if they do not read as that."""
        # Every byte of data must belong to a record: what is not one is a
        # message of grep's (written anywhere among the records: it has a
        # newline and no NUL), or a name with a newline. A record holds one
        # newline, at its end, and findall starts one at the first place it
        # can: so the records make up all of data if there are as many as
        # newlines, and as NULs (a record's line holds none), and data ends
        # with a newline.
        records = _GREP_RECORD.findall(data)
        if not len(records) == data.count(b"\n") == data.count(b"\0") or data[-1:] not in (b"\n", b""):
            return None
        root = self.root
        names = list(dict.fromkeys(map(itemgetter(0), records)))  # a file's lines come together
        found = {root: root}  # each name as the script's walk gives it
        if names != [root]:  # not a file's own search
            # GNU grep names a file below the root after the root cut to one
            # trailing slash ("dir//" gives "dir/a"); the script joins them
            # as os.path.join does ("dir//a").
            below = root.rstrip(b"/") + b"/"
            joined, cut = root if root.endswith(b"/") else root + b"/", len(below)
            if not all(name.startswith(below) and len(name) > cut for name in names):
                return None
            rels = [name[cut:] for name in names]
            rank = dict(zip(names, walk_keys(rels), strict=True))
            records.sort(key=lambda record: rank[record[0]])  # stable: a file's lines stay in order
            found = {name: joined + rel for name, rel in zip(names, rels, strict=True)}
        texts = {name: path.decode(FS_ENCODING, FS_ERRORS) for name, path in found.items()}
        args = self.script.args
        limit, line_cap, budget = args["max_matches"], args["max_line_bytes"], args["budget"]
        # Search.add takes every line as it is (each holds the pattern's
        # bytes: grep -F in the C locale printed it) when none is past a cap,
        # none ends in CR (it strips those: a CR before a newline is one, as
        # a record has no other newline), and an upper bound of their
        # reply_size sum is within the budget: each string's base64 is at
        # most 4/3 of its bytes plus 4, a line number at most 20 digits, the
        # rest 15 bytes; a joined name is longer than grep's by at most the
        # root's length.
        if (
            len(records) <= limit
            and max(map(len, map(itemgetter(2), records)), default=0) <= line_cap
            and (len(data) + len(root) * len(records)) * 4 // 3 + len(records) * 43 <= budget
            and b"\r\n" not in data
        ):
            truncated = False
            rows = [
                {"path": texts[name], "line_number": int(number), "line": line.decode("utf-8", "replace"),
                 "line_truncated": False}
                for name, number, line in records
            ]  # fmt: skip
        else:
            search = Search(line_matcher(self.pattern, True, False), limit, line_cap, budget)
            for name, number, line in records:
                if not search.add(found[name], int(number), line):
                    break
            truncated = search.truncated
            paths = {path: texts[name] for name, path in found.items()}
            rows = [
                {"path": paths[path], "line_number": number, "line": line.decode("utf-8", "replace"),
                 "line_truncated": cut}
                for path, number, line, cut in search.matches
            ]  # fmt: skip
        return GrepResult.model_validate(
            {"matches": rows, "truncated": truncated, "unreadable": [], "skipped_binary": 0}
        )


def walk_keys(rels: list[bytes]) -> list[bytes]:
    """``walk_key`` of each of ``rels``; for names in one directory (none
    with a ``/``, the usual case) by one translation of them all: a name
    has no NUL or newline (0xff and 0xf5 translated), so 0xf5 parts them."""
    together = b"\n".join(rels)
    if b"/" in together or not rels:
        return list(map(walk_key, rels))
    return (b"\0" + together.translate(_DESCENDING).replace(b"\xf5", b"\xff\xf5\0") + b"\xff").split(b"\xf5")


class Script(Generic[V]):
    """An operation of an in-sandbox script whose reply value is a ``V``."""

    def __init__(self, op: str) -> None:
        protocol.module_of(op)  # an unknown name fails at import
        self.op = op

    def __call__(
        self,
        args: Mapping[str, Any],
        blobs: Sequence[bytes] = (),
        *,
        what: str,
        timeout: float | None = None,
        interruptible: bool = False,
    ) -> ScriptCall[V]:
        return ScriptCall(self.op, args, blobs, what, timeout, interruptible)

    def command(
        self, args: Mapping[str, Any], blobs: Sequence[bytes] = (), *, what: str, timeout: float | None
    ) -> CommandCall[V]:
        """The call that runs a user's command (see :class:`CommandCall`)."""
        return CommandCall(self.op, args, blobs, what, timeout)

    def lazy(self, args: Mapping[str, Any], *, what: str) -> LazyScriptCall[V]:
        """The call with its blobs left undecoded (see :class:`LazyScriptCall`)."""
        return LazyScriptCall(self.op, args, (), what)


# The operations of remote/ls.py, read.py, get.py, write.py, edit.py, fs.py,
# glob.py, grep.py, archive.py, run.py and proc.py, each typed by its reply.
LS: Script[LsReply] = Script("ls")
STAT: Script[Entry] = Script("stat")
READ: Script[ReadReply] = Script("read")
READ_CHUNK: Script[ChunkReply] = Script("read_chunk")
GET_MANY: Script[GetManyReply] = Script("get_many")
WRITE: Script[SizeReply] = Script("write")
PUT_MANY: Script[PutManyReply] = Script("put_many")
SETTLE_MANY: Script[SettledReply] = Script("settle_many")
STAGE: Script[StageReply] = Script("stage")
LANDED: Script[LandedReply] = Script("landed")
ABORT: Script[Empty] = Script("abort")
EDIT: Script[EditReply] = Script("edit")
EDITED: Script[EditedReply] = Script("edited")
DELETE: Script[Empty] = Script("delete")
MKDIR: Script[Empty] = Script("mkdir")
GLOB: Script[GlobReply] = Script("glob")
GREP: Script[GrepReply] = Script("grep")
CREATE_ARCHIVE: Script[CreateReply] = Script("create")
EXTRACT_ARCHIVE: Script[ExtractReply] = Script("extract")
ARCHIVE_EXTRACTED: Script[LandedReply] = Script("extracted")
RUN: Script[RunReply] = Script("run")
SPAWN: Script[SpawnReply] = Script("spawn")
FOLLOW: Script[FollowReply] = Script("follow")
SIGNAL: Script[SignalReply] = Script("signal")
PROCESSES: Script[ProcessesReply] = Script("processes")
FORGET: Script[Empty] = Script("forget")


# -- replies decoded into results ------------------------------------------------------

#: A listing's file types, by the type bits of ``st_mode`` (the same on
#: every POSIX system: remote/_runtime.py, ``file_type``).
FILE_TYPES: dict[int, FileType] = {0o100000: "file", 0o040000: "dir", 0o120000: "symlink"}
#: ``st_mode``'s file type bits (``stat.S_IFMT``).
TYPE_BITS = 0o170000
NANOSECONDS = 1_000_000_000
#: How ``os.fsdecode`` decodes a path.
FS_ENCODING, FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


#: A listing's entries, validated in one call (pydantic-core walks the list).
FILE_INFOS = TypeAdapter(list[FileInfo])


def _name(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) or path


def file_info(item: Entry) -> FileInfo:
    """A :class:`~sandbox_sdk.models.FileInfo` from a script's entry (``stat``)."""
    path = protocol.decode_path(item["path"])
    return FileInfo(
        path=path,
        name=_name(path),
        type=item["type"],
        size=item["size"],
        mtime=item["mtime"],
        mode=item["mode"],
    )


def _integers(column: object) -> list[int]:
    if type(column) is not list or not set(map(type, column)) <= {int}:  # not bool: a subclass
        raise ValueError("a column of integers expected")
    return column


def listing(packed: Blob) -> list[FileInfo]:
    """The entries of a listing (``ls``, ``glob``; remote/_runtime.py,
    ``listing``): zlib-compressed JSON columns, then the paths separated by
    NULs, decoded at once as ``os.fsdecode`` decodes each (a NUL is one byte
    in every encoding it may use). ``mtime`` is ``st_mtime`` as CPython
    computes it from the seconds and nanoseconds (``sec + nsec * 1e-9``).
    Each entry is validated as pydantic validates any model.

    The garbage collector is paused while they are built, as CPython's own
    ``subprocess`` paused it around a fork: each entry is an object it
    tracks, and 10,000 of them at once were promoted to its oldest
    generation, so that every few listings paid a full collection (~100 ms
    in a process with LangChain loaded). Entries dropped soon are now freed
    before any collection sees them."""
    try:
        head, newline, names = zlib.decompress(packed).partition(b"\n")
        if not newline:
            raise ValueError("no line of paths")
        columns = json.loads(head)
        sizes, mtimes, modes = (_integers(columns[key]) for key in ("sizes", "mtimes", "modes"))
        paths = names.decode(FS_ENCODING, FS_ERRORS).split("\0") if sizes else []
        if not len(paths) == len(mtimes) == len(modes) == len(sizes):
            raise ValueError("columns of different lengths")
    except (zlib.error, ValueError, KeyError, TypeError) as exc:
        raise errors.SandboxRuntimeError(f"malformed listing from the sandbox: {exc!r}") from None
    collecting = gc.isenabled()
    gc.disable()
    try:
        entries = FILE_INFOS.validate_python([
            {
                "path": path,
                "name": path.rpartition("/")[2] or _name(path),
                "type": FILE_TYPES.get(mode & TYPE_BITS, "other"),
                "size": size,
                "mtime": ns // NANOSECONDS + ns % NANOSECONDS * 1e-9,
                "mode": mode & 0o7777,
            }
            for path, size, ns, mode in zip(paths, sizes, mtimes, modes, strict=True)
        ])  # fmt: skip
    finally:
        if collecting:
            gc.enable()
    return entries


def glob_result(value: GlobReply, blobs: list[Blob]) -> GlobResult:
    return GlobResult(
        matches=listing(blobs[0]),
        truncated=value["truncated"],
        unreadable=[protocol.decode_path(p) for p in value["unreadable"]],
    )


def grep_result(value: GrepReply) -> GrepResult:
    return GrepResult(
        matches=[
            GrepMatch(
                path=protocol.decode_path(p),
                line_number=n,
                line=base64.b64decode(text).decode("utf-8", "replace"),
                line_truncated=cut,
            )
            for p, n, text, cut in value["matches"]
        ],
        truncated=value["truncated"],
        unreadable=[protocol.decode_path(p) for p in value["unreadable"]],
        skipped_binary=value["skipped_binary"],
    )
