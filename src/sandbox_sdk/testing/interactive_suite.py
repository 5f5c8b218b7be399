"""The interactive half of the conformance kit: stdin written to a running
process, live following from another client, and terminals.

``SandboxConformanceTests`` includes these checks, so every provider's kit
run covers them; they use the public API only (``start(stdin=PIPE)``,
``start(pty=PtySize(...))``, ``Process.write_stdin``, ``follow``,
``stream``), which every provider gets from ``execute()``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import posixpath
import random
import time
import tracemalloc
from typing import ClassVar

import anyio
import pytest

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import PIPE, PtySize
from sandbox_sdk.process import Process
from sandbox_sdk.testing._suite import SandboxSuite

#: How long a check waits for output it is owed before failing.
OUTPUT_SECONDS = 60.0
#: What Python's interactive prompt looks like on a terminal.
PROMPT = b">>> "


class Generated(io.RawIOBase):
    """``size`` bytes of seeded pseudo-random (incompressible) data as a
    binary file object, made as it is read (so a test of a large input holds
    no copy of it), with the SHA-256 of what was read so far."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.random = random.Random(size)
        self.digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        size = min(len(buffer), self.left)
        data = self.random.randbytes(size)
        self.left -= size
        buffer[:size] = data
        self.digest.update(data)
        return size


def until_output(process: Process, wanted: bytes, since: int = 0) -> int:
    """Read ``process``'s output from ``since`` until it holds ``wanted``
    (up to :data:`OUTPUT_SECONDS`); the position after it."""
    deadline = time.monotonic() + OUTPUT_SECONDS
    seen = b""
    at = since
    while True:
        page = process.read(since=at)
        seen += page.stdout + page.stderr
        at = page.next_offset
        found = seen.find(wanted)
        if found >= 0:
            return since + found + len(wanted)
        assert page.exit_code is None, (
            f"the process ended (exit {page.exit_code}) without {wanted!r}: {seen!r}"
        )
        assert time.monotonic() < deadline, f"no {wanted!r} in the output: {seen!r}"
        time.sleep(0.05)


class InteractiveChecks(SandboxSuite):
    """Processes driven while they run (docs/processes.md)."""

    #: The sizes of the large stdin check, a baseline and the large size. A
    #: provider whose test double is slow (a fake service in the test's own
    #: process, under ``tracemalloc``) may lower both, the large one at least
    #: 1.5 times the baseline plus 4 MiB, so that a client holding what it sends
    #: still fails.
    stdin_baseline_mib: ClassVar[int] = 16
    large_stdin_mib: ClassVar[int] = 100

    # -- stdin -------------------------------------------------------------------------

    def test_stdin_pipe_delivers_bytes_in_order_then_eof(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("cat; echo; echo end", stdin=PIPE)
        pieces: list[str | bytes] = [b"first\n", "second é\n", bytes(range(256)), b"", b"\0last"]
        for piece in pieces:
            process.write_stdin(piece)
        process.close_stdin()  # cat reads an end of file, and the command goes on
        result = process.wait(timeout=OUTPUT_SECONDS)
        expected = b"first\nsecond \xc3\xa9\n" + bytes(range(256)) + b"\0last\nend\n"
        assert result.exit_code == 0
        assert process.read().stdout == expected

    def test_stdin_larger_than_a_command_from_a_file_object(self, sandbox: BaseSandbox) -> None:
        size = sandbox.limits.max_command_bytes * 2 + 17
        source = Generated(size)
        process = sandbox.start("sha256sum | cut -c1-64", stdin=PIPE)
        process.write_stdin(io.BufferedReader(source))
        process.close_stdin()
        result = process.wait(timeout=OUTPUT_SECONDS)
        assert result.stdout.split()[0] == source.digest.hexdigest()
        assert result.exit_code == 0

    def test_stdin_is_refused_with_a_typed_error(self, sandbox: BaseSandbox) -> None:
        unpiped = sandbox.start("sleep 30")
        try:
            with pytest.raises(errors.StdinClosedError, match="without stdin=PIPE"):
                unpiped.write_stdin(b"x")
        finally:
            unpiped.kill()
        piped = sandbox.start("cat > /dev/null; sleep 30", stdin=PIPE)
        try:
            piped.close_stdin()
            with pytest.raises(errors.StdinClosedError, match="closed"):
                piped.write_stdin(b"late")
            with pytest.raises(errors.StdinClosedError, match="closed"):
                piped.close_stdin()
        finally:
            piped.kill()
        with pytest.raises(errors.StdinClosedError, match="ended"):
            piped.write_stdin(b"after the end")
        with pytest.raises(errors.InvalidArgumentError):
            piped.write_stdin(12)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.run("cat", stdin=PIPE)  # type: ignore[arg-type]

    def test_a_reattached_client_writes_to_stdin(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("head -n 2", stdin=PIPE)
        process.write_stdin("one\n")
        again = self.reopen(sandbox).process(process.pid)
        again.write_stdin("two\nthree\n")  # head ends after two lines; the rest is never read
        assert process.wait(timeout=OUTPUT_SECONDS).stdout == "one\ntwo\n"

    @pytest.mark.slow
    def test_100_mib_through_stdin_keeps_client_memory_bounded(
        self, sandbox: BaseSandbox, workdir: str
    ) -> None:
        """100 MiB (``large_stdin_mib``) piped through ``cat`` to a file arrive
        byte-identical, and the client's peak memory is about the one for 16
        MiB (``stdin_baseline_mib``: one chunk in flight, whatever the size)."""
        assert self.large_stdin_mib >= 1.5 * self.stdin_baseline_mib + 4, "too small to tell"
        small = self._stdin_peak(sandbox, workdir, self.stdin_baseline_mib * 1024 * 1024)
        large = self._stdin_peak(sandbox, workdir, self.large_stdin_mib * 1024 * 1024)
        assert large < 1.5 * small + 4 * 1024 * 1024, (small, large)

    def _stdin_peak(self, sandbox: BaseSandbox, workdir: str, size: int) -> int:
        target = self.p(workdir, f"piped-{size}")
        process = sandbox.start(["sh", "-c", 'cat > "$1"', "sh", target], stdin=PIPE)
        source = Generated(size)
        tracemalloc.start()
        try:
            process.write_stdin(io.BufferedReader(source, 1 << 16))
            process.close_stdin()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert process.wait(timeout=600).exit_code == 0
        check = sandbox.run(["sh", "-c", 'sha256sum < "$1" | cut -c1-64; rm -f "$1"', "sh", target])
        assert check.stdout.strip() == source.digest.hexdigest()
        return peak

    # -- follow ------------------------------------------------------------------------

    def test_a_second_client_follows_every_byte_once_in_order(self, sandbox: BaseSandbox) -> None:
        command = "for i in $(seq 1 40); do echo out-$i; echo err-$i >&2; sleep 0.02; done; exit 3"
        process = sandbox.start(command)
        follower = self.reopen(sandbox).process(process.pid)
        stdout: list[str] = []
        stderr: list[str] = []
        result = follower.follow(on_stdout=stdout.append, on_stderr=stderr.append)
        assert "".join(stdout) == "".join(f"out-{i}\n" for i in range(1, 41))
        assert "".join(stderr) == "".join(f"err-{i}\n" for i in range(1, 41))
        assert (result.stdout, result.stderr, result.exit_code) == ("".join(stdout), "".join(stderr), 3)

    def test_a_stream_resumes_from_any_offset(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 2")
        events = list(process.stream())
        assert [(e.kind, e.text) for e in events[:-1]] == [
            ("stdout", "one\n"),
            ("stderr", "two\n"),
            ("stdout", "three\n"),
        ]
        assert (events[-1].kind, events[-1].exit_code) == ("exit", 2)
        assert [e.next_offset for e in events[:-1]] == [4, 8, 14]
        rest = list(self.reopen(sandbox).process(process.pid).stream(since=4))
        assert [(e.kind, e.text) for e in rest] == [("stderr", "two\n"), ("stdout", "three\n"), ("exit", "")]
        part = process.follow(since=6)
        assert (part.output, part.exit_code) == ("o\nthree\n", 2)

    def test_leaving_a_follow_early_leaves_the_process_running(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("echo ready; sleep 30")
        try:
            for event in process.stream():
                assert event.text == "ready\n"
                break
            assert process.poll() is None
        finally:
            process.kill()

    @pytest.mark.asyncio
    async def test_async_stdin_and_follow(self, sandbox: BaseSandbox) -> None:
        process = await sandbox.astart("tr a-z A-Z", stdin=PIPE)
        await process.awrite_stdin("shout\n")
        await process.aclose_stdin()
        other = await anyio.to_thread.run_sync(self.reopen, sandbox)
        again = await other.aprocess(process.pid)
        async with contextlib.aclosing(again.astream()) as events:
            seen = [(event.kind, event.text, event.exit_code) async for event in events]
        assert seen == [("stdout", "SHOUT\n", None), ("exit", "", 0)]
        texts: list[str] = []
        followed = await again.afollow(on_stdout=texts.append)
        assert (texts, followed.exit_code) == (["SHOUT\n"], 0)

    # -- terminals -----------------------------------------------------------------------

    def test_python_repl_on_a_terminal(self, sandbox: BaseSandbox) -> None:
        """``python3 -i`` through a terminal: a prompt, ``1+1`` gives 2, Ctrl-C
        interrupts a busy loop (SIGINT to the foreground program), Ctrl-D exits 0."""
        process = sandbox.start(["python3", "-q", "-i"], pty=PtySize(rows=24, cols=80))
        at = until_output(process, PROMPT)
        process.write_stdin('exec(\'print("spin" + "ning")\\nwhile True: pass\')\n')
        at = until_output(process, b"spinning\r\n", at)
        process.write_stdin(b"\x03")
        at = until_output(process, b"KeyboardInterrupt\r\n" + PROMPT, at)
        process.write_stdin("1+1\n")  # (after it, as its exit status is the last statement's)
        at = until_output(process, b"\r\n2\r\n" + PROMPT, at)
        process.write_stdin(b"\x04")
        result = process.wait(timeout=OUTPUT_SECONDS)
        assert (result.exit_code, result.stderr) == (0, "")

    def test_a_terminal_has_its_size_and_term_and_is_resized(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start(
            'echo "[$TERM]"; stty size; [ -t 0 ] && echo tty; read -r line; stty size; echo "got $line"',
            pty=PtySize(rows=24, cols=80),
        )
        at = until_output(process, b"[xterm-256color]\r\n24 80\r\ntty\r\n")
        process.resize(30, 100)
        process.write_stdin("typed\n")
        until_output(process, b"30 100\r\ngot typed\r\n", at)
        assert process.wait(timeout=OUTPUT_SECONDS).exit_code == 0
        with pytest.raises(errors.InvalidArgumentError):
            process.resize(0, 80)
        plain = sandbox.start("sleep 30", stdin=PIPE)
        try:
            with pytest.raises(errors.InvalidArgumentError, match="no terminal"):
                plain.resize(24, 80)
        finally:
            plain.kill()
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.start("true", pty=PtySize(), stdin=b"data")
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.start("true", pty=(24, 80))  # type: ignore[arg-type]

    def test_closing_a_terminal_sends_end_of_file(self, sandbox: BaseSandbox) -> None:
        process = sandbox.start("cat; echo bye", pty=PtySize())
        process.write_stdin("line\n")
        process.close_stdin()
        result = process.wait(timeout=OUTPUT_SECONDS)
        assert result.exit_code == 0
        assert result.stdout.replace("\r\n", "\n").endswith("line\nline\nbye\n")

    # -- watch -------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_watch_reports_a_thousand_files_created_modified_moved_and_deleted(
        self, sandbox: BaseSandbox, workdir: str
    ) -> None:
        """Each phase is done in one command and waited for, as changes to one
        path within the debounce are coalesced (created then deleted is nothing).
        (Async, for its deadline: a watch says nothing while nothing changes, so
        a missed event would leave a plain ``next`` waiting for ever.)"""
        watched = self.p(workdir, "watched")
        await sandbox.amkdir(self.p(watched, "into"))
        names = {self.p(watched, f"f{i}") for i in range(1000)}
        moved = {self.p(watched, "into", f"f{i}") for i in range(1000)}
        phases = [
            ("for i in $(seq 0 999); do : > f$i; done", "created", names),
            ("for i in $(seq 0 999); do echo more >> f$i; done", "modified", names),
            ("for i in $(seq 0 999); do mv f$i into/; done", "moved", names),
            ("rm into/*", "deleted", moved),
        ]
        async with contextlib.aclosing(sandbox.awatch(watched)) as events:
            with anyio.fail_after(OUTPUT_SECONDS):
                first = await anext(events)
            assert (first.kind, first.path, first.method) == ("watching", watched, "inotify")
            for command, kind, expected in phases:
                assert (await sandbox.arun(command, cwd=watched)).exit_code == 0
                seen: set[str] = set()
                with anyio.move_on_after(OUTPUT_SECONDS):
                    async for event in events:
                        if event.kind == kind:
                            seen.add(event.path)
                            if kind == "moved":
                                assert event.dest == self.p(watched, "into", posixpath.basename(event.path))
                        if expected <= seen:
                            break
                assert expected <= seen, (kind, len(seen & expected), "of", len(expected))

    def test_closing_a_watch_ends_its_watcher(self, sandbox: BaseSandbox, workdir: str) -> None:
        before = {info.pid for info in sandbox.processes()}
        events = sandbox.watch(workdir, recursive=False)
        assert next(events).kind == "watching"
        (watcher,) = [info.pid for info in sandbox.processes() if info.running and info.pid not in before]
        events.close()
        assert sandbox.process(watcher).poll() is not None  # the close returns once it is killed

    @pytest.mark.asyncio
    async def test_async_watch_sees_a_new_file_and_cancellation_ends_it(
        self, sandbox: BaseSandbox, workdir: str
    ) -> None:
        before = {info.pid for info in await sandbox.aprocesses()}
        target = self.p(workdir, "async.txt")
        with anyio.fail_after(OUTPUT_SECONDS):
            async with contextlib.aclosing(sandbox.awatch(workdir)) as events:
                async for event in events:
                    if event.kind == "watching":
                        await sandbox.awrite(target, "new")
                    elif (event.kind, event.path) == ("created", target):
                        break
        started = [info for info in await sandbox.aprocesses() if info.pid not in before]
        assert [info.running for info in started] == [False]

    def test_watching_what_is_not_a_directory_is_refused(self, sandbox: BaseSandbox, workdir: str) -> None:
        sandbox.write(self.p(workdir, "file"), "x")
        with pytest.raises(errors.SandboxNotADirectoryError):
            next(sandbox.watch(self.p(workdir, "file")))
        with pytest.raises(errors.SandboxFileNotFoundError):
            next(sandbox.watch(self.p(workdir, "missing")))
        with pytest.raises(errors.InvalidArgumentError):
            next(sandbox.watch(workdir, debounce=0))
