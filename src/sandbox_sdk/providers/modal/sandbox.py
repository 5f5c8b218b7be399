"""``ModalSandbox``: a :class:`~sandbox_sdk.BaseSandbox` on one ``modal.Sandbox``."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import posixpath
import shlex
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import modal

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import (
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    RunResult,
    StreamName,
)
from sandbox_sdk.provider_kit import (
    OWN_GROUP_PREFIX,
    TIMEOUT_EXIT_CODE,
    Collected,
    Command,
    NativeRequest,
    Operation,
    OutputSink,
    Pipeline,
    Progress,
    UploadSource,
    can_clean_up,
    check_path,
    command_seconds,
    new_token,
    open_upload_source,
    transfer_error,
)
from sandbox_sdk.providers.modal._errors import translate_errors

#: Default timeout of one ``execute`` in seconds.
DEFAULT_TIMEOUT = 120.0
#: Default output cap of one ``execute``.
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
#: Modal refuses an exec whose arguments total more than 64 KiB (``ARG_MAX_BYTES`` in the SDK,
#: counted in characters, which never exceed bytes). ``bash``, ``-c`` and :data:`PRELUDE` count too.
MODAL_ARG_MAX = 64 * 1024
#: How Modal reports an exec its worker killed at ``timeout_secs`` (128 + SIGKILL).
SIGKILL_EXIT_CODE = 128 + 9
#: After a command exits, its output is still read until idle this long (background
#: processes may keep the stream open).
DRAIN_SECONDS = 0.5
#: Put before every command: stderr joins stdout (one stream, in order) and stdin is empty,
#: because Modal keeps an exec's stdin open until the client closes it.
PRELUDE = "exec </dev/null 2>&1\n"
#: Moves uploaded files into place, a line per file, printing ``<index> <status>``. Like the
#: scripted upload it writes through a symlink and keeps a replaced file's permission bits.
_COMMIT_FUNCTION = (
    'c() { t=$3; if [ -L "$t" ]; then t=$(readlink -f -- "$3") || t=$3; fi; '
    'if [ -d "$t" ]; then rm -f -- "$2"; echo "$1 dir"; return; fi; '
    '[ -e "$t" ] && chmod --reference="$t" -- "$2" 2>/dev/null; '
    'if mv -f -- "$2" "$t" 2>/dev/null; then echo "$1 ok"; else rm -f -- "$2"; echo "$1 fail"; fi; }\n'
)


class _Output:
    """An exec's output, kept up to the cap; the rest is dropped as it arrives."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.truncated = False
        self.closed = anyio.Event()
        self.last_arrival = time.monotonic()
        self.failures: list[Exception] = []

    async def read(self, stream: AsyncIterable[bytes]) -> None:
        try:
            async for data in stream:
                self.last_arrival = time.monotonic()
                room = self.cap - len(self.kept)
                self.kept += data[:room]
                if len(data) > room:
                    self.truncated = True
                    return
        except Exception as exc:  # noqa: BLE001 - raised by aexecute, outside the task group
            self.failures.append(exc)
        finally:
            self.closed.set()

    async def drained(self, idle: float) -> None:
        """Wait until the stream closes or no output arrived for ``idle`` seconds, counted
        from this call (the exit) at the earliest: output still on its way when the exit is
        reported, all of it after a slow start reply, is not cut off."""
        self.last_arrival = max(self.last_arrival, time.monotonic())
        while not self.closed.is_set():
            remaining = self.last_arrival + idle - time.monotonic()
            if remaining <= 0:
                return
            with anyio.move_on_after(remaining):
                await self.closed.wait()

    def response(self, returncode: int, *, timed_out: bool) -> ExecuteResponse:
        output = bytes(self.kept).decode("utf-8", "replace")
        if timed_out:
            return ExecuteResponse(
                output=output, exit_code=TIMEOUT_EXIT_CODE, truncated=self.truncated, timed_out=True
            )
        return ExecuteResponse(output=output, exit_code=returncode, truncated=self.truncated)


def killed_at_timeout(returncode: int, elapsed: float, timeout_secs: int) -> bool:
    """Whether an exec's status means Modal stopped it at its ``timeout_secs``.

    Two reports race: the SDK's own deadline (``wait()`` returns -1) and the worker, which
    kills the exec at ``timeout_secs`` and reports the signal (``wait()`` returns 128 + 9).
    The deadline starts only after the start reply, so the worker's report often comes
    first, and then only the clock tells our kill from a command that died of SIGKILL: the
    worker's timer starts after our request is sent, so ``elapsed`` (timed from before the
    request) is past ``timeout_secs`` whenever the worker killed it."""
    return returncode == -1 or (returncode == SIGKILL_EXIT_CODE and elapsed >= timeout_secs)


@dataclass(frozen=True)
class FilesystemCall(NativeRequest):
    """``sandbox.filesystem.<method>(*args)``, blocking or through its ``.aio``; the
    SDK's errors arrive typed, as errors of doing ``what`` to ``path``."""

    method: str
    args: tuple[Any, ...]
    what: str
    path: str


@dataclass(frozen=True)
class ShellCommand(NativeRequest):
    """A command run with ``execute`` / ``aexecute``; the reply is its ``ExecuteResponse``."""

    command: str
    timeout: float


#: Put before a streamed command: it becomes a process group of its own and
#: writes its shell's pid (the group's id) as the first line of stderr, which
#: the client takes off: Modal has no call that kills an exec (its
#: ``ContainerProcess`` has ``poll``, ``wait`` and the streams only,
#: modal/container_process.py; the task command router no exec signal RPC,
#: modal_proto/task_command_router_grpc.py), so an interrupted command's group
#: is killed by one more exec. Its stdin is empty, as :data:`PRELUDE` says why.
STREAM_PRELUDE = "exec </dev/null\n" + OWN_GROUP_PREFIX + 'echo "$$" >&2\n'
#: Pieces of a streamed exec's output read ahead of the operation at most.
STREAM_AHEAD = 16


class _ExecFeed:
    """A streamed exec read piece by piece with the SDK's ``.aio`` API, in the
    loop of the caller (``arun``) or of a portal thread of its own (``run``):
    its stdout and stderr are read into a bounded queue that ``None`` ends
    once the exec has exited and its streams closed (or stayed idle for
    :data:`DRAIN_SECONDS` after the exit: a background child may hold them)."""

    def __init__(self, sandbox: modal.Sandbox, script: str, seconds: int, command: Command) -> None:
        self.sandbox = sandbox
        self.script = script
        self.seconds = seconds
        self.options: dict[str, Any] = {"timeout": seconds, "text": False}
        if command.cwd is not None:
            self.options["workdir"] = os.fsdecode(command.cwd)
        if command.env:
            self.options["env"] = dict(command.env)
        self.opened: AbstractContextManager[anyio.from_thread.BlockingPortal] | None = None
        self.portal: anyio.from_thread.BlockingPortal | None = None
        self.pid: int | None = None
        self.queue: asyncio.Queue[tuple[StreamName, bytes] | None] = asyncio.Queue(STREAM_AHEAD)
        self.tasks: list[asyncio.Task[None]] = []
        self.returncode = -1
        self.failure: BaseException | None = None
        self.started = 0.0
        self.elapsed = 0.0
        #: When a reader last handed a piece on, and how many are handing one on now.
        self.active = 0.0
        self.handing = 0

    async def start(self) -> int:
        """Start the exec; the pid of its group, read from stderr's first line."""
        self.started = time.monotonic()
        process = await self.sandbox.exec.aio("bash", "-c", self.script, **self.options)
        stderr = aiter(process.stderr)
        head = b""
        while b"\n" not in head:
            head += await anext(stderr, b"\n")
        line, rest = head.split(b"\n", 1)
        if not line.isdigit():
            raise errors.SandboxRuntimeError(f"the command's shell did not report its pid: {line!r}")
        if rest:
            await self.queue.put(("stderr", rest))
        readers = [self._read("stdout", aiter(process.stdout)), self._read("stderr", stderr)]
        self.tasks = [asyncio.ensure_future(reader) for reader in readers]
        self.tasks.append(asyncio.ensure_future(self._end(process, list(self.tasks))))
        return int(line)

    async def _read(self, name: StreamName, stream: AsyncIterator[bytes]) -> None:
        async for data in stream:
            self.handing += 1
            try:
                await self.queue.put((name, data))
            finally:
                self.handing -= 1
                self.active = time.monotonic()

    async def _drained(self, readers: list[asyncio.Task[None]]) -> None:
        """Wait until the streams close, or for :data:`DRAIN_SECONDS` with no
        output (a reader waiting for the operation to take a piece is not idle)."""
        while not all(reader.done() for reader in readers):
            idle_left = self.active + DRAIN_SECONDS - time.monotonic()
            if self.handing == 0 and idle_left <= 0:
                return
            await asyncio.wait(readers, timeout=max(idle_left, 0.05) if self.handing == 0 else DRAIN_SECONDS)

    async def _end(self, process: Any, readers: list[asyncio.Task[None]]) -> None:
        """Wait for the exit and the output after it; then ``None`` (unless cancelled)."""
        try:
            self.returncode = await process.wait.aio()
            self.active = time.monotonic()
            self.elapsed = self.active - self.started
            await self._drained(readers)
            failed = [r.exception() for r in readers if r.done() and not r.cancelled() and r.exception()]
            self.failure = failed[0] if failed else None
        except Exception as exc:  # noqa: BLE001 - raised by next, in the operation's own call
            self.failure = exc
        finally:
            for reader in readers:
                reader.cancel()
        await self.queue.put(None)

    async def next(self) -> tuple[StreamName, bytes] | None:
        """The next piece, or ``None`` once the exec has ended (``returncode`` then set)."""
        piece = await self.queue.get()
        if piece is None and self.failure is not None:
            raise self.failure
        return piece

    def timed_out(self) -> bool:
        """Whether Modal stopped the exec at its timeout (timed to its exit, not to its output's end)."""
        return killed_at_timeout(self.returncode, self.elapsed, self.seconds)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@dataclass(frozen=True)
class ExecStreamCall(NativeRequest):
    """``feed.<method>()``: awaited by ``aexecute``'s side, or on the feed's own
    portal thread by the blocking side (opened by the start, closed at the end)."""

    feed: _ExecFeed
    method: str


def _follow_exec(feed: _ExecFeed, collected: Collected, sink: OutputSink) -> Generator[Any, Any, RunResult]:
    """Hand each piece of a started exec's output to ``sink`` and keep it in
    ``collected``, up to the exec's end."""
    while (piece := (yield ExecStreamCall(feed, "next"))) is not None:
        stream, data = piece
        collected.add(stream, data)
        sink(stream, data)
    timed_out = feed.timed_out()
    return collected.result(None if timed_out else feed.returncode, timed_out)


class ModalSandbox(BaseSandbox):
    """Runs each command as ``bash -c`` through ``modal.Sandbox.exec``.

    ``aexecute`` uses the SDK's native ``.aio`` API (``execute`` runs it on a
    private event loop thread). A command past its timeout is killed by Modal
    (``exec(timeout=)``, whole seconds, rounded up) and reported with
    ``timed_out=True`` and exit code 124, as the other providers do, however
    Modal reported it (see :func:`killed_at_timeout`).
    ``upload_files`` / ``download_files`` (and their async twins) go through
    ``sandbox.filesystem`` (blocking / ``.aio``); relative paths are taken from
    :meth:`working_directory`.
    """

    limits = Limits(max_command_bytes=MODAL_ARG_MAX - len("bash") - len("-c") - len(STREAM_PRELUDE) - 512)

    def __init__(
        self,
        sandbox: modal.Sandbox,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        workdir: str | None = None,
    ) -> None:
        if workdir is not None and not workdir.startswith("/"):
            raise errors.InvalidArgumentError(f"workdir must be absolute, not {workdir!r}")
        self.sandbox = sandbox
        self.timeout = timeout
        self.limits = replace(self.limits, max_output_bytes=max_output_bytes)
        self._workdir = workdir
        self._working_directory = workdir
        self._portals = anyio.from_thread.BlockingPortalProvider()

    @property
    def id(self) -> str:
        return str(self.sandbox.object_id)

    def __repr__(self) -> str:
        return f"ModalSandbox(id={self.id!r})"

    # -- execute -----------------------------------------------------------------------

    def _exec_timeout(self, timeout: float | None) -> int:
        return max(1, math.ceil(command_seconds(timeout, self.timeout)))

    def _check_command(self, command: str, prelude: str = PRELUDE) -> str:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        if len(command.encode("utf-8")) > self.limits.max_command_bytes:
            raise errors.InvalidArgumentError(
                f"command of {len(command.encode('utf-8'))} bytes exceeds max_command_bytes="
                f"{self.limits.max_command_bytes} (Modal caps exec arguments at 64 KiB)"
            )
        return prelude + command

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        """:meth:`aexecute` on a private event loop thread: reading output while waiting
        for the exit status needs concurrency, and this keeps one implementation."""
        with self._portals as portal:
            return portal.call(partial(self.aexecute, command, timeout=timeout))

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        """Reads output while waiting for the command to exit; after it exits, output is
        read until the stream closes or stays idle for :data:`DRAIN_SECONDS` (a background
        process may hold the stream open long after, as ``local`` allows too)."""
        script = self._check_command(command)
        seconds = self._exec_timeout(timeout)
        output = _Output(self.limits.max_output_bytes)
        started = time.monotonic()
        with translate_errors(f"execute in {self.id}"):
            process = await self.sandbox.exec.aio(
                "bash", "-c", script, timeout=seconds, workdir=self._workdir, text=False
            )
            returncode, elapsed = -1, 0.0
            async with anyio.create_task_group() as group:
                group.start_soon(output.read, process.stdout)
                try:
                    returncode = await process.wait.aio()
                    elapsed = time.monotonic() - started
                    await output.drained(DRAIN_SECONDS)
                except Exception as exc:  # noqa: BLE001 - raised below, outside the task group
                    output.failures.append(exc)
                group.cancel_scope.cancel()
            if output.failures:  # as itself (not an exception group), to be translated
                raise output.failures[0]
        return output.response(returncode, timed_out=killed_at_timeout(returncode, elapsed, seconds))

    # -- native transfers ------------------------------------------------------------------

    def _op_working_directory(self) -> Generator[ShellCommand, Any, str]:
        if self._working_directory is None:
            response = yield ShellCommand("pwd", self.limits.operation_timeout)
            if response.exit_code != 0 or not response.output.startswith("/"):
                raise errors.SandboxRuntimeError(f"cannot find the working directory: {response.output!r}")
            self._working_directory = response.output.strip()
        return self._working_directory

    def working_directory(self) -> str:
        """The directory relative transfer paths are taken from (asked once with ``pwd``):
        Modal's file API only takes absolute paths."""
        return self._drive(self._op_working_directory())

    async def aworking_directory(self) -> str:
        """Async :meth:`working_directory`."""
        return await self._adrive(self._op_working_directory())

    def _absolute(self, path: str, workdir: str) -> str:
        """``path`` made absolute, after the checks every transfer path gets. Modal's
        file API carries paths as UTF-8 text (protobuf strings), so a name that is
        not (a non-UTF-8 byte, decoded by ``os.fsdecode``) is that file's
        ``invalid_path``, not an encoding error that loses the whole batch."""
        check_path(path)
        absolute = posixpath.normpath(posixpath.join(workdir, path))
        try:
            absolute.encode("utf-8")
        except UnicodeEncodeError:
            raise errors.InvalidPathError(
                f"{path!r}: Modal's file API carries paths as UTF-8 text, and this one is not", path=path
            ) from None
        return absolute

    # -- native streaming -----------------------------------------------------------------

    def _stream_command(
        self, command: Command, sink: OutputSink, *, keep_output: bool = True
    ) -> Operation[RunResult]:
        """Natively: one exec whose stdout and stderr the SDK streams, each
        piece handed to ``sink`` as it comes: no polling. Past the timeout
        Modal kills it (``exec(timeout=)``); interrupted, its process group is
        killed by one more exec (see :data:`STREAM_PRELUDE`). A command with
        ``stdin`` takes the derived path."""
        if command.stdin is not None:
            return (yield from super()._stream_command(command, sink, keep_output=keep_output))
        seconds = self._exec_timeout(command.timeout)
        script = self._check_command(command.command, STREAM_PRELUDE)
        feed = _ExecFeed(self.sandbox, script, seconds, command)
        try:
            feed.pid = yield ExecStreamCall(feed, "start")
            result = yield from _follow_exec(
                feed, Collected(self.limits.max_output_bytes if keep_output else 0), sink
            )
        except BaseException as exc:
            if can_clean_up(exc):
                if feed.pid is not None:
                    with contextlib.suppress(errors.SandboxError):
                        kill = f"kill -KILL -- -{feed.pid} 2>/dev/null; exit 0"
                        yield ShellCommand(kill, self.limits.operation_timeout)
                yield ExecStreamCall(feed, "close")
            raise
        yield ExecStreamCall(feed, "close")
        return result

    def _stream_call(self, request: ExecStreamCall) -> Any:
        """``request`` on its feed's portal thread, opened by the start and
        closed by the close (the exec's readers live in that thread's loop)."""
        feed = request.feed
        if feed.portal is None:
            if request.method == "close":
                return None
            feed.opened = anyio.from_thread.start_blocking_portal()
            feed.portal = feed.opened.__enter__()
        try:
            with translate_errors(f"run in {self.id}"):
                return feed.portal.call(getattr(feed, request.method))
        finally:
            if request.method == "close" and feed.opened is not None:
                feed.opened.__exit__(None, None, None)
                feed.portal = feed.opened = None

    def _perform(self, request: Any) -> Any:
        if isinstance(request, ExecStreamCall):
            return self._stream_call(request)
        if isinstance(request, FilesystemCall):
            with translate_errors(request.what, path=request.path):
                return getattr(self.sandbox.filesystem, request.method)(*request.args)
        if isinstance(request, ShellCommand):
            return self.execute(request.command, timeout=request.timeout)
        return super()._perform(request)

    async def _aperform(self, request: Any) -> Any:
        if isinstance(request, ExecStreamCall):
            with translate_errors(f"run in {self.id}"):
                return await getattr(request.feed, request.method)()
        if isinstance(request, FilesystemCall):
            with translate_errors(request.what, path=request.path):
                return await getattr(self.sandbox.filesystem, request.method).aio(*request.args)
        if isinstance(request, ShellCommand):
            return await self.aexecute(request.command, timeout=request.timeout)
        return await super()._aperform(request)

    def _upload_batch(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> Operation[list[FileUploadResponse]]:
        """Each file is written with ``filesystem.write_bytes`` (a local path is streamed with
        ``copy_from_local``) to a hidden name beside its destination (parents created), several
        at once; then all are renamed into place in one command, so a destination is replaced
        whole or not at all."""
        plan = _UploadPlan(list(files), progress)
        if not plan.files:
            return []
        workdir = yield from self._op_working_directory()
        stages = [self._op_upload_one(plan, index, workdir) for index in range(len(plan.files))]
        yield Pipeline(stages, _ignore, self.limits.transfer_concurrency)
        for command in plan.commit_commands(self.limits.max_command_bytes):
            plan.committed((yield ShellCommand(command, self.limits.operation_timeout)))
        return plan.responses()

    def _op_upload_one(
        self, plan: _UploadPlan, index: int, workdir: str
    ) -> Generator[FilesystemCall, Any, None]:
        """Write file ``index`` under its staging name; a failure is the file's own, kept in ``plan``."""
        path = plan.files[index][0]
        target = plan.prepare(index, path, lambda p: self._absolute(p, workdir))
        local = None if target is None else plan.source(index)
        if target is None or local is None:
            return
        with plan.failures(index):
            yield local.write(target.staging, path)
            plan.staged(index, local.size)

    def _download_batch(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> Operation[list[FileDownloadResponse]]:
        """Each file read whole with ``filesystem.read_bytes``, several at once; one response
        per path, in order."""
        downloads = _Downloads(list(paths), progress)
        if not downloads.paths:
            return []
        workdir = yield from self._op_working_directory()
        reads = [self._op_download_one(downloads, index, workdir) for index in range(len(downloads.paths))]
        yield Pipeline(reads, downloads.done, self.limits.transfer_concurrency)
        return downloads.responses()

    def _op_download_one(
        self, downloads: _Downloads, index: int, workdir: str
    ) -> Generator[FilesystemCall, Any, bytes | None]:
        """The content of file ``index``; ``None`` after a failure of its own, kept in ``downloads``."""
        path = downloads.paths[index]
        with downloads.failures(index):
            absolute = self._absolute(path, workdir)
            return bytes((yield FilesystemCall("read_bytes", (absolute,), f"download {path!r}", path)))
        return None


def _ignore(reply: object) -> None:
    """The replies a pipeline's consumer has no use for."""


@dataclass
class _LocalSource:
    size: int
    path: str | None = None
    data: bytes = b""

    def write(self, staging: str, path: str) -> FilesystemCall:
        """The call writing it to ``staging``: a local path streamed by the SDK, else the bytes."""
        if self.path is not None:
            return FilesystemCall("copy_from_local", (self.path, staging), f"upload {path!r}", path)
        return FilesystemCall("write_bytes", (self.data, staging), f"upload {path!r}", path)


@dataclass
class _Target:
    final: str
    staging: str


#: Errors meaning the sandbox itself is unusable: raised, not reported per file.
_FATAL = (
    errors.SandboxNotFoundError,
    errors.AuthenticationError,
    errors.ProviderUnavailableError,
    errors.RateLimitedError,
)


class _PerFileFailures:
    """Per-file error strings of one transfer call."""

    def __init__(self, count: int) -> None:
        self.errors: list[str | None] = [None] * count

    @contextmanager
    def failures(self, index: int) -> Iterator[None]:
        """Turn one file's error into its response so the other files go on; an error
        meaning the sandbox itself is unusable (gone, credentials, service) propagates."""
        try:
            yield
        except errors.SandboxError as exc:
            if isinstance(exc, _FATAL):
                raise
            self.errors[index] = transfer_error(exc)
        except OSError as exc:  # the local side of a streamed upload
            self.errors[index] = f"cannot read local source: {exc}"


class _UploadPlan(_PerFileFailures):
    def __init__(self, files: Sequence[tuple[str, UploadSource]], progress: Progress | None) -> None:
        super().__init__(len(files))
        self.files = files
        self.progress = progress
        self.targets: list[_Target | None] = [None] * len(files)
        self.ready: list[bool] = [False] * len(files)
        self.sizes: list[int] = [0] * len(files)
        self.done_bytes = 0

    def prepare(self, index: int, path: str, absolute: Callable[[str], str]) -> _Target | None:
        with self.failures(index):
            final = absolute(path)
            head, tail = posixpath.split(final)
            if not tail or final == "/":
                raise errors.SandboxIsADirectoryError(f"upload target {path!r} is a directory", path=path)
            self.targets[index] = _Target(final, posixpath.join(head, f".sbx-upload-{new_token()}"))
            return self.targets[index]
        return None

    def source(self, index: int) -> _LocalSource | None:
        """What to send for file ``index``: a readable local path (streamed by the SDK) or the
        bytes of any other source; ``None`` (with the error recorded) if it cannot be read."""
        data = self.files[index][1]
        try:
            source = open_upload_source(data)
        except OSError as exc:
            self.errors[index] = f"cannot read local source: {exc}"
            return None
        try:
            if isinstance(data, str | os.PathLike):
                return _LocalSource(size=source.size or 0, path=os.fspath(data))
            content = source.stream.read()
        except OSError as exc:  # a stream that fails part-way: this item's error only
            self.errors[index] = f"cannot read local source: {exc}"
            return None
        finally:
            source.close()
        return _LocalSource(size=len(content), data=content)

    def staged(self, index: int, size: int) -> None:
        self.ready[index] = True
        self.sizes[index] = size

    def commit_commands(self, max_bytes: int) -> list[str]:
        """Commands renaming every staged file into place, each within ``max_bytes``."""
        commands: list[str] = []
        lines: list[str] = []
        used = len(_COMMIT_FUNCTION)
        for index, target in enumerate(self.targets):
            if target is None or not self.ready[index]:
                continue
            line = f"c {index} {shlex.quote(target.staging)} {shlex.quote(target.final)}\n"
            if lines and used + len(line.encode("utf-8")) > max_bytes:
                commands.append(_COMMIT_FUNCTION + "".join(lines))
                lines, used = [], len(_COMMIT_FUNCTION)
            lines.append(line)
            used += len(line.encode("utf-8"))
        if lines:
            commands.append(_COMMIT_FUNCTION + "".join(lines))
        return commands

    def committed(self, response: ExecuteResponse) -> None:
        for line in response.output.splitlines():
            index_text, _, status = line.partition(" ")
            if not index_text.isdigit() or int(index_text) >= len(self.files):
                continue
            index = int(index_text)
            path = self.files[index][0]
            if status == "ok":
                self.done_bytes += self.sizes[index]
                if self.progress is not None:
                    total = sum(self.sizes)
                    self.progress(self.done_bytes, total)
                self.ready[index] = False
                self.targets[index] = None
            elif status == "dir":
                self.errors[index] = transfer_error(
                    errors.SandboxIsADirectoryError("is a directory", path=path)
                )
            else:
                self.errors[index] = f"could not move the uploaded file into place at {path!r}"
        if response.exit_code != 0:
            raise errors.SandboxRuntimeError(f"committing uploads failed: {response.output[-500:]!r}")

    def responses(self) -> list[FileUploadResponse]:
        results = []
        for index, (path, _) in enumerate(self.files):
            error = self.errors[index]
            if error is None and self.targets[index] is not None:
                error = "upload was not committed"
            results.append(FileUploadResponse(path=path, error=error))
        return results


class _Downloads(_PerFileFailures):
    def __init__(self, paths: Sequence[str], progress: Progress | None) -> None:
        super().__init__(len(paths))
        self.paths = paths
        self.progress = progress
        self.contents: list[bytes | None] = []
        self.done_bytes = 0

    def done(self, content: bytes | None) -> None:
        """The next file's content (in order), ``None`` if it failed."""
        self.contents.append(content)
        if content is not None:
            self.done_bytes += len(content)
            if self.progress is not None:
                self.progress(self.done_bytes, self.done_bytes)

    def responses(self) -> list[FileDownloadResponse]:
        return [
            FileDownloadResponse(path=path, content=self.contents[i], error=self.errors[i])
            for i, path in enumerate(self.paths)
        ]


__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "DEFAULT_TIMEOUT", "ModalSandbox"]
