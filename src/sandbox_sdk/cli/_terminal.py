"""``sbx exec`` with stdin forwarded, and ``sbx shell`` on a terminal.

Both start the command with ``start`` (``stdin=PIPE``, or a ``pty`` of the
local terminal's size) and follow it (``Process.stream``) while a thread
copies this process's stdin into it (``write_stdin``). On a terminal the
local side is put in raw mode, so every key, Ctrl-C included, goes to the
program in the sandbox, and a window change (SIGWINCH) resizes the remote
terminal. Interrupted here (Ctrl-C outside raw mode), the remote group is
killed before ``sbx`` exits 130; so it is when the terminal closes (SIGHUP) or
``sbx`` is asked to stop (SIGTERM), with 128 plus that signal's number: a
command left running in the sandbox with no one to see it is not left behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import termios
import threading
import tty
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TextIO

from sandbox_sdk import PIPE, BaseSandbox, Process, PtySize, SandboxError, StdinClosedError

#: Exit status of a command interrupted by Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 128 + signal.SIGINT
#: Bytes of stdin read at once: a read returns what is there (a key, a
#: line, or up to this much of a pipe), so input is forwarded as it comes.
READ_BYTES = 1 << 20


class Signalled(KeyboardInterrupt):
    """SIGHUP or SIGTERM, raised as Ctrl-C's ``KeyboardInterrupt`` is, so that
    what a command started is killed the same way (``run`` and ``stream``
    clean up after any interruption)."""

    def __init__(self, number: int) -> None:
        super().__init__(signal.Signals(number).name)
        self.number = number


def interrupted_status(interruption: KeyboardInterrupt) -> int:
    """The exit status for ``interruption``: 128 plus its signal's number."""
    return 128 + interruption.number if isinstance(interruption, Signalled) else INTERRUPTED


@contextlib.contextmanager
def hangup_interrupts() -> Iterator[None]:
    """SIGHUP and SIGTERM raise :class:`Signalled` in the main thread meanwhile."""

    def interrupt(number: int, frame: FrameType | None) -> None:
        raise Signalled(number)

    previous = {number: signal.signal(number, interrupt) for number in (signal.SIGHUP, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def kill_reporting(process: Process) -> None:
    """Kill ``process``'s group; a failure is said, as the command may still run."""
    try:
        process.kill()
    except SandboxError as exc:
        print(f"sbx: process {process.pid} may still run: {exc}", file=sys.stderr)


class RawStdin:
    """This process's stdin as a ``Readable`` whose ``read(n)`` returns
    what is there now (one ``os.read``), where a buffered read would wait
    for ``n`` bytes: ``write_stdin`` forwards a key or a line at once."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, size: int) -> bytes:
        return os.read(self.fd, min(size, READ_BYTES))


def forward_stdin(process: Process, fd: int, *, close: bool) -> threading.Thread:
    """A daemon thread copying ``fd`` into ``process``'s stdin (then closing
    it at the end of input, with ``close``); it stops quietly when the
    process has ended or ``sbx`` exits."""

    def copy() -> None:
        try:
            process.write_stdin(RawStdin(fd))
            if close:
                process.close_stdin()
        except (StdinClosedError, OSError):
            pass  # the process ended (or stdin went away): its exit is what is reported
        except SandboxError as exc:
            print(f"sbx: stdin not forwarded: {exc}", file=sys.stderr)

    thread = threading.Thread(target=copy, name="sbx-stdin", daemon=True)
    thread.start()
    return thread


def follow_to_exit(process: Process, out: TextIO, err: TextIO) -> int:
    """Write ``process``'s output to ``out`` and ``err`` as it comes; its
    exit status. Interrupted (Ctrl-C, SIGHUP, SIGTERM), the remote group is
    killed first and the status is 128 plus the signal's number."""
    try:
        for event in process.stream():
            if event.kind == "exit":
                if event.timed_out:
                    print("sbx: the command was killed at its timeout", file=sys.stderr)
                return 1 if event.exit_code is None else event.exit_code
            stream = out if event.kind == "stdout" else err
            stream.write(event.text)
            stream.flush()
    except KeyboardInterrupt as interruption:
        kill_reporting(process)
        return interrupted_status(interruption)
    raise SandboxError(f"the output of process {process.pid} ended without its exit")


def exec_with_stdin(sandbox: BaseSandbox, line: str, timeout: float | None) -> int:
    """``sbx exec`` with this process's stdin forwarded to the command."""
    process = sandbox.start(line, stdin=PIPE, timeout=timeout)
    forward_stdin(process, sys.stdin.fileno(), close=True)
    return follow_to_exit(process, sys.stdout, sys.stderr)


def terminal_size(fd: int) -> PtySize:
    """The size of the terminal on ``fd``."""
    columns, lines = shutil.get_terminal_size()
    with contextlib.suppress(OSError):
        columns, lines = os.get_terminal_size(fd)
    return PtySize(rows=max(1, lines), cols=max(1, columns))


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal on ``fd`` in raw mode (each key as it is typed, no local
    echo or signals), restored however the block ends. Keys typed ahead are
    kept (``tty.setraw`` would flush them by default) and go to the sandbox."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSADRAIN)
        yield
    finally:
        with contextlib.suppress(termios.error):  # a terminal that hung up has nothing to restore
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def on_window_change(handler: Callable[[], None]) -> Iterator[None]:
    """``handler`` called (in a thread, as it makes a round trip) at each SIGWINCH."""

    def changed(number: int, frame: FrameType | None) -> None:
        threading.Thread(target=handler, name="sbx-resize", daemon=True).start()

    previous = signal.signal(signal.SIGWINCH, changed)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)


def terminal_shell(sandbox: BaseSandbox, command: str = "bash") -> int:
    """``sbx shell`` on a terminal: ``command`` on a terminal in the sandbox
    of this one's size, this terminal in raw mode meanwhile; the shell's
    exit status."""
    fd = sys.stdin.fileno()
    process = sandbox.start(command, pty=terminal_size(fd))

    def resize() -> None:
        with contextlib.suppress(SandboxError):
            size = terminal_size(fd)
            process.resize(size.rows, size.cols)

    with raw_mode(fd), on_window_change(resize):
        forward_stdin(process, fd, close=False)
        status = follow_to_exit(process, sys.stdout, sys.stderr)
    return status
