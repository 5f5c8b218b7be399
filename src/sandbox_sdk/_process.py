"""Processes over ``execute()``: the pieces ``run``, ``start`` and ``stream``
share, and the operations of :class:`~sandbox_sdk.process.Process`, declared
once (``scripts/generate_twins.py`` writes ``Process`` and its async twins
from :class:`ProcessOperations`).

A detached command (``start``, and ``run`` with callbacks) is followed by
*long polls* (``remote/proc.py``'s ``follow``): a poll waits in the sandbox
up to ``limits.process_poll_wait`` seconds for new output or the exit, and returns
as soon as either comes, after lingering a little to gather more. The linger
starts short (a first byte is seen within about one round trip) and doubles
while output keeps coming, up to ``process_linger_max``, so a chatty command
costs a few round trips a second and a quiet one ``1 / process_poll_wait``.
See docs/processes.md.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from signal import SIGKILL, SIGTERM
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sandbox_sdk import _kernel as kernel
from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import FEED, FOLLOW, FORGET, PROCESSES, RESIZE, SIGNAL
from sandbox_sdk._core import (
    CLEANUP_TIMEOUT,
    Operation,
    PathArg,
    SandboxCore,
    check_int,
    check_timeout,
    to_bytes,
)
from sandbox_sdk.models import (
    TIMEOUT_EXIT_CODE,
    ProcessInfo,
    ProcessOutput,
    PtySize,
    RunResult,
    StreamEvent,
    StreamName,
)

if TYPE_CHECKING:
    from sandbox_sdk.remote.proc import FollowReply, ProcessEntry
    from sandbox_sdk.remote.run import Order

T = TypeVar("T")

#: What a detached command's output is handed to, piece by piece: the stream
#: (``"stdout"`` or ``"stderr"``) and the bytes, as they arrive.
OutputSink = Callable[[StreamName, bytes], None]
#: What a followed process's output is handed to: as an ``OutputSink``,
#: with the position in the merged output after the piece.
PlacedSink = Callable[[StreamName, bytes, int], None]
STREAMS: tuple[StreamName, StreamName] = ("stdout", "stderr")
#: Seconds ``kill(SIGTERM)`` gives a group before SIGKILL.
KILL_GRACE = 3.0
#: Seconds a kill waits for the supervisor to record the exit.
KILL_SETTLE = 5.0


@dataclass(frozen=True)
class Command:
    """A user's command and how to run it, checked; what the native streaming
    hook (:meth:`~sandbox_sdk.BaseSandbox._stream_command`) receives."""

    command: str
    cwd: PathArg | None = None
    env: Mapping[str, str] | None = None
    stdin: bytes | None = None
    timeout: float | None = None
    #: Set when the command was given as an argument vector, run without a
    #: shell; ``command`` is then its shell-quoted form, for display.
    argv: tuple[str, ...] | None = None


class Decoders:
    """UTF-8 text of each stream, decoded piece by piece (a character split
    between two pieces is decoded whole; invalid bytes become U+FFFD)."""

    def __init__(self) -> None:
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in STREAMS}

    def text(self, stream: StreamName, data: bytes, *, final: bool = False) -> str:
        return self._decoders[stream].decode(data, final)


class Collected:
    """The output kept for a :class:`~sandbox_sdk.models.RunResult`: pieces in
    arrival order, at most ``limit`` bytes in all (then ``truncated``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pieces: list[tuple[StreamName, bytes]] = []
        self.size = 0
        self.truncated = False

    def add(self, stream: StreamName, data: bytes) -> None:
        """Keep a piece of ``stream``'s output, as much of it as the limit leaves room for."""
        room = self.limit - self.size
        if len(data) > room:
            self.truncated = True
            data = data[:room]
        if data:
            self.pieces.append((stream, data))
            self.size += len(data)

    def result(self, exit_code: int | None, timed_out: bool, *, truncated: bool = False) -> RunResult:
        """The :class:`RunResult` of what was kept, decoded as UTF-8 text
        (invalid bytes as U+FFFD); ``truncated`` adds to what the limit cut."""
        decoders = Decoders()
        texts: dict[StreamName, list[str]] = {"stdout": [], "stderr": []}
        merged: list[str] = []
        for stream, data in [*self.pieces, ("stdout", b""), ("stderr", b"")]:
            text = decoders.text(stream, data, final=not data)
            texts[stream].append(text)
            merged.append(text)
        return RunResult(
            output="".join(merged),
            stdout="".join(texts["stdout"]),
            stderr="".join(texts["stderr"]),
            exit_code=TIMEOUT_EXIT_CODE if timed_out else exit_code,
            timed_out=timed_out,
            truncated=truncated or self.truncated,
        )


def pieces(order: Order, blobs: list[protocol.Blob]) -> list[tuple[StreamName, bytes]]:
    """A reply's ``[stream, length]`` runs over its two blobs, as pieces in arrival order."""
    at = [0, 0]
    found: list[tuple[StreamName, bytes]] = []
    for stream, length in order:
        blob = blobs[stream]
        if isinstance(blob, bytes) and length == len(blob):  # the common case: no copy
            found.append((STREAMS[stream], blob))
        else:
            found.append((STREAMS[stream], bytes(blob[at[stream] : at[stream] + length])))
        at[stream] += length
    return found


#: Linux's largest ``pid_max`` (``PID_MAX_LIMIT``): every pid is below it.
PID_LIMIT = 4_194_304


def check_pid(pid: object) -> int:
    """``pid`` if it can be a process's id (an ``int``, not a ``bool``, from 1
    to ``PID_LIMIT - 1``); any other value is an ``InvalidArgumentError``."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < PID_LIMIT:
        raise errors.InvalidArgumentError(f"pid must be an int from 1 to {PID_LIMIT - 1}, not {pid!r}")
    return pid


def spawn_args(sandbox: SandboxCore) -> dict[str, Any]:
    """Where the sandbox keeps its process records: its own directory in the
    scratch directory, named by a digest of its id."""
    owner = hashlib.sha256(sandbox.id.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return {"scratch": protocol.encode_path(sandbox.scratch_dir), "owner": owner}


@dataclass(frozen=True)
class Record:
    """Which record of the sandbox's is a process's: its ``pid`` and the
    ``handle`` (128 random bits, in hex) its ``start`` got back, which names
    the record; ``remote/proc.py`` serves a record only for that pid."""

    pid: int
    handle: str

    def args(self, sandbox: SandboxCore) -> dict[str, Any]:
        return {**spawn_args(sandbox), "pid": self.pid, "handle": self.handle}


class Follower:
    """Long polls of one detached process, with the adaptive linger (see the module docstring)."""

    def __init__(self, sandbox: SandboxCore, record: Record) -> None:
        self.sandbox = sandbox
        self.record = record
        self.pid = record.pid
        self.limits = sandbox.limits
        self.linger = self.limits.process_linger_min

    def poll(self, since: int, wait: float) -> Operation[tuple[FollowReply, list[protocol.Blob]]]:
        args = {
            **self.record.args(self.sandbox),
            "since": since,
            "wait": wait,
            "linger": self.linger,
            "budget": self.limits.result_budget,
        }
        what = f"follow process {self.pid}"
        reply = yield from FOLLOW(args, what=what, timeout=wait + CLEANUP_TIMEOUT, interruptible=True)
        value = reply[0]
        if value["order"] and value["exit_code"] is None:  # busy: gather more per round trip
            self.linger = min(self.linger * 2, self.limits.process_linger_max)
        else:
            self.linger = self.limits.process_linger_min
        return reply

    def to_end(
        self, sink: PlacedSink | None, deadline: float | None = None, *, keep: int, since: int = 0
    ) -> Operation[RunResult]:
        """Follow the process from position ``since`` of its merged output to
        its exit, handing each piece to ``sink``; the result keeps ``keep``
        bytes of output at most. Past ``deadline`` (a ``time.monotonic()``)
        it raises ``SandboxTimeoutError``."""
        collected = Collected(keep)
        while True:
            wait = self.limits.process_poll_wait
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            value, blobs = yield from self.poll(since, wait)
            at = since
            for stream, data in pieces(value["order"], blobs):
                collected.add(stream, data)
                at += len(data)
                if sink is not None:
                    sink(stream, data, at)
            since = value["next"]
            if value["exit_code"] is not None:
                return collected.result(value["exit_code"], value["timed_out"])
            if deadline is not None and time.monotonic() >= deadline and not value["more"]:
                raise errors.SandboxTimeoutError(f"process {self.pid} is still running")


def text_sink(
    on_stdout: Callable[[str], object] | None, on_stderr: Callable[[str], object] | None
) -> OutputSink:
    """The sink that hands each stream's text to its callback."""
    decoders = Decoders()
    callbacks = {"stdout": on_stdout, "stderr": on_stderr}

    def sink(stream: StreamName, data: bytes) -> None:
        callback = callbacks[stream]
        text = decoders.text(stream, data)
        if callback is not None and text:
            callback(text)

    return sink


def event_sink(events: deque[StreamEvent]) -> PlacedSink:
    """The sink that puts each piece of text in ``events``, with its position."""
    decoders = Decoders()

    def sink(stream: StreamName, data: bytes, at: int) -> None:
        text = decoders.text(stream, data)
        if text:
            events.append(StreamEvent(kind=stream, text=text, next_offset=at))

    return sink


class Readable(Protocol):
    """What ``write_stdin`` reads a large input from: a binary file object,
    or anything whose ``read(size)`` gives up to ``size`` bytes (``b""`` at the end)."""

    def read(self, size: int, /) -> bytes: ...


#: What ``write_stdin`` takes: text (as UTF-8), bytes, or a binary file
#: object (any :class:`Readable`) read a chunk at a time.
StdinData = str | bytes | bytearray | memoryview | Readable


def stdin_chunks(data: StdinData, size: int) -> Iterator[bytes]:
    """``data`` in chunks of at most ``size`` bytes; a file object is read
    one chunk at a time, so the client never holds more than one."""
    if isinstance(data, str | bytes | bytearray | memoryview):
        view = memoryview(to_bytes("data", data))
        for start in range(0, len(view), size):
            yield bytes(view[start : start + size])
        return
    if not callable(getattr(data, "read", None)):
        raise errors.InvalidArgumentError(
            f"data must be str, bytes or a binary file object, not {type(data).__name__}"
        )
    while chunk := data.read(size):
        if not isinstance(chunk, bytes | bytearray):
            raise errors.InvalidArgumentError(f"data's read() gave {type(chunk).__name__}, not bytes")
        yield bytes(chunk)


def feed_stdin(sandbox: SandboxCore, record: Record, data: StdinData, *, close: bool) -> Operation[None]:
    """``data`` appended to the process's stdin (``remote/proc.py``'s
    ``feed``), a chunk of what one command carries per round trip; a chunk
    the sandbox had no room for yet (the process is not reading) is sent
    again, each try a long poll. Then its stdin closed, with ``close``."""
    wait = sandbox.limits.process_poll_wait
    args = {**record.args(sandbox), "wait": wait, "close": False}
    what = f"write to the stdin of process {record.pid}"
    size = sandbox.limits.blob_capacity(FEED.op, {**args, "close": True}, sandbox.scratch_dir)
    for chunk in stdin_chunks(data, size):
        while True:
            value, _ = yield from FEED(args, [chunk], what=what, timeout=wait + CLEANUP_TIMEOUT)
            if value["written"] == len(chunk):
                break
    if close:
        what = f"close the stdin of process {record.pid}"
        yield from FEED({**args, "close": True}, [b""], what=what, timeout=wait + CLEANUP_TIMEOUT)


def signal_group(sandbox: SandboxCore, record: Record, number: int) -> Operation[int | None]:
    """Send ``number`` to the process's group; SIGTERM escalates to SIGKILL
    after ``KILL_GRACE``, and a kill waits for the recorded exit. The exit
    status, if recorded."""
    kills = number in (SIGTERM, SIGKILL)
    args = {
        **record.args(sandbox),
        "signal": check_int("signal", number, 1),
        "grace": KILL_GRACE if number == SIGTERM else 0,
        "settle": KILL_SETTLE if kills else 0,
    }
    timeout = KILL_GRACE + KILL_SETTLE + CLEANUP_TIMEOUT
    value, _ = yield from SIGNAL(args, what=f"signal process {record.pid}", timeout=timeout)
    return value["exit_code"]


def end_quietly(sandbox: SandboxCore, record: Record) -> Operation[None]:
    """Kill a process that its caller gave up on, and remove its record."""
    try:
        yield from signal_group(sandbox, record, SIGKILL)
        yield from forget(sandbox, record)
    except errors.SandboxError:
        pass  # the interruption is what the caller hears about


def forget(sandbox: SandboxCore, record: Record) -> Operation[None]:
    what = f"remove the record of process {record.pid}"
    yield from FORGET(record.args(sandbox), what=what, timeout=CLEANUP_TIMEOUT)


def process_info(entry: ProcessEntry) -> ProcessInfo:
    return ProcessInfo(
        pid=entry["pid"],
        command=protocol.decode_path(entry["command"]),
        started_at=datetime.fromtimestamp(entry["started"], UTC),
        running=entry["running"],
        exit_code=entry["exit_code"],
        timed_out=entry["timed_out"],
    )


def list_processes(sandbox: SandboxCore) -> Operation[list[ProcessInfo]]:
    value, _ = yield from PROCESSES(spawn_args(sandbox), what="list processes", timeout=CLEANUP_TIMEOUT)
    return [process_info(entry) for entry in value["processes"]]


def find_process(sandbox: SandboxCore, pid: object) -> Operation[ProcessEntry]:
    """The newest record of process ``pid`` that vouches for it (see
    ``remote/proc.py``'s ``vouched``); ``ProcessNotFoundError`` if none does."""
    args = {**spawn_args(sandbox), "pid": check_pid(pid)}
    value, _ = yield from PROCESSES(args, what=f"find process {pid}", timeout=CLEANUP_TIMEOUT)
    return value["processes"][-1]


class ProcessOperations:
    """A background command in a sandbox (see ``BaseSandbox.start``): the
    operations of :class:`~sandbox_sdk.process.Process`, one declaration each."""

    def __init__(self, sandbox: SandboxCore, pid: int, command: str, handle: str) -> None:
        self.sandbox = sandbox
        self.pid = pid
        self.command = command
        #: The name of the process's record in the sandbox (128 random bits, in
        #: hex): what this object reads and signals through, so a record
        #: planted beside it, or a later process given the same pid, is never
        #: taken for it.
        self.handle = handle
        self._record = Record(pid, handle)

    def __repr__(self) -> str:
        return f"Process(pid={self.pid}, command={self.command!r}, sandbox={self.sandbox.id!r})"

    def _drive(self, operation: Operation[T]) -> T:
        return self.sandbox._drive(operation)

    async def _adrive(self, operation: Operation[T]) -> T:
        return await self.sandbox._adrive(operation)

    def _op_poll(self) -> Operation[int | None]:
        """The exit status once the process has ended, else ``None``."""
        args = self._record.args(self.sandbox)
        value, _ = yield from PROCESSES(args, what=f"poll process {self.pid}", timeout=CLEANUP_TIMEOUT)
        return value["processes"][0]["exit_code"]

    def _op_read(self, since: int = 0) -> Operation[ProcessOutput]:
        """Output written after position ``since`` of the merged stream (what
        the sandbox has now, up to one output's budget); ``next_offset`` is
        where to read on."""
        follower = Follower(self.sandbox, self._record)
        value, blobs = yield from follower.poll(check_int("since", since, 0), 0.0)
        return ProcessOutput(
            stdout=bytes(blobs[0]),
            stderr=bytes(blobs[1]),
            next_offset=value["next"],
            has_more=value["more"],
            exit_code=value["exit_code"],
            timed_out=value["timed_out"],
        )

    def _op_wait(self, timeout: float | None = None) -> Operation[RunResult]:
        """Wait for the process to end; its whole output (up to
        ``max_output_bytes``) and exit status. Raises
        :class:`~sandbox_sdk.errors.SandboxTimeoutError` if it is still
        running after ``timeout`` seconds (it keeps running)."""
        seconds = check_timeout(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        follower = Follower(self.sandbox, self._record)
        return (yield from follower.to_end(None, deadline, keep=self.sandbox.limits.max_output_bytes))

    def _op_write_stdin(self, data: StdinData) -> Operation[None]:
        """Write ``data`` (text as UTF-8, bytes, or a binary file object read
        a chunk at a time) to the stdin of a process started with
        ``stdin=PIPE`` or a ``pty``: in order, in as many round trips as its
        size needs; if the process has 16 MiB unread, this waits for it to
        read, as a write to a full pipe does. Raises
        :class:`~sandbox_sdk.errors.StdinClosedError` if the process has no
        such stdin, its stdin was closed, or it has ended."""
        yield from feed_stdin(self.sandbox, self._record, data, close=False)

    def _op_close_stdin(self) -> Operation[None]:
        """Close the process's stdin once all that was written is read: the
        process reads an end of file (on a terminal, it gets Ctrl-D).
        :class:`~sandbox_sdk.errors.StdinClosedError` if it was closed already."""
        yield from feed_stdin(self.sandbox, self._record, b"", close=True)

    def _op_resize(self, rows: int, cols: int) -> Operation[None]:
        """Set the window size of a process's terminal (``start(pty=...)``);
        its foreground program gets SIGWINCH. ``InvalidArgumentError`` for a
        process without a terminal."""
        size = PtySize(rows=rows, cols=cols)
        args = {
            **self._record.args(self.sandbox),
            "rows": size.rows,
            "cols": size.cols,
            "wait": CLEANUP_TIMEOUT,
        }
        yield from RESIZE(
            args, what=f"resize the terminal of process {self.pid}", timeout=2 * CLEANUP_TIMEOUT
        )

    def _op_follow(
        self,
        since: int = 0,
        *,
        on_stdout: Callable[[str], object] | None = None,
        on_stderr: Callable[[str], object] | None = None,
    ) -> Operation[RunResult]:
        """Follow the process live from position ``since`` of its merged
        output (0: its start) to its exit, calling ``on_stdout`` /
        ``on_stderr`` with text as it arrives, with the long polls of ``run``
        with callbacks; the output followed (up to ``max_output_bytes``) and
        the exit status. Interrupted, it stops following: the process, which
        it did not start, keeps running."""
        sink = text_sink(on_stdout, on_stderr)
        follower = Follower(self.sandbox, self._record)
        keep = self.sandbox.limits.max_output_bytes
        since = check_int("since", since, 0)
        return (
            yield from follower.to_end(lambda stream, data, _: sink(stream, data), keep=keep, since=since)
        )

    def _events(self, since: object, events: deque[StreamEvent]) -> Operation[None]:
        """``stream``'s operation: the events go to ``events`` as they come."""
        follower = Follower(self.sandbox, self._record)
        start = check_int("since", since, 0)
        result = yield from follower.to_end(event_sink(events), keep=0, since=start)
        events.append(StreamEvent(kind="exit", exit_code=result.exit_code, timed_out=result.timed_out))

    def stream(self, since: int = 0) -> Generator[StreamEvent, None, None]:
        """The process's output from position ``since`` as ``stdout`` /
        ``stderr`` events (each with its ``next_offset``) while it runs, then
        one ``exit`` event. Leaving the loop early stops following; the
        process keeps running."""
        events: deque[StreamEvent] = deque()
        return kernel.iterate(self._events(since, events), self.sandbox._perform, events)

    async def astream(self, since: int = 0) -> AsyncGenerator[StreamEvent, None]:
        """Async twin of :meth:`stream` (``async for event in process.astream()``)."""
        events: deque[StreamEvent] = deque()
        iterator = kernel.aiterate(self._events(since, events), self.sandbox._aperform, events)
        async with contextlib.aclosing(iterator):
            async for event in iterator:
                yield event

    def _op_kill(self, signal: int = SIGTERM) -> Operation[None]:
        """Send ``signal`` to the process's whole group. With SIGTERM (the
        default) a group still alive after a grace period gets SIGKILL, and
        with either of them this returns once the exit is recorded."""
        yield from signal_group(self.sandbox, self._record, signal)
