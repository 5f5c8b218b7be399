"""grep by GNU grep in the sandbox's shell: the command, and the records it
prints checked and turned into a result (docs/protocol.md, "grep")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls.calls import Call, ScriptCall
from sandbox_sdk._calls.replies import FS_ENCODING, FS_ERRORS, grep_result
from sandbox_sdk.models import ExecuteResponse, GrepResult
from sandbox_sdk.remote.grep import Search, line_matcher

if TYPE_CHECKING:
    from sandbox_sdk._session import Session
    from sandbox_sdk.limits import Limits
    from sandbox_sdk.remote.grep import GrepReply


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

    def command(self, limits: Limits, scripts: Session) -> tuple[str, str]:
        # The script runs only when grep cannot answer: the command leaves it
        # out (8 KB less for bash to take: ~0.5 ms of a 10 ms grep) unless it
        # is known missing; a fallback that finds none is sent again in full.
        script, nonce = self.script.command(limits, scripts, seldom_run=True)
        excluded = {f"x{i}": name for i, name in enumerate(self.exclude_dirs)}
        values = {"p": self.pattern, "r": self.root, "g": self.glob, **excluded}
        assign = "; ".join(f"printf -v {k} '{printf_escapes(v)}'" for k, v in values.items() if v is not None)
        # --include is matched against a file operand's whole path: hence a
        # directory root with a glob.
        include, root = (' --include="$g"', "-d") if values["g"] is not None else ("", "-e")
        include += "".join(f' --exclude-dir="${k}"' for k in excluded)
        cap = self.script.args["max_matches"]
        # grep's messages join its lines: between two, or inside one where
        # grep's buffered output was cut (the line the message ends, or the
        # rest of the cut one after it, then has no NUL); --line-buffered
        # would write each line in a call of its own, waking sed per line.
        # sed holds the lines and quits, printing none, with status 6 at the
        # first line with no NUL (a message, or a name with a newline), or
        # with 5 past the cap (-m bounds one file only): the script then
        # takes over in this round trip (it stops at the cap in walk order).
        # At the last line, sed prints them, then the same escaped on one
        # line (``l 0``, ending in ``$``): nothing is written while grep runs
        # (output then wakes the provider's reader for nothing), and the
        # marker follows. Two copies, not a digest: a digest took a third
        # process.
        held = f"/\\x00/!Q6;{cap + 1}Q5;H;$!d;x;s/^\\n//;p;l 0"
        run = (
            f"LC_ALL=C grep -r -H -n --null -F -D skip --no-ignore-case"
            f' -m {cap + 1}{include} -e "$p" -- "$r" 2>&1 | LC_ALL=C sed -n \'{held}\';'
            f' case "${{PIPESTATUS[*]}}" in "0 0" | "1 0")'
            f" printf '%s %s\\n' {SHELL_GREP_MARKER} {nonce}; exit 0 ;; esac"
        )
        command = (
            f'if [ -n "${{BASH_VERSION-}}" ]; then {assign}; if [ {root} "$r" ]; then {run}; fi; fi;'
            f" printf '\\n%s %s\\n' {SHELL_GREP_FALLBACK_MARKER} {nonce}\n{script}"
        )
        size = protocol.command_bytes(command)
        if size > limits.max_command_bytes:
            raise errors.SandboxRuntimeError(
                f"{self.what}: command of {size} bytes > {limits.max_command_bytes}"
            )
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
