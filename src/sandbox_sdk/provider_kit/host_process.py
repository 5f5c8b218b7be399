"""Run one shell command as a local child process, as ``execute()`` must.

Shared by the local and bubblewrap providers: the command gets its own
process group (a new session, so it cannot reach a controlling terminal);
output is read as it comes, stdout and stderr merged, and everything past
``max_output_bytes`` is discarded on arrival, so memory never grows past the
cap; at the timeout the whole group is killed, and so it is when the call is
interrupted (Ctrl-C; a cancelled :func:`arun_process`). A command killed by
signal N exits 128+N, as a shell reports it. A command too long for one
``bash -c`` argument travels in an in-memory file (:func:`bash_script`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

import anyio.to_thread

from sandbox_sdk._calls import check_command
from sandbox_sdk.models import TIMEOUT_EXIT_CODE, ExecuteResponse
from sandbox_sdk.protocol import command_bytes

#: Commands up to this size go to ``bash -c`` as one argument (Linux caps one
#: argument at 128 KiB); larger ones are handed over in an in-memory file.
ARGV_COMMAND_BYTES = 96 * 1024
#: What a provider that runs commands with :func:`bash_script` declares as
#: ``max_command_bytes``: 3 MiB of upload per round trip, a bounded client
#: memory per command in flight, and less than one 8 MiB output (so whatever
#: one command wrote, one ``read`` returns).
LARGE_COMMAND_BYTES = 4 * 1024 * 1024
WRITE_CHARS = 1 << 20
#: How long output is still collected from background children after the
#: command itself exited, before ``execute`` returns without them.
DRAIN_SECONDS = 0.2
#: The output pipe is enlarged to this (Linux's default cap for unprivileged
#: processes), so a command writing megabytes blocks, and wakes us, 16 times
#: less often than with the default 64 KiB.
PIPE_BYTES = 1 << 20


def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    timeout: float,
    max_output_bytes: int,
    pass_fds: Sequence[int] = (),
    on_start: Callable[[int], object] = lambda pgid: None,
) -> ExecuteResponse:
    """Run ``argv`` as a host process in its own process group: stdout and
    stderr merged and cut at ``max_output_bytes``, the whole group killed at
    ``timeout`` (``timed_out=True``) or when the call is interrupted, as
    ``execute``'s contract asks; ``on_start`` gets the group's id once it runs."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=None if env is None else dict(env),
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    try:
        on_start(proc.pid)
        return _collect(proc, timeout, max_output_bytes)
    except BaseException:  # Ctrl-C, or anything else: nothing is left running
        kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        assert proc.stdout is not None
        proc.stdout.close()


async def arun_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    timeout: float,
    max_output_bytes: int,
    pass_fds: Sequence[int] = (),
) -> ExecuteResponse:
    """:func:`run_process` for an ``aexecute``: in a worker thread, and a
    cancellation kills the command's whole group before it propagates."""
    started: list[int] = []
    run = partial(
        run_process,
        argv,
        cwd=cwd,
        env=env,
        timeout=timeout,
        max_output_bytes=max_output_bytes,
        pass_fds=pass_fds,
        on_start=started.append,
    )
    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except BaseException:
        for pgid in started:  # the worker thread sees the pipe close and ends
            kill_group(pgid)
        raise


def _collect(proc: subprocess.Popen[bytes], timeout: float, max_output_bytes: int) -> ExecuteResponse:
    assert proc.stdout is not None
    pipe = proc.stdout
    fd = pipe.fileno()
    with contextlib.suppress(OSError, AttributeError):  # best effort; Linux only
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    os.set_blocking(fd, False)
    kept = bytearray()
    truncated = False
    timed_out = False
    deadline = time.monotonic() + timeout
    drain_until: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(pipe, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if proc.poll() is not None and drain_until is None:
                drain_until = now + DRAIN_SECONDS
            limit = deadline if drain_until is None else min(deadline, drain_until)
            if now >= limit:
                timed_out = proc.poll() is None
                break
            if not selector.select(min(limit - now, 0.05)):
                continue
            try:
                block = os.read(fd, PIPE_BYTES)
            except BlockingIOError:
                continue
            if not block:  # EOF: the command and all its children closed the pipe
                break
            room = max_output_bytes - len(kept)
            if len(block) > room:
                truncated = True
                block = block[:room]
            kept += block
    if not timed_out:
        # The pipe can close long before the command ends (``exec >log``):
        # the deadline still holds.
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        kill_group(proc.pid)
    exit_code = proc.wait()
    output = kept.decode("utf-8", "replace")
    if timed_out:
        return ExecuteResponse(
            output=output, exit_code=TIMEOUT_EXIT_CODE, truncated=truncated, timed_out=True
        )
    # Popen reports death by signal N as -N; a shell, and the exit-status rule, as 128+N.
    exit_code = exit_code if exit_code >= 0 else 128 - exit_code
    return ExecuteResponse(output=output, exit_code=exit_code, truncated=truncated)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid``; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def bash_script(command: str) -> Iterator[tuple[str, tuple[int, ...]]]:
    """What to pass to ``bash -c`` for ``command``, and the descriptors the
    child must inherit.

    A command too long to be one argument is written to an anonymous
    in-memory file that bash sources; ``.`` reads the whole file before
    running any of it, so its first statement closes the descriptor and
    nothing the command starts inherits it. A command with a NUL or a lone
    surrogate is an :class:`~sandbox_sdk.errors.InvalidArgumentError`, as
    ``run`` raises before any round trip."""
    check_command(command)
    if command_bytes(command) <= ARGV_COMMAND_BYTES:
        yield command, ()
        return
    fd = os.memfd_create("sandbox-command") if hasattr(os, "memfd_create") else _unlinked_temp_file()
    try:
        _write_all(fd, f"exec {fd}<&-; ".encode("ascii"))
        for start in range(0, len(command), WRITE_CHARS):  # encoded piecewise: no full copy
            _write_all(fd, command[start : start + WRITE_CHARS].encode("utf-8"))
        os.lseek(fd, 0, os.SEEK_SET)
        yield f". /dev/fd/{fd}", (fd,)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unlinked_temp_file() -> int:
    """Where there is no ``memfd_create``: a temp file, unlinked at once and
    readable by the (possibly less privileged) user the command runs as."""
    fd, path = tempfile.mkstemp(prefix="sandbox-command-")
    os.unlink(path)
    os.fchmod(fd, 0o644)
    return fd


def start_time(pid: int) -> str:
    """Process ``pid``'s start time in clock ticks since boot (field 22 of its
    stat), which tells it from a later process given the same pid; ``""`` if
    there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""
