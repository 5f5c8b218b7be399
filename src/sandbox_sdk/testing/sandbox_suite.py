"""``SandboxConformanceTests``: the contract every ``BaseSandbox`` must meet.

Subclass it in your provider's tests and supply a ``sandbox`` fixture (any
scope; class scope is cheapest). Every test works inside its own fresh
directory, so one sandbox can serve the whole class::

    class TestMySandbox(SandboxConformanceTests):
        @pytest.fixture(scope="class")
        @classmethod
        def sandbox(cls, provider: MyProvider) -> Iterator[BaseSandbox]:
            yield from provided_sandbox(provider, "conformance")

Known gaps are declared, with a reason, in ``known_gaps``; each becomes a
strict xfail naming the exception the check fails with (``AssertionError``,
or a :class:`~sandbox_sdk.testing.Gap`'s), so the entry must go once the gap
is fixed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import os
import posixpath
import re
import secrets
import shlex
import signal
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import anyio
import pytest

from sandbox_sdk import errors, protocol
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse, StreamEvent
from sandbox_sdk.process import Process
from sandbox_sdk.snapshots import DirectorySnapshotStore
from sandbox_sdk.testing.interactive_suite import InteractiveChecks

#: Names that have broken shell- and template-based sandbox SDKs, by test id.
HOSTILE_NAMES_BY_ID: dict[str, str | bytes] = {
    "single-quote": "single'quote",
    "double-quote": 'double"quote',
    "backtick": "back`tick`",
    "command-substitution": "$(touch PWNED)",
    "parameter-expansion": "${IFS}dollar",
    "newline": "new\nline",
    "tab": "tab\there",
    "leading-dash": "-leading-dash",
    "option-like": "--help",
    "space": "space name",
    "unicode": "unicode-é✓🙂",
    "glob-characters": "glob*?[x]{a,b}",
    "backslash": "back\\slash",
    "heredoc-delimiter": "SBX_0123456789abcdef0123456789abcdef",
    "255-bytes": "x" * 255,
    "non-utf8": b"not-utf8-\xff\xfe",
}
HOSTILE_NAMES: list[str | bytes] = list(HOSTILE_NAMES_BY_ID.values())
#: ``HOSTILE_NAMES`` for ``pytest.mark.parametrize``, with readable ids
#: (``known_gaps`` can name one: ``"test_hostile_name_round_trip[non-utf8]"``).
HOSTILE_NAME_PARAMS = [pytest.param(name, id=key) for key, name in HOSTILE_NAMES_BY_ID.items()]

#: ``(command, exit_code, timed_out)`` under the one exit-status rule: the
#: command's own status, 128+N for death by signal N, 124 at our timeout
#: (each command is run with a timeout of 1 s).
EXIT_STATUSES = {
    "exit-3": ("exit 3", 3, False),
    "sigterm": ("kill -TERM $$", 143, False),
    "sigkill": ("kill -KILL $$", 137, False),
    "timeout": ("sleep 30", 124, True),
}
#: The ways to run a command the rule holds on: ``execute``, ``run`` in one
#: round trip, and ``run`` with a callback (detached and followed).
RUN_PATHS: dict[str, Callable[[BaseSandbox, str], ExecuteResponse]] = {
    "execute": lambda sandbox, command: sandbox.execute(command, timeout=1),
    "run": lambda sandbox, command: sandbox.run(command, timeout=1),
    "run-followed": lambda sandbox, command: sandbox.run(command, timeout=1, on_stdout=lambda text: None),
}


#: Counts the processes of a group (``argv[1]``) that are not zombies, from /proc.
LIVE_MEMBERS = """import glob, sys
def fields(path):
    try:
        return open(path).read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
    except OSError:
        return []
members = [fields(p) for p in glob.glob("/proc/[0-9]*/stat")]
print(sum(1 for f in members if f[2:3] == [sys.argv[1]] and f[0] != "Z"))
"""


#: A command a test kills: it records its pid, says ``go``, then would run a minute. The
#: test polls for its end (``CANCELLED_ALIVE``), so a loaded machine makes it slower, not
#: wrong (a command that slept 2 s then touched a marker lost that race under load).
KILLABLE = "echo $$ > {pid_file}; echo go; sleep 60; touch {marker}"
#: Exit 0 while the process of the pid in ``{pid_file}`` runs (a zombie has ended), 1 once
#: it has ended, 2 if the file is empty or missing (the command never began).
CANCELLED_ALIVE = (
    "[ -s {pid_file} ] || exit 2; read -r pid < {pid_file}; "
    'read -r stat 2>/dev/null < /proc/"$pid"/stat || exit 1; stat=${{stat##*) }}; [ "${{stat%% *}}" != Z ]'
)
#: How long a killed command may take to be gone.
GONE_SECONDS = 30.0


def _streamed(sandbox: BaseSandbox, command: str, **options: object) -> tuple[str, str, StreamEvent]:
    """What ``stream`` gave: stdout, stderr and the exit event."""
    texts = {"stdout": "", "stderr": ""}
    events = list(sandbox.stream(command, **options))  # type: ignore[arg-type]
    for event in events[:-1]:
        texts[event.kind] += event.text
    assert events[-1].kind == "exit"
    return texts["stdout"], texts["stderr"], events[-1]


#: Contents that must survive a round trip byte for byte.
HOSTILE_CONTENTS: list[bytes] = [
    b"",
    b"\0",
    b"nul\0in\0the\0middle\n",
    bytes(range(256)),
    b"\xff\xfe invalid utf-8 \xc3\x28",
    b"SBX_0123456789abcdef0123456789abcdef\nEOF\n'EOF'\n",
    b"no trailing newline",
    b"crlf\r\nlines\r\n",
]


class SandboxConformanceTests(InteractiveChecks):
    """Checks ``execute`` semantics and every ``BaseSandbox`` operation."""

    #: Bytes of a stream's output the provider's client library may hold
    #: unread in this process (its transport's flow-control window, say):
    #: the bounded-memory stream test allows for them, and streams enough
    #: past them to still tell a bound from a leak.
    stream_read_ahead: ClassVar[int] = 0
    #: Seconds between the writes whose arrival order the ordering tests check.
    #: A provider that reads stdout and stderr as two streams orders them by
    #: arrival, so a pause of its client longer than this (a test double in
    #: the test's own process, on a loaded machine) may swap two writes: such
    #: a provider's tests may raise it.
    interleave_seconds: ClassVar[float] = 0.5

    # -- execute -------------------------------------------------------------------------

    def test_exit_code_passes_through(self, sandbox: BaseSandbox) -> None:
        response = sandbox.execute("exit 70")
        assert response.exit_code == 70
        assert not response.timed_out

    def test_stdout_and_stderr_are_merged(self, sandbox: BaseSandbox) -> None:
        response = sandbox.execute("echo to-stdout; echo to-stderr >&2")
        assert "to-stdout" in response.output
        assert "to-stderr" in response.output
        assert response.exit_code == 0

    def test_output_is_returned_as_written(self, sandbox: BaseSandbox) -> None:
        """Not stripped at either end, nor its blank lines dropped: a file
        operation's frame ends in a newline, without which it reads as cut."""
        response = sandbox.execute(r"printf '\n  lead\n\n\ttrail \n\n'")
        assert response.output == "\n  lead\n\n\ttrail \n\n"

    def test_utf8_output_made_inside(self, sandbox: BaseSandbox) -> None:
        response = sandbox.execute(r"printf '\303\251\342\202\254\360\237\231\202\n'")
        assert response.output.strip() == "é€🙂"

    def test_timeout_kills_command_and_children(self, sandbox: BaseSandbox, workdir: str) -> None:
        pid_file = self.p(workdir, "child.pid")
        child = f"sh -c 'echo $$ > \"$1\"; exec sleep 60' sh {shlex.quote(pid_file)} &"
        response = sandbox.execute(f"{child} sleep 30", timeout=1)
        assert response.timed_out
        self._assert_killed(sandbox, pid_file, began=False)  # the background child too

    @pytest.mark.parametrize("path", ["execute", "run"])
    def test_a_timeout_of_zero_means_the_default_on_execute_as_on_run(
        self, sandbox: BaseSandbox, path: str
    ) -> None:
        """One meaning of ``timeout=0`` on every path and provider: the sandbox's
        default (deepagents' meaning), never "expire at once"; a negative one is
        refused before the command runs."""
        call = sandbox.execute if path == "execute" else sandbox.run
        response = call("sleep 0.2; echo done", timeout=0)
        assert (response.output, response.exit_code, response.timed_out) == ("done\n", 0, False)
        with pytest.raises(errors.InvalidArgumentError, match="timeout"):
            call("echo never", timeout=-1)

    def test_large_output(self, sandbox: BaseSandbox) -> None:
        size = min(200_000, sandbox.limits.max_output_bytes)
        response = sandbox.execute(f"head -c {size} /dev/zero | tr '\\0' a")
        assert response.output == "a" * size
        assert not response.truncated

    def test_output_over_cap_is_flagged(self, sandbox: BaseSandbox) -> None:
        size = sandbox.limits.max_output_bytes + 100_000
        response = sandbox.execute(f"head -c {size} /dev/zero | tr '\\0' b")
        assert response.truncated
        assert 0 < len(response.output) <= sandbox.limits.max_output_bytes

    def test_command_near_max_command_bytes(self, sandbox: BaseSandbox) -> None:
        tail = "; echo near-limit-ok"
        padding = ":" + " x" * ((sandbox.limits.max_command_bytes - len(tail) - 1024) // 2)
        response = sandbox.execute(padding + tail)
        assert response.exit_code == 0
        assert "near-limit-ok" in response.output

    # -- run ---------------------------------------------------------------------------------

    def test_run_with_cwd_env_and_binary_stdin(self, sandbox: BaseSandbox, workdir: str) -> None:
        data = bytes(range(256)) * 4
        response = sandbox.run(
            'pwd; printf "%s\\n" "$GREETING"; od -An -tx1 -v | tr -d " \\n" | head -c 64; echo',
            cwd=workdir,
            env={"GREETING": "hello $(whoami) 'q'"},
            stdin=data,
        )
        lines = response.output.splitlines()
        assert response.exit_code == 0, response.output
        assert lines[0].endswith(workdir)
        assert lines[1] == "hello $(whoami) 'q'"
        assert lines[2] == data[:32].hex()

    def test_run_with_stdin_larger_than_a_command(self, sandbox: BaseSandbox) -> None:
        data = os.urandom(sandbox.limits.max_command_bytes * 2 + 17)
        response = sandbox.run("sha256sum | cut -c1-64", stdin=data)
        assert response.output.strip() == hashlib.sha256(data).hexdigest(), response  # (kit asserts are bare)

    def test_run_in_missing_cwd_raises(self, sandbox: BaseSandbox, workdir: str) -> None:
        with pytest.raises(FileNotFoundError):
            sandbox.run("true", cwd=self.p(workdir, "missing"))

    @pytest.mark.parametrize("followed", [False, True], ids=["one-trip", "followed"])
    def test_run_an_argument_vector_without_a_shell(self, sandbox: BaseSandbox, followed: bool) -> None:
        """Each argument arrives as it is: nothing is expanded, split or quoted."""
        argv = ["printf", "<%s>", "a b", "$(id)", "'q' \"d\"", "-n", "\n", "é", ";exit 3"]
        result = sandbox.run(argv, on_stdout=(lambda text: None) if followed else None)
        assert (result.exit_code, result.stdout) == (0, "<a b><$(id)><'q' \"d\"><-n><\n><é><;exit 3>")

    @pytest.mark.parametrize("how", ["run", "followed", "start"])
    def test_a_program_larger_than_a_command_is_staged(self, sandbox: BaseSandbox, how: str) -> None:
        """A shell command or an argument vector longer than one command (and
        than one argument may be) still runs, with its stdin."""
        chunk = "x" * (64 * 1024)
        count = 16  # 1 MiB: more than a cloud provider's command, less than Linux's ARG_MAX
        argv = ["sh", "-c", 'printf %s "$@" | wc -c; cat', "sh", *[chunk] * count]
        expected = f"{len(chunk) * count}\nin\n"
        if how == "start":
            assert sandbox.start(argv, stdin="in\n").wait(timeout=60).stdout.lstrip() == expected
            return
        on_stdout = (lambda text: None) if how == "followed" else None
        assert sandbox.run(argv, stdin="in\n", on_stdout=on_stdout).stdout.lstrip() == expected
        shell = f"echo {chunk * count} | wc -c"
        assert sandbox.run(shell, on_stdout=on_stdout).stdout.strip() == str(len(chunk) * count + 1)

    def test_a_started_argument_vector_is_shown_shell_quoted(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start(["sh", "-c", "sleep 30", "it's"])
        try:
            assert process.command == "sh -c 'sleep 30' 'it'\"'\"'s'"
            assert sandbox.process(process.pid).command == process.command
        finally:
            process.kill()

    @pytest.mark.parametrize("how", ["run", "followed", "start"])
    def test_an_argument_vector_that_cannot_run_raises(
        self, sandbox: BaseSandbox, workdir: str, how: str
    ) -> None:
        """As ``subprocess`` does: a file that is not executable is a
        PermissionError, a program that is not there a FileNotFoundError."""
        data = self.p(workdir, "data.txt")
        sandbox.write(data, "not a program\n")
        cases = [([data], PermissionError), (["no-such-program-" + secrets.token_hex(8)], FileNotFoundError)]
        for argv, error in cases:
            with pytest.raises(error):
                if how == "start":
                    sandbox.start(argv)
                else:
                    sandbox.run(argv, on_stdout=(lambda text: None) if how == "followed" else None)
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.run([])

    # -- write / read ------------------------------------------------------------------------

    @pytest.mark.parametrize("content", HOSTILE_CONTENTS, ids=lambda c: repr(c)[:30])
    def test_write_read_bytes_round_trip(self, sandbox: BaseSandbox, workdir: str, content: bytes) -> None:
        path = self.p(workdir, "f.bin")
        sandbox.write(path, content)
        assert sandbox.read_bytes(path) == content

    def test_write_creates_parents(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "a", "b", "c.txt")
        result = sandbox.write(path, "deep\n")
        assert result.bytes_written == 5
        assert sandbox.read(path).content == "deep\n"

    def test_write_refuses_existing_file_without_overwrite(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "f.txt")
        sandbox.write(path, "first")
        with pytest.raises(FileExistsError):
            sandbox.write(path, "second")
        assert sandbox.read_bytes(path) == b"first"

    def test_overwrite_replaces_and_keeps_mode(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "script.sh")
        sandbox.write(path, "echo one\n")
        sandbox.execute(f"chmod 750 {path}")
        sandbox.write(path, "echo two\n", overwrite=True)
        assert sandbox.read_bytes(path) == b"echo two\n"
        assert sandbox.stat(path).mode == 0o750

    def test_write_to_a_directory_raises(self, sandbox: BaseSandbox, workdir: str) -> None:
        with pytest.raises(IsADirectoryError):
            sandbox.write(workdir, "x", overwrite=True)

    def test_write_under_a_file_raises(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.write(self.p(workdir, "file"), "x")
        with pytest.raises(NotADirectoryError):
            sandbox.write(self.p(workdir, "file", "child"), "y")

    def test_write_larger_than_one_command_is_staged(self, sandbox: BaseSandbox, workdir: str) -> None:
        content = os.urandom(sandbox.limits.max_command_bytes * 3 + 1)
        path = self.p(workdir, "big.bin")
        sandbox.write(path, content)
        assert sandbox.read_bytes(path) == content
        assert [e.name for e in sandbox.ls(workdir)] == ["big.bin"]  # no staging file left

    def test_read_pages_by_lines(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "lines.txt")
        sandbox.write(path, "".join(f"line {i}\n" for i in range(1, 11)))
        page = sandbox.read(path, offset=2, limit=3)
        assert page.content == "line 3\nline 4\nline 5\n"
        assert (page.start_line, page.end_line, page.total_lines, page.has_more) == (3, 5, 10, True)
        last = sandbox.read(path, offset=8)
        assert last.content == "line 9\nline 10\n"
        assert not last.has_more

    def test_read_keeps_crlf_and_missing_final_newline(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "crlf.txt")
        sandbox.write(path, b"one\r\ntwo\r\nthree")
        page = sandbox.read(path)
        assert page.content == "one\r\ntwo\r\nthree"
        assert page.total_lines == 3

    def test_read_empty_file(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "empty")
        sandbox.write(path, b"")
        page = sandbox.read(path)
        assert (page.content, page.total_lines, page.has_more) == ("", 0, False)

    @pytest.mark.parametrize("content", [b"\x00\x01\x02binary", b"latin-1 caf\xe9\n"])
    def test_read_refuses_binary(self, sandbox: BaseSandbox, workdir: str, content: bytes) -> None:
        path = self.p(workdir, "bin")
        sandbox.write(path, content)
        with pytest.raises(errors.NotTextFileError):
            sandbox.read(path)

    def test_read_errors(self, sandbox: BaseSandbox, workdir: str) -> None:
        with pytest.raises(FileNotFoundError):
            sandbox.read(self.p(workdir, "missing"))
        with pytest.raises(IsADirectoryError):
            sandbox.read(workdir)
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.read(workdir, offset=-1)

    def test_read_bytes_cap(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "big")
        sandbox.write(path, b"x" * 1000)
        with pytest.raises(errors.OutputLimitExceededError):
            sandbox.read_bytes(path, max_bytes=999)
        assert sandbox.read_bytes(path, max_bytes=1000) == b"x" * 1000

    # -- edit ---------------------------------------------------------------------------------

    def test_edit_replaces_one_occurrence(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "e.py")
        sandbox.write(path, "a = 1\nb = 2\n")
        assert sandbox.edit(path, "b = 2", "b = 3").replacements == 1
        assert sandbox.read(path).content == "a = 1\nb = 3\n"

    def test_edit_ambiguous_and_replace_all(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "e.txt")
        sandbox.write(path, "x x x")
        with pytest.raises(errors.EditAmbiguousError) as caught:
            sandbox.edit(path, "x", "y")
        assert caught.value.count == 3
        assert sandbox.read_bytes(path) == b"x x x"
        assert sandbox.edit(path, "x", "y", replace_all=True).replacements == 3
        assert sandbox.read_bytes(path) == b"y y y"

    def test_edit_errors(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "e.txt")
        sandbox.write(path, "content")
        with pytest.raises(errors.EditNoMatchError):
            sandbox.edit(path, "absent", "x")
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.edit(path, "", "x")
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.edit(path, "content", "x", replace_all="yes")  # type: ignore[arg-type]
        with pytest.raises(FileNotFoundError):
            sandbox.edit(self.p(workdir, "missing"), "a", "b")
        assert sandbox.read_bytes(path) == b"content"

    def test_edit_keeps_mode_crlf_and_binary_bytes(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "e.bin")
        sandbox.write(path, b"\xff\r\nkeep\0 old\r\n")
        sandbox.execute(f"chmod 604 {path}")
        sandbox.edit(path, "old", "new")
        assert sandbox.read_bytes(path) == b"\xff\r\nkeep\0 new\r\n"
        assert sandbox.stat(path).mode == 0o604

    def test_edit_with_texts_larger_than_one_command(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "big.txt")
        old = "o" * sandbox.limits.max_command_bytes
        sandbox.write(path, "head\n" + old + "\ntail\n")
        new = "n" * (sandbox.limits.max_command_bytes + 5)
        sandbox.edit(path, old, new)
        assert sandbox.read(path).content == "head\n" + new + "\ntail\n"
        assert [e.name for e in sandbox.ls(workdir)] == ["big.txt"]

    def test_concurrent_edits_lose_nothing(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "counter.txt")
        sandbox.write(path, "".join(f"slot{i}=empty\n" for i in range(10)))

        def fill(i: int) -> None:
            sandbox.edit(path, f"slot{i}=empty", f"slot{i}=done")

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            list(pool.map(fill, range(10)))
        assert sandbox.read(path).content == "".join(f"slot{i}=done\n" for i in range(10))

    # -- ls / stat / mkdir / delete ------------------------------------------------------------

    def test_ls_and_stat(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.write(self.p(workdir, "b.txt"), "12345")
        sandbox.mkdir(self.p(workdir, "a-dir"))
        sandbox.execute(f"ln -s b.txt {self.p(workdir, 'link')}")
        entries = sandbox.ls(workdir)
        assert [(e.name, e.type) for e in entries] == [
            ("a-dir", "dir"),
            ("b.txt", "file"),
            ("link", "symlink"),
        ]
        info = sandbox.stat(self.p(workdir, "b.txt"))
        assert (info.size, info.type, info.path) == (5, "file", self.p(workdir, "b.txt"))
        assert info.mtime > 0

    def test_ls_errors(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.write(self.p(workdir, "f"), "")
        with pytest.raises(FileNotFoundError):
            sandbox.ls(self.p(workdir, "missing"))
        with pytest.raises(NotADirectoryError):
            sandbox.ls(self.p(workdir, "f"))

    def test_ls_many_entries(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.execute(f"cd {workdir} && for i in $(seq 1000 2999); do : > f$i; done")
        names = [e.name for e in sandbox.ls(workdir)]
        assert names == [f"f{i}" for i in range(1000, 3000)]

    def test_mkdir(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.mkdir(self.p(workdir, "x", "y"))
        sandbox.mkdir(self.p(workdir, "x", "y"))  # exist_ok by default
        assert sandbox.stat(self.p(workdir, "x", "y")).type == "dir"
        with pytest.raises(FileExistsError):
            sandbox.mkdir(self.p(workdir, "x"), exist_ok=False)
        with pytest.raises(FileNotFoundError):
            sandbox.mkdir(self.p(workdir, "no", "parent"), parents=False)
        sandbox.write(self.p(workdir, "file"), "")
        with pytest.raises(FileExistsError):
            sandbox.mkdir(self.p(workdir, "file"))

    def test_delete(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.write(self.p(workdir, "d", "f"), "x")
        with pytest.raises(errors.DirectoryNotEmptyError):
            sandbox.delete(self.p(workdir, "d"))
        sandbox.delete(self.p(workdir, "d", "f"))
        sandbox.delete(self.p(workdir, "d"))
        with pytest.raises(FileNotFoundError):
            sandbox.delete(self.p(workdir, "d"))

    def test_recursive_delete_does_not_follow_symlinks(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.write(self.p(workdir, "keep", "precious"), "x")
        sandbox.write(self.p(workdir, "tree", "sub", "f"), "y")
        sandbox.execute(f"ln -s ../keep {self.p(workdir, 'tree', 'link')}")
        sandbox.delete(self.p(workdir, "tree"), recursive=True)
        assert sandbox.read_bytes(self.p(workdir, "keep", "precious")) == b"x"
        assert [e.name for e in sandbox.ls(workdir)] == ["keep"]

    # -- glob / grep ---------------------------------------------------------------------------

    @pytest.fixture
    def tree(self, sandbox: BaseSandbox, workdir: str) -> str:
        for name in [
            "a.py",
            "b.py",
            "c.txt",
            "sub/d.py",
            "sub/deeper/e.py",
            ".hidden.py",
            ".cfg/f.py",
            "x1",
            "x2",
        ]:
            sandbox.write(self.p(workdir, name), f"# {name}\nneedle in {name}\n")
        return workdir

    def _glob(self, sandbox: BaseSandbox, pattern: str, root: str, **kw: bool) -> list[str]:
        result = sandbox.glob(pattern, root, **kw)
        assert not result.truncated
        return [posixpath.relpath(m.path, root) for m in result.matches]

    def test_glob_patterns(self, sandbox: BaseSandbox, tree: str) -> None:
        assert self._glob(sandbox, "*.py", tree) == ["a.py", "b.py"]
        assert self._glob(sandbox, "**/*.py", tree) == ["a.py", "b.py", "sub/d.py", "sub/deeper/e.py"]
        assert self._glob(sandbox, "x?", tree) == ["x1", "x2"]
        assert self._glob(sandbox, "[ab].py", tree) == ["a.py", "b.py"]
        assert self._glob(sandbox, "[!a].py", tree) == ["b.py"]
        assert self._glob(sandbox, "{a,c}.*", tree) == ["a.py", "c.txt"]
        assert self._glob(sandbox, "sub/**", tree) == ["sub/d.py", "sub/deeper", "sub/deeper/e.py"]

    def test_glob_hidden_only_when_asked(self, sandbox: BaseSandbox, tree: str) -> None:
        assert ".hidden.py" not in self._glob(sandbox, "*", tree)
        assert self._glob(sandbox, ".*.py", tree) == [".hidden.py"]
        found = self._glob(sandbox, "**/*.py", tree, include_hidden=True)
        assert ".hidden.py" in found
        assert ".cfg/f.py" in found

    def test_glob_relative_to_cwd_by_default(self, sandbox: BaseSandbox, tree: str) -> None:
        paths = [m.path for m in sandbox.glob(f"{tree}/*.txt").matches]
        assert paths == [f"{tree}/c.txt"]

    def test_glob_cap_is_explicit(self, sandbox: BaseSandbox, tree: str) -> None:
        result = sandbox.glob("**/*.py", tree, max_results=2)
        assert result.truncated
        assert len(result.matches) == 2

    def test_glob_and_grep_survive_fifo_device_and_symlink_loops(
        self, sandbox: BaseSandbox, tree: str
    ) -> None:
        setup = sandbox.execute(
            f"cd {tree} && mkfifo pipe.py && ln -s /dev/zero zero.py && ln -s . loop"
            " && ln -s loop-b loop-a && ln -s loop-a loop-b"
        )
        assert setup.exit_code == 0, setup.output
        found = self._glob(sandbox, "**/*.py", tree)
        assert "pipe.py" in found
        assert not any(f.startswith("loop/") for f in found)
        matches = sandbox.grep("needle", tree)
        assert {posixpath.basename(m.path) for m in matches.matches} >= {"a.py", "c.txt", "e.py"}

    def test_result_paths_are_the_path_given_joined_else_relative(
        self, sandbox: BaseSandbox, workdir: str
    ) -> None:
        """One convention for ``ls``, ``glob`` and ``grep``: a result's path is the
        path given joined with the entry's below it; without a path, relative to
        the working directory, with no ``./`` (grep's shell and script routes alike)."""
        needle = f"needle-{workdir}"
        sandbox.write(self.p(workdir, "sub", "f.txt"), f"{needle}\n")
        here = sandbox.ls()
        assert workdir in [entry.path for entry in here]
        assert all(entry.path == entry.name for entry in here)
        assert [entry.path for entry in sandbox.ls(workdir)] == [f"{workdir}/sub"]
        assert [entry.path for entry in sandbox.ls(f"./{workdir}")] == [f"./{workdir}/sub"]
        found = f"{workdir}/sub/f.txt"
        assert [info.path for info in sandbox.glob(f"{workdir}/**/*.txt").matches] == [found]
        assert [match.path for match in sandbox.grep(needle).matches] == [found]
        regex = needle.replace("-", "[-]")  # regex syntax: the script's route
        assert [match.path for match in sandbox.grep(regex, fixed_strings=False).matches] == [found]
        assert [match.path for match in sandbox.grep(needle, ignore_case=True).matches] == [found]
        assert [match.path for match in sandbox.grep(needle, ".").matches] == [f"./{found}"]
        assert [match.path for match in sandbox.grep(needle, workdir).matches] == [found]

    def test_grep_fixed_regex_case_and_filter(self, sandbox: BaseSandbox, tree: str) -> None:
        fixed = sandbox.grep("needle in a.py", tree)
        assert [(posixpath.relpath(m.path, tree), m.line_number, m.line) for m in fixed.matches] == [
            ("a.py", 2, "needle in a.py")
        ]
        assert sandbox.grep("needle.in", tree).matches == []  # fixed strings by default
        regex = sandbox.grep(r"needle in [ab]\.py$", tree, fixed_strings=False)
        assert sorted(posixpath.basename(m.path) for m in regex.matches) == ["a.py", "b.py"]
        assert len(sandbox.grep("NEEDLE IN C", tree, ignore_case=True).matches) == 1
        only_txt = sandbox.grep("needle", tree, glob="*.txt")
        assert [posixpath.basename(m.path) for m in only_txt.matches] == ["c.txt"]
        deep = sandbox.grep("needle", tree, glob="sub/**/*.py")
        assert sorted(posixpath.relpath(m.path, tree) for m in deep.matches) == [
            "sub/d.py",
            "sub/deeper/e.py",
        ]

    def test_grep_truncation_long_lines_and_binary(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.write(self.p(workdir, "many.txt"), "hit\n" * 50)
        sandbox.write(self.p(workdir, "long.txt"), "hit" + "x" * 5000 + "\n")
        sandbox.write(self.p(workdir, "bin.dat"), b"hit\0binary")
        capped = sandbox.grep("hit", self.p(workdir, "many.txt"), max_matches=10)
        assert capped.truncated
        assert len(capped.matches) == 10
        long = sandbox.grep("hit", self.p(workdir, "long.txt")).matches[0]
        assert long.line_truncated
        assert len(long.line) < 5000
        result = sandbox.grep("hit", workdir)
        assert result.skipped_binary == 1

    def test_grep_fixed_string_finds_what_the_walk_finds(
        self, sandbox: BaseSandbox, workdir: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A fixed string is searched by GNU grep without an interpreter where
        the sandbox has it (docs/protocol.md, "grep"), else by the script:
        either way the result is the script's walk's (a regex of the escaped
        string asks it the same), in one round trip whose command holds no
        value of the caller's as text; and so when the script takes over, as
        it does for a binary file that matches."""
        root = self.p(workdir, "grep $(x) 'tree'")
        pattern = "ne'$(x)\"edle"
        for name in HOSTILE_NAMES:
            # names that send GNU grep's output to the script hold no match:
            # one that is not UTF-8, one with a newline (docs/protocol.md, "grep")
            hit = not isinstance(name, bytes) and "\n" not in name
            path = os.fsencode(root) + b"/sub/" + os.fsencode(name)
            sandbox.write(path, f"one\r\nat {pattern}\r\n{'x' * 1500}{pattern}\n" if hit else "none\n")
        sandbox.write(self.p(root, "bin.dat"), b"\0no match")
        sandbox.write(self.p(root, "z.txt"), f"{pattern}\nlast {pattern}")
        setup = sandbox.execute(f"cd {shlex.quote(root)} && ln -s z.txt link && ln -s . loop && mkfifo fifo")
        assert setup.exit_code == 0, setup.output
        sandbox.grep(pattern, root)
        commands: list[str] = []
        execute = sandbox.execute

        def spy(command: str, *, timeout: float | None = None) -> ExecuteResponse:
            commands.append(command)
            return execute(command, timeout=timeout)

        monkeypatch.setattr(sandbox, "execute", spy)
        found = {}
        for key, options in {"all": {}, "capped": {"max_matches": 3}, "glob": {"glob": "*e*"}}.items():
            commands.clear()
            found[key] = sandbox.grep(pattern, root, **options)  # type: ignore[arg-type]
            assert len(commands) == 1
            assert not any(value in commands[0] for value in (pattern, root, "'tree'", "*e*"))
            walk = sandbox.grep(re.escape(pattern), root, fixed_strings=False, **options)  # type: ignore[arg-type]
            assert found[key] == walk
        assert len(found["all"].matches) == 2 * (len(HOSTILE_NAMES) - 1) and found["capped"].truncated
        assert found["all"].matches[0].path == self.p(root, "z.txt")
        # a binary file that matches: GNU grep hands over to the script (which
        # runs GNU grep itself where it can), in the same round trip
        sandbox.write(self.p(root, "sub", "hit.bin"), b"\0" + pattern.encode())
        commands.clear()
        handed = sandbox.grep(pattern, root)
        assert len(commands) == 1 and handed.skipped_binary == 1
        assert handed == sandbox.grep(re.escape(pattern), root, fixed_strings=False)
        assert handed.matches == found["all"].matches

    def test_grep_a_garbled_reply_is_not_a_result(
        self, sandbox: BaseSandbox, workdir: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """GNU grep's lines come twice, raw and escaped by sed in the sandbox:
        a character of them changed in transit sends the search to the script,
        whose answer is the result (docs/protocol.md, "grep")."""
        sandbox.write(self.p(workdir, "a.txt"), "one needle\ntwo\nthree needle\n")
        expected = sandbox.grep("needle", workdir)
        execute = sandbox.execute
        garbled: list[str] = []

        def garbling(command: str, *, timeout: float | None = None) -> ExecuteResponse:
            response = execute(command, timeout=timeout)
            at = response.output.find("three needle")  # in GNU grep's lines, not in a frame's base64
            if garbled or at < 0:
                return response
            garbled.append(response.output)
            return response.model_copy(
                update={"output": response.output[:at] + "T" + response.output[at + 1 :]}
            )

        monkeypatch.setattr(sandbox, "execute", garbling)
        assert sandbox.grep("needle", workdir) == expected
        if not garbled:
            pytest.skip("no grep was answered by GNU grep without an interpreter here")

    def test_grep_patterns_no_argument_holds(self, sandbox: BaseSandbox, workdir: str) -> None:
        """A pattern with a NUL, or over Linux's 128 KiB for one argument, is
        searched for itself (by the script, in Python), in a file over
        128 KiB (where the script once ran its own GNU grep); where the
        command cannot carry the pattern (base64), that is a typed error."""
        long = "z" * 200_000
        text = f"first line\nfirst\0line\n{long}\n".encode()
        sandbox.write(self.p(workdir, "f.txt"), b"a" * 9000 + b"\n" + text)  # a NUL past 8 KiB: text
        for pattern, number in (("first\0line", 3), (long, 4)):
            if len(pattern) * 4 // 3 > sandbox.limits.max_command_bytes:
                with pytest.raises(errors.SandboxRuntimeError, match="max_command_bytes"):
                    sandbox.grep(pattern, workdir)
                continue
            found = sandbox.grep(pattern, workdir)
            assert [(posixpath.basename(m.path), m.line_number) for m in found.matches] == [("f.txt", number)]
            assert found == sandbox.grep(re.escape(pattern), workdir, fixed_strings=False)

    def test_grep_a_line_of_megabytes(self, sandbox: BaseSandbox, workdir: str) -> None:
        """A match in a line of 24 MB comes back cut, as every long line is
        (GNU grep's output is more than the provider keeps: the script
        searches), as the script's walk finds it."""
        path = self.p(workdir, "big.txt")
        half = "head -c 12582912 /dev/zero | tr '\\0'"
        made = sandbox.execute(f"{{ {half} x; printf needle; {half} y; echo; }} > {shlex.quote(path)}")
        assert made.exit_code == 0, made.output
        found = sandbox.grep("needle", workdir)
        assert [(m.line_truncated, m.line) for m in found.matches] == [(True, "x" * 1000)]
        assert found == sandbox.grep("needle", workdir, ignore_case=True)  # the script's Python walk

    def test_grep_errors(self, sandbox: BaseSandbox, workdir: str) -> None:
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.grep("(unclosed", workdir, fixed_strings=False)
        with pytest.raises(FileNotFoundError):
            sandbox.grep("x", self.p(workdir, "missing"))

    # -- hostile names ----------------------------------------------------------------------------

    @pytest.mark.parametrize("name", HOSTILE_NAME_PARAMS)
    def test_hostile_name_round_trip(self, sandbox: BaseSandbox, workdir: str, name: str | bytes) -> None:
        raw = os.fsencode(name)
        path = os.fsencode(workdir) + b"/" + raw
        sandbox.write(path, b"hostile\n")
        assert sandbox.read_bytes(path) == b"hostile\n"
        assert sandbox.read(path).content == "hostile\n"
        listed = sandbox.ls(workdir)
        assert [os.fsencode(e.name) for e in listed] == [raw]
        assert os.fsencode(listed[0].path) == path
        sandbox.edit(listed[0].path, "hostile", "edited")
        grep = sandbox.grep("edited", workdir)
        assert [os.fsencode(m.path) for m in grep.matches] == [path]
        assert sandbox.stat(path).size == 7
        sandbox.delete(path)
        assert sandbox.ls(workdir) == []
        assert sandbox.execute("ls PWNED 2>/dev/null; ls */PWNED 2>/dev/null").output == ""

    def test_invalid_paths_raise_before_running(self, sandbox: BaseSandbox) -> None:
        for bad in ["", "nul\0byte"]:
            with pytest.raises(errors.InvalidPathError):
                sandbox.write(bad, "x")
        with pytest.raises(errors.InvalidPathError):
            sandbox.read("x" * 256)

    # -- installed scripts ---------------------------------------------------------------------

    def test_scripts_are_installed_once_then_imported_and_repaired(
        self, sandbox: BaseSandbox, workdir: str
    ) -> None:
        """The first command of a script installs it in ``scratch_dir``
        (docs/protocol.md); later ones import it, its bytecode cached, and a
        damaged or deleted copy is replaced, never run."""
        if sandbox.installed_scripts is not None:
            pytest.skip(f"{type(sandbox).__name__} installs the scripts itself (the test below)")
        home = sandbox.execute(f"cd {shlex.quote(workdir)} && pwd").output.splitlines()[-1]
        uid = int(sandbox.execute("id -u").output.split()[-1])
        scripts = posixpath.join(home, "scratch", protocol.SCRIPTS_DIR % uid)
        name = protocol.shipped("ls").name
        installed = posixpath.join(scripts, f"{name}.py")

        sandbox.mkdir(self.p(workdir, "scratch"))
        saved, sandbox.scratch_dir = sandbox.scratch_dir, posixpath.join(home, "scratch")
        try:
            assert sandbox.stat(workdir).type == "dir"
            cached = [e.name for e in sandbox.ls(posixpath.join(scripts, "__pycache__"))]
            assert [n for n in cached if n.startswith(f"{name}.")], "imported once installed"
            sandbox.execute(f"touch -t 200001010000 {shlex.quote(installed)}")  # a copy made now is newer
            assert sandbox.stat(workdir).type == "dir"
            assert sandbox.stat(installed).mtime < 1e9, "the installed script ran, not a new copy"
            file, folder = shlex.quote(installed), shlex.quote(scripts)
            for damage in [f"echo junk >> {file}", f": > {file}", f"rm -r {folder}"]:
                sandbox.execute(damage)
                assert sandbox.stat(workdir).type == "dir"
                assert sandbox.read(installed).content == protocol.shipped_source("ls")
        finally:
            sandbox.scratch_dir = saved

    def test_a_providers_own_scripts_are_out_of_its_commands_reach(
        self, sandbox: BaseSandbox, workdir: str
    ) -> None:
        """A provider that installs the scripts itself (``installed_scripts``)
        has them read-only to every command (docs/security.md): no command
        can change, remove or add to what file operations run."""
        if sandbox.installed_scripts is None:
            pytest.skip(f"the SDK installs {type(sandbox).__name__}'s scripts (the test above)")
        name = protocol.shipped("ls").name
        installed = posixpath.join(sandbox.installed_scripts, f"{name}.py")
        assert sandbox.read(installed).content == protocol.shipped_source("ls")
        file, folder = shlex.quote(installed), shlex.quote(sandbox.installed_scripts)
        for damage in [
            f"echo junk >> {file}",
            f": > {file}",
            f"rm -rf {folder}",
            f"echo 'raise SystemExit(3)' > {folder}/_json.py",
            f"mv {folder} {folder}.old",
            f"chmod 777 {folder}",
        ]:
            assert sandbox.execute(damage).exit_code != 0, damage
        assert sandbox.read(installed).content == protocol.shipped_source("ls")
        assert [entry.path for entry in sandbox.ls(sandbox.installed_scripts) if "_json" in entry.path] == []
        assert sandbox.stat(workdir).type == "dir"

    def test_the_operation_server_serves_file_operations(
        self, sandbox: BaseSandbox, workdir: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Where ``operation_server`` is on (docs/protocol.md, "The operation
        server"), a sandbox's file operations are served from its third on:
        the first that finds no server has the next one start it. A provider
        whose sandboxes cannot keep one turns it off."""
        if not sandbox.operation_server:
            pytest.skip(f"{type(sandbox).__name__} turns the operation server off")
        outputs: list[str] = []
        execute = sandbox.execute

        def recording(command: str, *, timeout: float | None = None) -> ExecuteResponse:
            response = execute(command, timeout=timeout)
            outputs.append(response.output)
            return response

        monkeypatch.setattr(sandbox, "execute", recording)
        path = self.p(workdir, "served.txt")
        for number in range(4):
            sandbox.write(path, f"{number}\n", overwrite=True)
        unserved = [output for output in outputs[2:] if protocol.UNSERVED_MARKER in output]
        assert sandbox.read(path).content == "3\n"
        assert not unserved, f"not served: {unserved}"

    # -- async twins --------------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_async_twins(self, sandbox: BaseSandbox, workdir: str) -> None:
        path = self.p(workdir, "async.txt")
        assert (await sandbox.aexecute("echo async")).output == "async\n"
        await sandbox.awrite(path, "one\ntwo\n")
        assert (await sandbox.aread(path, offset=1)).content == "two\n"
        await sandbox.aedit(path, "two", "three")
        assert await sandbox.aread_bytes(path) == b"one\nthree\n"
        assert [e.name for e in await sandbox.als(workdir)] == ["async.txt"]
        assert (await sandbox.astat(path)).size == 10
        assert [m.name for m in (await sandbox.aglob("*.txt", workdir)).matches] == ["async.txt"]
        assert len((await sandbox.agrep("three", workdir)).matches) == 1
        assert (await sandbox.arun("pwd", cwd=workdir)).output.strip().endswith(workdir)
        await sandbox.amkdir(self.p(workdir, "d"))
        await sandbox.adelete(path)
        with pytest.raises(FileNotFoundError):
            await sandbox.aread(path)
        big = os.urandom(sandbox.limits.max_command_bytes * 2)
        await sandbox.awrite(self.p(workdir, "big"), big)
        assert await sandbox.aread_bytes(self.p(workdir, "big")) == big

    # -- processes: run, start, stream ----------------------------------------------------

    @pytest.mark.parametrize("path", RUN_PATHS)
    @pytest.mark.parametrize("case", EXIT_STATUSES)
    def test_exit_status_rule(self, sandbox: BaseSandbox, path: str, case: str) -> None:
        command, exit_code, timed_out = EXIT_STATUSES[case]
        response = RUN_PATHS[path](sandbox, command)
        assert (response.exit_code, response.timed_out) == (exit_code, timed_out), response

    @pytest.mark.parametrize("followed", [False, True], ids=["one-trip", "followed"])
    def test_run_keeps_stdout_and_stderr_apart_in_arrival_order(
        self, sandbox: BaseSandbox, followed: bool
    ) -> None:
        pieces: list[str] = []
        callback = pieces.append if followed else None
        pause = f"sleep {self.interleave_seconds:g}"
        result = sandbox.run(
            f"echo o1; {pause}; echo e1 >&2; {pause}; echo o2; {pause}; echo e2 >&2",
            on_stdout=callback,
            on_stderr=callback,
        )
        assert (result.stdout, result.stderr) == ("o1\no2\n", "e1\ne2\n")
        assert result.output == "o1\ne1\no2\ne2\n"
        assert result.exit_code == 0
        if followed:
            assert pieces == ["o1\n", "e1\n", "o2\n", "e2\n"]

    @pytest.mark.parametrize("followed", [False, True], ids=["one-trip", "followed"])
    def test_run_output_that_is_not_utf8(self, sandbox: BaseSandbox, followed: bool) -> None:
        """Invalid bytes become U+FFFD; a character split between two writes
        (and two polls) is decoded whole."""
        pieces: list[str] = []
        command = r"printf 'a\377b\303'; sleep 0.5; printf '\251\000z'; printf '\376' >&2"
        result = sandbox.run(command, on_stdout=pieces.append if followed else None)
        assert result.stdout == "a\ufffdb\u00e9\x00z"
        assert result.stderr == "\ufffd"
        if followed:
            assert "".join(pieces) == result.stdout

    def test_callbacks_get_output_while_the_command_runs(self, sandbox: BaseSandbox) -> None:
        arrivals: list[tuple[float, str]] = []
        result = sandbox.run(
            "echo first; sleep 4; echo second",
            on_stdout=lambda text: arrivals.append((time.monotonic(), text)),
        )
        ended = time.monotonic()
        assert result.stdout == "first\nsecond\n"
        assert "".join(text for _, text in arrivals) == result.stdout
        assert arrivals[0][1] == "first\n"
        assert ended - arrivals[0][0] > 2.5  # the first line came while the command slept

    def test_run_with_a_callback_and_stdin_larger_than_a_command(self, sandbox: BaseSandbox) -> None:
        data = os.urandom(sandbox.limits.max_command_bytes * 2 + 17)
        result = sandbox.run("sha256sum | cut -c1-64", stdin=data, on_stdout=lambda text: None)
        assert result.stdout.strip() == hashlib.sha256(data).hexdigest()

    def test_start_read_wait(self, sandbox: BaseSandbox, workdir: str) -> None:
        process = sandbox.start("pwd; echo err >&2; cat; exit 5", cwd=workdir, stdin=b"from stdin\n")
        assert process.pid > 0
        result = process.wait(timeout=60)
        assert (result.exit_code, result.timed_out) == (5, False)
        assert result.stdout.splitlines()[0].endswith(workdir)
        assert result.stdout.splitlines()[1:] == ["from stdin"]
        assert result.stderr == "err\n"
        assert process.poll() == 5
        first = process.read()
        assert first.stdout == result.stdout.encode() and first.stderr == b"err\n"
        assert first.exit_code == 5
        assert process.read(since=first.next_offset) == first.model_copy(
            update={"stdout": b"", "stderr": b""}
        )
        part = process.read(since=2)
        assert part.stdout == result.stdout.encode()[2:]
        listed = {info.pid: info for info in sandbox.processes()}
        assert listed[process.pid].exit_code == 5
        assert not listed[process.pid].running
        assert listed[process.pid].command == "pwd; echo err >&2; cat; exit 5"

    def test_a_process_outlives_the_call_and_is_polled(self, sandbox: BaseSandbox, workdir: str) -> None:
        marker = self.p(workdir, "done")
        process = sandbox.start(f"sleep 1.5; touch {marker}")
        assert process.poll() is None
        assert [i.running for i in sandbox.processes() if i.pid == process.pid] == [True]
        assert process.wait(timeout=60).exit_code == 0
        assert sandbox.stat(marker).type == "file"

    def test_wait_with_a_timeout_leaves_the_process_running(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("sleep 30")
        with pytest.raises(errors.SandboxTimeoutError):
            process.wait(timeout=1)
        assert process.poll() is None
        process.kill()
        assert process.poll() == 128 + signal.SIGTERM

    def test_kill_escalates_for_a_group_that_ignores_sigterm(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("trap '' TERM; sleep 60 & echo ready; sleep 60; wait")
        self._until_ready(process)  # the trap is set, and the background sleep started
        process.kill()
        assert process.poll() == 128 + signal.SIGKILL
        assert self._live_members(sandbox, process.pid) == 0

    @staticmethod
    def _until_ready(process: Process) -> None:
        """Wait until ``process`` has printed ``ready`` (up to :data:`GONE_SECONDS`)."""
        deadline = time.monotonic() + GONE_SECONDS
        while b"ready" not in process.read().stdout:
            assert process.poll() is None, "the process ended before it was ready"
            assert time.monotonic() < deadline, "the process never said it was ready"
            time.sleep(0.1)

    @staticmethod
    def _live_members(sandbox: BaseSandbox, group: int) -> int:
        """Processes of ``group`` in the sandbox that are not zombies (an
        init that does not reap leaves those behind)."""
        return int(sandbox.run(f"python3 - {group}", stdin=LIVE_MEMBERS).stdout)

    def test_kill_with_another_signal(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.1; done")
        self._until_ready(process)
        process.kill(signal.SIGUSR1)
        result = process.wait(timeout=30)
        assert (result.exit_code, result.stdout) == (7, "ready\ngot-usr1\n")

    def test_reattach_from_a_second_client(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("echo started; sleep 1; echo finished >&2")
        other = self.reopen(sandbox)
        again = other.process(process.pid)
        assert (again.pid, again.command) == (process.pid, process.command)
        result = again.wait(timeout=60)
        assert (result.stdout, result.stderr, result.exit_code) == ("started\n", "finished\n", 0)
        assert process.poll() == 0

    def test_a_process_whose_supervisor_died_is_lost_not_waited_for(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("sleep 30")
        killed = sandbox.execute(f"kill -KILL $(cut -d' ' -f4 /proc/{process.pid}/stat)")  # its parent
        assert killed.exit_code == 0, killed.output
        with pytest.raises(errors.ProcessNotFoundError, match="lost"):
            process.wait(timeout=60)
        (info,) = [info for info in sandbox.processes() if info.pid == process.pid]
        assert (info.running, info.exit_code) == (False, None)
        sandbox.execute(f"kill -KILL -- -{process.pid}")

    def test_an_unknown_process_is_refused(self, sandbox: BaseSandbox) -> None:
        with pytest.raises(errors.ProcessNotFoundError):
            sandbox.process(4_194_303)  # above Linux's default pid_max
        for invalid in (0, -1, None, True, 1.5, "12", 2**64):  # never a round trip with it
            with pytest.raises(errors.InvalidArgumentError):
                sandbox.process(invalid)  # type: ignore[arg-type]

    def test_background_server_reached_by_later_commands(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.write(self.p(workdir, "hello.txt"), "served\n")
        # Below Linux's ephemeral ports (32768-60999): the operation server's
        # listener and every connection's own end take theirs from there.
        port = 20_000 + secrets.randbelow(12_000)
        server = sandbox.start(f"exec python3 -m http.server {port} --bind 127.0.0.1", cwd=workdir)
        fetch = (
            f"for i in $(seq 100); do python3 -c 'import urllib.request as u; "
            f'print(u.urlopen("http://127.0.0.1:{port}/hello.txt").read().decode(), end="")\' '
            "2>/dev/null && exit 0; sleep 0.2; done; exit 1"
        )
        try:
            response = sandbox.execute(fetch, timeout=60)
            assert (response.exit_code, response.output) == (0, "served\n")
            assert server.poll() is None
        finally:
            server.kill()
        assert server.poll() == 128 + signal.SIGTERM

    def test_stream_events(self, sandbox: BaseSandbox) -> None:
        stdout, stderr, end = _streamed(sandbox, "echo out; sleep 0.3; echo err >&2; exit 4")
        assert (stdout, stderr, end.exit_code, end.timed_out) == ("out\n", "err\n", 4, False)
        stdout, _, end = _streamed(sandbox, "echo before; sleep 30", timeout=1)
        assert (stdout, end.exit_code, end.timed_out) == ("before\n", 124, True)

    def _killable(self, workdir: str) -> tuple[str, str]:
        """A :data:`KILLABLE` command and its pid file."""
        pid_file = self.p(workdir, "pid")
        return KILLABLE.format(pid_file=pid_file, marker=self.p(workdir, "late")), pid_file

    @staticmethod
    def _assert_killed(sandbox: BaseSandbox, pid_file: str, *, began: bool = True) -> None:
        """The :data:`KILLABLE` command that wrote ``pid_file`` ends within
        :data:`GONE_SECONDS` (left alone, it runs a minute). Unless it ``began`` (its
        ``go`` was seen), it may have been cancelled before it wrote its pid."""
        deadline = time.monotonic() + GONE_SECONDS
        while (alive := sandbox.execute(CANCELLED_ALIVE.format(pid_file=pid_file)).exit_code) == 0:
            assert time.monotonic() < deadline, "the cancelled command still runs"
            time.sleep(0.2)
        assert alive == 1 or (alive == 2 and not began), f"no pid recorded in {pid_file}"

    def test_leaving_a_stream_early_kills_the_command(self, sandbox: BaseSandbox, workdir: str) -> None:
        command, pid_file = self._killable(workdir)
        for event in sandbox.stream(command):
            assert event.text == "go\n"
            break
        self._assert_killed(sandbox, pid_file)

    def test_an_exception_in_a_callback_kills_the_command(self, sandbox: BaseSandbox, workdir: str) -> None:
        """As Ctrl-C would: raised in the sync call, it kills what the call started."""
        command, pid_file = self._killable(workdir)

        def interrupt(text: str) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            sandbox.run(command, on_stdout=interrupt)
        self._assert_killed(sandbox, pid_file)
        # its record goes too, as the kill's clean-up ends (on a remote runner after the pid has)
        deadline = time.monotonic() + GONE_SECONDS
        late = self.p(workdir, "late")
        while [info for info in sandbox.processes() if info.command.endswith(late)]:
            assert time.monotonic() < deadline, "the killed command's record is still listed"
            time.sleep(0.2)

    @pytest.mark.asyncio
    async def test_async_processes(self, sandbox: BaseSandbox) -> None:
        process = await sandbox.astart("echo async; exit 2")
        result = await process.await_(timeout=60)
        assert (result.stdout, result.exit_code) == ("async\n", 2)
        assert await process.apoll() == 2
        assert (await process.aread()).stdout == b"async\n"
        other = await anyio.to_thread.run_sync(self.reopen, sandbox)  # get() may block
        again = await other.aprocess(process.pid)
        assert await again.apoll() == 2
        assert process.pid in [info.pid for info in await sandbox.aprocesses()]
        pieces: list[str] = []
        followed = await sandbox.arun("echo a; sleep 0.3; echo b >&2", on_stdout=pieces.append)
        assert (pieces, followed.stderr) == (["a\n"], "b\n")
        events = [event async for event in sandbox.astream("echo x; exit 3")]
        assert [(e.kind, e.text, e.exit_code) for e in events] == [("stdout", "x\n", None), ("exit", "", 3)]
        sleeper = await sandbox.astart("sleep 60")
        await sleeper.akill(signal.SIGKILL)
        assert await sleeper.apoll() == 128 + signal.SIGKILL

    @pytest.mark.asyncio
    @pytest.mark.parametrize("how", ["asyncio_cancel", "cancel_scope", "stream"])
    async def test_cancelling_a_followed_run_kills_the_command(
        self, sandbox: BaseSandbox, workdir: str, how: str
    ) -> None:
        """Cancelled once it has begun (its ``go`` arrived): a task's ``cancel``
        (what ``asyncio.wait_for`` does at its timeout), an anyio cancel scope, or
        leaving a stream early."""
        command, pid_file = self._killable(workdir)
        loop = asyncio.get_running_loop()
        began = asyncio.Event()

        def on_stdout(text: str) -> None:
            loop.call_soon_threadsafe(began.set)  # wherever the provider calls it from

        if how == "asyncio_cancel":
            task = asyncio.ensure_future(sandbox.arun(command, on_stdout=on_stdout))
            await asyncio.wait_for(began.wait(), GONE_SECONDS)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        elif how == "cancel_scope":
            async with anyio.create_task_group() as group:

                async def cancel_once_begun() -> None:
                    with anyio.fail_after(GONE_SECONDS):
                        await began.wait()
                    group.cancel_scope.cancel()

                group.start_soon(cancel_once_begun)
                await sandbox.arun(command, on_stdout=on_stdout)
        else:
            async with contextlib.aclosing(sandbox.astream(command)) as events:
                async for event in events:
                    assert event.text == "go\n"
                    break
        await anyio.to_thread.run_sync(self._assert_killed, sandbox, pid_file)

    @pytest.mark.slow
    def test_stream_of_100_mib_keeps_client_memory_bounded(self, sandbox: BaseSandbox) -> None:
        """The client holds about one poll's output, whatever the stream's size:
        the peak for 100 MiB is about the peak for 16 MiB, give or take what
        the client library reads ahead (:attr:`stream_read_ahead`; tracemalloc
        counts the process, an in-process fake server included)."""
        mib = 1024 * 1024
        small = self._stream_peak(sandbox, 16 * mib)
        large = self._stream_peak(sandbox, max(100 * mib, 16 * mib + 2 * self.stream_read_ahead))
        assert large < 1.5 * small + 4 * mib + self.stream_read_ahead, (small, large)

    @staticmethod
    def _stream_peak(sandbox: BaseSandbox, size: int) -> int:
        """Stream ``size`` bytes of output; the peak of traced memory meanwhile."""
        tracemalloc.start()
        try:
            received = 0
            for event in sandbox.stream(f"head -c {size} /dev/zero | tr '\\0' x", timeout=600):
                if event.kind == "stdout":
                    received += len(event.text)
                else:
                    assert (event.kind, event.exit_code) == ("exit", 0)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert received == size
        return peak

    # -- workspace state ---------------------------------------------------------------------

    def _tree(self, sandbox: BaseSandbox, workdir: str) -> list[str]:
        """Every entry under ``workdir`` as the sandbox sees it: name, kind,
        mode, link count, link target and content digest."""
        response = sandbox.execute(f"python3 -c {shlex.quote(TREE_LISTING)} {shlex.quote(workdir)}")
        assert response.exit_code == 0, response.output
        return response.output.splitlines()

    def _hostile_tree(self, sandbox: BaseSandbox, workdir: str) -> None:
        """Hostile names, an empty directory, modes, a hard link and links in and out."""
        for name in HOSTILE_NAMES:
            raw = os.fsencode(name)
            sandbox.upload_files([(os.fsdecode(os.fsencode(workdir) + b"/names/" + raw), raw)])
        sandbox.upload_files([(self.p(workdir, "src/main.py"), b"print('hi')\n")])
        setup = (
            "mkdir -p empty/inner sub && printf 'secret' > sub/private && chmod 600 sub/private"
            " && printf '#!/bin/sh\\n' > sub/run.sh && chmod 755 sub/run.sh && chmod 750 sub"
            " && ln sub/run.sh hard-link && ln -s src/main.py link-in && ln -s /etc/hostname link-out"
        )
        assert sandbox.execute(f"cd {shlex.quote(workdir)} && {setup}").exit_code == 0

    def test_a_snapshot_restores_the_files_exactly(
        self, sandbox: BaseSandbox, workdir: str, tmp_path: Path
    ) -> None:
        """Bytes, names, modes, empty directories, hard links and the symlinks
        inside come back as they were; whatever came after is gone; a link
        out of the workspace is not captured (docs/state.md)."""
        self._hostile_tree(sandbox, workdir)
        store = DirectorySnapshotStore(tmp_path / "store")
        snapshot = sandbox.snapshot([workdir], store=store)
        expected = [line for line in self._tree(sandbox, workdir) if not line.startswith("b'link-out'")]
        assert len(snapshot.entries) == len(expected) + 1  # the workdir itself
        assert store.load(snapshot.id) == snapshot
        changes = "rm -rf sub names/* && echo later > later.txt && echo changed > src/main.py"
        assert sandbox.execute(f"cd {shlex.quote(workdir)} && {changes}").exit_code == 0
        assert sandbox.restore(snapshot.id, store=store) == snapshot
        assert self._tree(sandbox, workdir) == expected

    def test_a_damaged_snapshot_changes_nothing(
        self, sandbox: BaseSandbox, workdir: str, tmp_path: Path
    ) -> None:
        store = DirectorySnapshotStore(tmp_path / "store")
        sandbox.write(self.p(workdir, "a.txt"), "first\n")
        snapshot = sandbox.snapshot([workdir], store=store)
        sandbox.write(self.p(workdir, "a.txt"), "second\n", overwrite=True)
        [entry] = [e for e in snapshot.entries if e.path.endswith("a.txt")]
        assert entry.sha256 is not None
        blob = store.root / "blobs" / entry.sha256[:2] / entry.sha256
        blob.write_bytes(b"third\n")
        with pytest.raises(errors.SnapshotDamagedError, match=entry.sha256):
            sandbox.restore(snapshot, store=store)
        blob.unlink()
        with pytest.raises(errors.SnapshotDamagedError, match="no blob"):
            sandbox.restore(snapshot, store=store)
        with pytest.raises(errors.SnapshotNotFoundError):
            sandbox.restore("f" * 64, store=store)
        assert sandbox.read(self.p(workdir, "a.txt")).content == "second\n"
        assert sandbox.ls(workdir)[0].path.endswith("a.txt") and len(sandbox.ls(workdir)) == 1

    def test_a_second_snapshot_stores_only_what_changed(
        self, sandbox: BaseSandbox, workdir: str, tmp_path: Path
    ) -> None:
        store = DirectorySnapshotStore(tmp_path / "store")
        make = f"cd {shlex.quote(workdir)} && for i in $(seq 200); do echo $i > f$i; done"
        assert sandbox.execute(make).exit_code == 0
        first = sandbox.snapshot([workdir], store=store)
        blobs = sorted(store.root.glob("blobs/*/*"))
        sandbox.write(self.p(workdir, "f7"), "changed\n", overwrite=True)
        second = sandbox.snapshot([workdir], store=store)
        assert first.id != second.id and first.files == second.files == 200
        assert len(sorted(store.root.glob("blobs/*/*"))) == len(blobs) + 1
        assert sorted(store.ids()) == sorted([first.id, second.id])

    async def test_snapshot_async_twins(self, sandbox: BaseSandbox, workdir: str, tmp_path: Path) -> None:
        store = DirectorySnapshotStore(tmp_path / "store")
        await sandbox.awrite(self.p(workdir, "a.txt"), "async\n")
        snapshot = await sandbox.asnapshot([workdir], store=store)
        await sandbox.adelete(self.p(workdir, "a.txt"))
        await sandbox.arestore(snapshot, store=store)
        assert (await sandbox.aread(self.p(workdir, "a.txt"))).content == "async\n"


#: Prints each entry under ``argv[1]`` (relative, repr of its bytes name),
#: its kind, permission bits (not setuid, setgid or sticky, which a snapshot
#: does not keep), link count, link target and SHA-256, sorted.
TREE_LISTING = """import hashlib, os, stat, sys
root = os.fsencode(sys.argv[1])
lines = []
for top, dirs, files in os.walk(root):
    for name in dirs + files:
        path = os.path.join(top, name)
        st = os.lstat(path)
        kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
        target = os.readlink(path) if kind == "link" else b""
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest() if kind == "file" else ""
        nlink = st.st_nlink if kind == "file" else 0
        rel = os.path.relpath(path, root)
        lines.append(f"{rel!r} {kind} {st.st_mode & 0o777:o} {nlink} {target!r} {digest}")
print("\\n".join(sorted(lines)))
"""
