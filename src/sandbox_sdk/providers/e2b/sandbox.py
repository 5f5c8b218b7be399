"""``E2BSandbox``: a :class:`~sandbox_sdk.BaseSandbox` on one E2B sandbox.

Commands go through ``commands.run`` (envd runs them as ``bash -l -c``); file
transfers go through the native file API (``files.write`` / ``files.read``).
Both are operations written once, as generators of :class:`SdkCall` s that
the kernel carries out with the SDK's sync ``Sandbox`` or its native
``AsyncSandbox``. Carrying them out also keeps the sandbox alive
(:class:`E2BLifetime`): E2B kills a sandbox at a deadline that use does not
move, so a handle moves it, at most once per keep-alive interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import os
import posixpath
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, Generic, TypeVar

import anyio
from e2b import (
    AsyncCommandHandle,
    AsyncSandbox,
    CommandExitException,
    CommandHandle,
    CommandResult,
    FileType,
    Sandbox,
)
from e2b import exceptions as e2b_errors

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
    KeepAlive,
    Lifetime,
    NativeRequest,
    Operation,
    OutputSink,
    Pipeline,
    Progress,
    UploadSource,
    can_clean_up,
    check_path,
    command_seconds,
    download_result,
    new_token,
    open_upload_source,
    upload_result,
)
from sandbox_sdk.providers.e2b._errors import translate_errors, typed_error

R = TypeVar("R")

#: Command timeout when ``execute`` is given none: the SDK's own default.
DEFAULT_TIMEOUT = 60.0
#: ``execute``'s prefix: ``exec 2>&1`` (envd streams stdout and stderr
#: separately, ``execute``'s contract is one merged stream in order), then
#: ``OWN_GROUP_PREFIX`` (provider_kit), which a streamed command starts with
#: alone: envd starts a command's shell in envd's own process group (no
#: setsid, no setpgid: see the fake's docstring) and its deadline and
#: ``commands.kill`` kill the shell alone, so the command makes itself a group
#: whose id is the pid envd reports, for a kill of the whole group.
COMMAND_PREFIX = "exec 2>&1\n" + OWN_GROUP_PREFIX
#: Timeout of the command that kills a timed-out command's process group.
GROUP_KILL_TIMEOUT = 30.0


def _twin(cls: type[Sandbox] | type[AsyncSandbox], source: Sandbox | AsyncSandbox) -> Any:
    """The same sandbox through the other SDK flavour, without a round trip: built
    from the connection details, as ``Sandbox.connect`` itself builds one."""
    return cls(
        sandbox_id=source.sandbox_id,
        sandbox_domain=source.sandbox_domain,
        envd_version=source._envd_version,
        envd_access_token=source._envd_access_token,
        traffic_access_token=source.traffic_access_token,
        connection_config=source.connection_config,
    )


#: Go's names of the Linux signals (``syscall.Signal.String()``, the table in
#: go/src/syscall/zerrors_linux_amd64.go), as envd's end event of a command
#: killed by a signal reports it: ``signal: killed`` (``os.ProcessState.String()``).
GO_SIGNAL_NAMES = {
    "hangup": 1,
    "interrupt": 2,
    "quit": 3,
    "illegal instruction": 4,
    "trace/breakpoint trap": 5,
    "aborted": 6,
    "bus error": 7,
    "floating point exception": 8,
    "killed": 9,
    "user defined signal 1": 10,
    "segmentation fault": 11,
    "user defined signal 2": 12,
    "broken pipe": 13,
    "alarm clock": 14,
    "terminated": 15,
    "stack fault": 16,
    "child exited": 17,
    "continued": 18,
    "stopped (signal)": 19,
    "stopped": 20,
    "stopped (tty input)": 21,
    "stopped (tty output)": 22,
    "urgent I/O condition": 23,
    "CPU time limit exceeded": 24,
    "file size limit exceeded": 25,
    "virtual timer expired": 26,
    "profiling timer expired": 27,
    "window changed": 28,
    "I/O possible": 29,
    "power failure": 30,
    "bad system call": 31,
}
#: Exit status of a command killed by signal N: 128 + N, as shells report it.
SIGNAL_EXIT_BASE = 128
#: A death by SIGKILL; also what a death by a signal no one names reads as (see :func:`signal_exit_code`).
KILLED_EXIT = SIGNAL_EXIT_BASE + 9
#: Go's text for a signal death, last in envd's error: ``signal: killed``,
#: ``signal: segmentation fault (core dumped)``, ``signal: signal 34`` (outside
#: Go's table), after a ``...: `` prefix where an older envd wrapped it.
_GO_SIGNAL = re.compile(r"^(?:.*: )?signal: (?P<name>[^:]+?)(?: \(core dumped\))?$", re.DOTALL)


def signal_exit_code(exit_code: int, error: str | None) -> int | None:
    """The shell's exit status (128 + N) for envd's end event of a command
    killed by signal N, in each form envd sends it; None for any other end.

    - The live path (``Handler.Wait``, e2b-dev/infra
      packages/envd/internal/services/process/handler/handler.go): Go's
      ``ProcessState.ExitCode()``, -1 after a signal, with ``cmd.Wait()``'s
      error ``signal: killed`` as the error and the same text as the status.
      envd has sent that error text in every version of ``Wait`` since the
      end event has had an exit code; before, it wrapped it (``error waiting
      for process '...': signal: killed``).
    - A command re-adopted across an envd live upgrade
      (``Handler.reapByPidfd``, handler/readopt.go): the exit code is already
      ``128 + int(ws.Signal())``, with no error: an ordinary non-zero exit,
      which never reaches this function.
    - -1 with no signal named: no envd sends it, but Go's -1 on an ended
      process means a signal (``ExitCode``'s doc: "-1 if the process hasn't
      exited or was terminated by a signal"), so it is not an error either: it
      reads as SIGKILL's 137, the signal that ends a process unasked (the
      kernel's OOM killer, envd's own deadline, the sandbox's end)."""
    if exit_code != -1:
        return None
    match = _GO_SIGNAL.match(error or "")
    if match is None:
        return KILLED_EXIT if not error else None
    name = match["name"]
    number = GO_SIGNAL_NAMES.get(name)
    if number is None and name.startswith("signal ") and name[7:].isdigit():
        number = int(name[7:])
    return None if number is None else SIGNAL_EXIT_BASE + number


#: Metadata keys starting with this hold a sandbox's lifetime (not labels).
LIFETIME_PREFIX = "sandbox_sdk."
_IDLE_KEY = LIFETIME_PREFIX + "idle_timeout"
_EXPIRES_KEY = LIFETIME_PREFIX + "expires_at"
#: The keep-alive interval as a fraction of the idle timeout: six minutes for
#: the default hour, so a busy handle extends its sandbox ten times an hour.
KEEP_ALIVE_FRACTION = 0.1


@dataclass(frozen=True)
class E2BLifetime:
    """The common lifetime on E2B, whose ``timeout`` is a deadline that use does not move.

    Each extension sets the deadline to ``idle_timeout`` plus one keep-alive
    interval from now (whole seconds, rounded up): a handle extends at most
    once per interval, so the last extension came at most one interval before
    the last operation and the sandbox lives at least ``idle_timeout`` after
    it, at most ``idle_timeout`` plus an interval. ``expires_at`` (wall-clock
    seconds) is creation plus ``ttl``, or plus the account's maximum uptime:
    no extension reaches past it (it is rounded down), and E2B refuses to go
    past the maximum uptime anyway. Both are kept in the sandbox's metadata,
    so a handle from ``get``, in any process, keeps the sandbox alive alike.
    """

    idle_timeout: float
    expires_at: float

    @classmethod
    def starting(cls, requested: Lifetime, now: float, *, max_lifetime: int) -> E2BLifetime:
        """The lifetime of a sandbox created ``now``."""
        ttl = max_lifetime if requested.ttl is None else min(requested.ttl, max_lifetime)
        idle = max_lifetime if requested.idle_timeout is None else requested.idle_timeout
        return cls(idle_timeout=idle, expires_at=now + ttl)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> E2BLifetime | None:
        """The lifetime recorded in a sandbox's metadata; None for a sandbox made
        without this provider (or with its keys damaged): it is not kept alive."""
        try:
            return cls(idle_timeout=float(metadata[_IDLE_KEY]), expires_at=float(metadata[_EXPIRES_KEY]))
        except (KeyError, ValueError):
            return None

    def metadata(self) -> dict[str, str]:
        """The lifetime as the sandbox's E2B metadata, read back by ``get``."""
        return {_IDLE_KEY: repr(self.idle_timeout), _EXPIRES_KEY: repr(self.expires_at)}

    @property
    def interval(self) -> float:
        """Seconds between two extensions at most."""
        return self.idle_timeout * KEEP_ALIVE_FRACTION

    def timeout(self, now: float) -> int | None:
        """E2B's ``timeout`` to set ``now``; None once less than a second is left."""
        left = math.floor(self.expires_at - now)
        if left < 1:
            return None
        return min(math.ceil(self.idle_timeout + self.interval), left)


def check_timeout(value: object) -> float:
    """A command timeout in seconds: a positive number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise errors.InvalidArgumentError(f"timeout must be a positive number of seconds, not {value!r}")
    return float(value)


class _Output:
    """Collects a command's merged output up to a byte cap, as it arrives."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: list[str] = []
        self.size = 0
        self.truncated = False

    def add(self, chunk: str) -> None:
        if self.truncated:
            return
        data = chunk.encode("utf-8", "surrogateescape")
        room = self.cap - self.size
        if len(data) > room:
            data = data[:room]
            chunk = data.decode("utf-8", "ignore")
            self.truncated = True
        self.parts.append(chunk)
        self.size += len(data)

    def text(self) -> str:
        return "".join(self.parts)


class _CommandRun:
    """One command (an ``execute``, or a streamed one with ``prefix`` keeping
    its streams apart): the command as sent, its output, and the reading of
    its outcome."""

    def __init__(
        self, command: str, timeout: float, max_output_bytes: int, *, prefix: str = COMMAND_PREFIX
    ) -> None:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        self.timeout = timeout
        self.output = _Output(max_output_bytes)
        self.command = prefix + command
        self.started = time.monotonic()

    def streams(self) -> dict[str, Any]:
        """The SDK's output callbacks, both into the one merged output."""
        return {"on_stdout": self.output.add, "on_stderr": self.output.add}

    def response(self, exit_code: int | None, *, timed_out: bool = False) -> ExecuteResponse:
        return ExecuteResponse(
            output=self.output.text(),
            exit_code=TIMEOUT_EXIT_CODE if timed_out else exit_code,
            truncated=self.output.truncated,
            timed_out=timed_out,
        )

    def failed(self, exc: Exception) -> ExecuteResponse:
        """The response for a run that raised, or the typed error to raise."""
        exit_code, timed_out = self.outcome(exc)
        return self.response(exit_code, timed_out=timed_out)

    def outcome(self, exc: Exception) -> tuple[int | None, bool]:
        """The exit status and whether our timeout struck, for a run that
        raised; or the typed error to raise."""
        if isinstance(exc, errors.SandboxError):  # typed already (the keep-alive's)
            raise exc
        if isinstance(exc, CommandExitException):
            code = exc.exit_code if exc.exit_code >= 0 else signal_exit_code(exc.exit_code, exc.error)
            # envd kills the command with SIGKILL at the deadline, and when its
            # end event beats the client's own deadline, the SDK reports an
            # exit instead of a timeout.
            if code == KILLED_EXIT and time.monotonic() - self.started >= self.timeout:
                return None, True
            if code is None:
                raise errors.SandboxRuntimeError(
                    f"execute: the command ended without an exit status: exit code {exc.exit_code},"
                    f" error {exc.error!r}"
                )
            return code, False
        if isinstance(exc, e2b_errors.TimeoutException) and not isinstance(
            exc, e2b_errors.SandboxNotRunningException | e2b_errors.SandboxUnreachableException
        ):
            return None, True
        raise typed_error(exc, "execute") from exc


# -- the SDK calls operations yield -----------------------------------------------------------


class SdkCall(NativeRequest, ABC):
    """One call on the E2B SDK, made alike on the sync ``Sandbox`` (which returns
    its result) and the ``AsyncSandbox`` (which returns an awaitable of it)."""

    #: The call waits on a running command (its end, or its next output) for
    #: as long as the command takes: the keep-alive goes on meanwhile.
    waits_on_command = False

    @abstractmethod
    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        """Make the call on ``sdk``."""

    def errors(self) -> AbstractContextManager[None]:
        """How the SDK's errors reach the operation: as they are, unless a call translates them."""
        return contextlib.nullcontext()


@dataclass(frozen=True)
class FilesCall(SdkCall):
    """``files.<method>(*args, **kwargs)``; the SDK's errors arrive typed."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        return getattr(sdk.files, self.method)(*self.args, **self.kwargs)

    def errors(self) -> AbstractContextManager[None]:
        return translate_errors(f"files.{self.method}", path=str(self.args[0]))


@dataclass(frozen=True)
class StartCommand(SdkCall):
    """``commands.run`` in the background, to learn the pid. The async SDK takes
    the output callbacks here, the sync one when waiting."""

    run: _CommandRun

    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        streams = self.run.streams() if isinstance(sdk, AsyncSandbox) else {}
        options: dict[str, Any] = {"background": True, "timeout": self.run.timeout, "retain_output": False}
        return sdk.commands.run(self.run.command, **options, **streams)


@dataclass(frozen=True)
class WaitCommand(SdkCall):
    """Wait for a started command to end."""

    waits_on_command = True
    run: _CommandRun
    handle: CommandHandle | AsyncCommandHandle

    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        if isinstance(self.handle, AsyncCommandHandle):
            return self.handle.wait()
        return self.handle.wait(**self.run.streams())


@dataclass(frozen=True)
class SetTimeout(SdkCall):
    """Move the sandbox's deadline to ``seconds`` from now (the keep-alive)."""

    seconds: int

    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        return sdk.set_timeout(self.seconds)

    def errors(self) -> AbstractContextManager[None]:
        return translate_errors("extend the E2B sandbox's lifetime")


@dataclass(frozen=True)
class KillGroup(SdkCall):
    """Kill what a timed-out command left running: its whole process group."""

    pid: int

    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        return sdk.commands.run(f"kill -KILL -- -{self.pid} 2>/dev/null; exit 0", timeout=GROUP_KILL_TIMEOUT)

    def errors(self) -> AbstractContextManager[None]:
        return translate_errors("kill a timed-out command")


class _Feed:
    """A streamed command (``commands.run`` in the background, stdout and
    stderr apart) read piece by piece, through either SDK flavour: the sync
    handle is iterated, the async one calls back into a queue that a ``None``
    ends once its wait is over. Each piece is one :class:`NextPiece`, so the
    operation hands it on (to ``stream``'s consumer too) as it comes."""

    def __init__(self, run: _CommandRun, command: Command) -> None:
        self.run = run
        self.options: dict[str, Any] = {"background": True, "timeout": run.timeout, "retain_output": False}
        if command.cwd is not None:
            self.options["cwd"] = os.fsdecode(command.cwd)
        if command.env:
            self.options["envs"] = dict(command.env)
        self.queue: asyncio.Queue[tuple[StreamName, str] | None] = asyncio.Queue()
        self.handle: CommandHandle | AsyncCommandHandle | None = None
        self.events: Iterator[tuple[str | None, str | None, Any]] = iter(())
        self.ended: asyncio.Future[CommandResult] | None = None

    def start(self, sdk: Sandbox) -> int:
        handle = sdk.commands.run(self.run.command, **self.options)
        assert isinstance(handle, CommandHandle)
        self.handle, self.events = handle, iter(handle)
        return int(handle.pid)

    async def astart(self, sdk: AsyncSandbox) -> int:
        handle = await sdk.commands.run(
            self.run.command,
            **self.options,
            on_stdout=lambda text: self.queue.put_nowait(("stdout", text)),
            on_stderr=lambda text: self.queue.put_nowait(("stderr", text)),
        )
        self.handle = handle
        self.ended = asyncio.ensure_future(handle.wait())
        self.ended.add_done_callback(lambda _: self.queue.put_nowait(None))
        return int(handle.pid)

    def next(self) -> tuple[StreamName, str] | CommandResult:
        """The next piece, or the result once the command has ended (a
        non-zero exit raises ``CommandExitException``, as the SDK's wait does)."""
        for stdout, stderr, _ in self.events:
            return ("stdout", stdout) if stdout is not None else ("stderr", stderr or "")
        assert isinstance(self.handle, CommandHandle)
        return self.handle.wait()

    async def anext(self) -> tuple[StreamName, str] | CommandResult:
        piece = await self.queue.get()
        if piece is not None:
            return piece
        assert self.ended is not None
        return await self.ended

    def close(self) -> None:
        """Stop receiving the command's events (the command is killed apart)."""
        if isinstance(self.handle, CommandHandle):
            self.handle.disconnect()

    async def aclose(self) -> None:
        if self.ended is not None:
            self.ended.cancel()
        if isinstance(self.handle, AsyncCommandHandle):
            await self.handle.disconnect()


@dataclass(frozen=True)
class StartStream(SdkCall):
    """Start a streamed command; its pid."""

    feed: _Feed

    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        return self.feed.start(sdk) if isinstance(sdk, Sandbox) else self.feed.astart(sdk)

    def errors(self) -> AbstractContextManager[None]:
        return _start_errors(self.feed.options.get("cwd"))


@contextlib.contextmanager
def _start_errors(cwd: str | None) -> Iterator[None]:
    """The SDK's errors typed; envd refuses a missing ``cwd`` as an invalid
    argument ("cwd '...' does not exist": e2b-dev/infra
    packages/envd/internal/services/process/handler/handler.go, ``New``),
    which ``run`` reports as ``FileNotFoundError`` on every provider."""
    try:
        yield
    except errors.SandboxError:
        raise
    except Exception as exc:
        if isinstance(exc, e2b_errors.InvalidArgumentException) and "does not exist" in str(exc):
            raise errors.SandboxFileNotFoundError(f"run: {exc}", path=cwd) from exc
        raise typed_error(exc, "run", path=cwd) from exc


@dataclass(frozen=True)
class NextPiece(SdkCall):
    """The next piece of a streamed command's output, or its end."""

    waits_on_command = True
    feed: _Feed

    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        return self.feed.next() if isinstance(sdk, Sandbox) else self.feed.anext()


@dataclass(frozen=True)
class CloseStream(SdkCall):
    """Stop receiving an interrupted command's events."""

    feed: _Feed

    def call(self, sdk: Sandbox | AsyncSandbox) -> Any:
        return self.feed.close() if isinstance(sdk, Sandbox) else self.feed.aclose()

    def errors(self) -> AbstractContextManager[None]:
        return translate_errors("stop reading an interrupted command's output")


def _follow(feed: _Feed, collected: Collected, sink: OutputSink) -> Generator[SdkCall, Any, RunResult]:
    """Hand each piece of a started command's output to ``sink`` and keep it
    in ``collected``, up to the command's end."""
    while True:
        try:
            piece = yield NextPiece(feed)
        except Exception as exc:  # noqa: BLE001 - sorted out by _CommandRun.outcome
            exit_code, timed_out = feed.run.outcome(exc)
            return collected.result(exit_code, timed_out)
        if isinstance(piece, CommandResult):
            return collected.result(piece.exit_code, False)
        stream, text = piece
        data = text.encode("utf-8", "surrogateescape")
        collected.add(stream, data)
        sink(stream, data)


# -- operations -----------------------------------------------------------------------------------


#: Errors meaning the sandbox itself is unusable (gone, or credentials
#: refused): a transfer raises them, as ``execute`` does, instead of reporting
#: them as every file's error. Not a transport error: the SDK reports a local
#: source that fails mid-upload as one (httpx's WriteError), a file's failure.
_SANDBOX_UNUSABLE = (errors.SandboxNotFoundError, errors.AuthenticationError)


def _upload_one(path: str, data: UploadSource) -> Generator[FilesCall, Any, tuple[FileUploadResponse, int]]:
    """Upload ``data`` to ``path`` (see :func:`_write_and_rename`); returns the
    response and the bytes sent."""
    try:
        check_path(path)
        if path.endswith("/"):
            raise errors.SandboxIsADirectoryError("upload destination ends with '/'", path=path)
    except errors.SandboxError as exc:
        return upload_result(path, exc), 0
    try:
        source = open_upload_source(data)
    except (OSError, errors.SandboxError) as exc:
        return FileUploadResponse(path=path, error=f"cannot read local source: {exc}"), 0
    try:
        failure = yield from _write_and_rename(path, _rest_of(source.stream))
    except OSError as exc:
        return FileUploadResponse(path=path, error=f"cannot read local source: {exc}"), 0
    finally:
        source.close()
    if isinstance(failure, _SANDBOX_UNUSABLE):
        raise failure
    return upload_result(path, failure), 0 if failure else source.size or 0


def _rest_of(stream: BinaryIO) -> BinaryIO:
    """The SDK sizes a file object from its start, but we upload from its current
    position: hand it just the rest."""
    if stream.seekable() and stream.tell():
        return io.BytesIO(stream.read())
    return stream


def _write_and_rename(path: str, stream: BinaryIO) -> Generator[FilesCall, Any, errors.SandboxError | None]:
    """Write to a hidden temporary file beside ``path``, then rename it into
    place, so a reader never sees a partial file; parents are created. Returns
    the failure, if any, once the temporary file is removed."""
    staging = posixpath.join(posixpath.dirname(path), f".sbx-upload-{new_token()}")
    try:
        yield FilesCall("write", (staging, stream))
        try:
            yield FilesCall("rename", (staging, path))
        except errors.SandboxError as exc:
            raise (yield from _rename_failure(path, exc)) from exc
    except errors.SandboxError as exc:
        with contextlib.suppress(errors.SandboxError):
            yield FilesCall("remove", (staging,))
        return exc
    return None


def _rename_failure(path: str, exc: errors.SandboxError) -> Generator[FilesCall, Any, errors.SandboxError]:
    """envd reports renaming onto a directory as "file exists" (Go's ``os.Rename``):
    look at the destination to report it as what it is."""
    try:
        entry = yield FilesCall("get_info", (path,))
    except errors.SandboxError:
        return exc
    if entry.type == FileType.DIR:
        return errors.SandboxIsADirectoryError(f"upload destination is a directory: {exc}", path=path)
    return exc


def _download_one(path: str) -> Generator[FilesCall, Any, tuple[FileDownloadResponse, int]]:
    """Read the file whole; returns the response and the bytes received."""
    try:
        check_path(path)
        content = yield FilesCall("read", (path,), {"format": "bytes"})
    except _SANDBOX_UNUSABLE:
        raise
    except errors.SandboxError as exc:
        return download_result(path, error=exc), 0
    return download_result(path, bytes(content)), len(content)


class _Results(Generic[R]):
    """Per-file results in order; ``progress`` counts each file's bytes once it
    is done (totals are not known ahead)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.items: list[R] = []
        self.done = 0

    def add(self, outcome: tuple[R, int]) -> None:
        result, size = outcome
        self.items.append(result)
        self.done += size
        if self.progress is not None:
            self.progress(self.done, self.done)


#: Output kept of one command (bytes), unless the sandbox is given another cap.
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024


class E2BSandbox(BaseSandbox):
    """A running E2B sandbox, from the SDK's ``Sandbox`` or ``AsyncSandbox``.

    ``execute`` and the sync file operations use the sync SDK, the ``a``-prefixed
    ones its native async API; the other flavour is built on first use from the
    same connection details. ``upload_files`` and ``download_files`` use E2B's
    file API instead of scripts. ``timeout`` is the default command timeout in
    seconds. With a ``lifetime`` (the provider's handles have one) the handle
    keeps the sandbox alive as :class:`E2BLifetime` says, starting one interval
    from now (the deadline was just set, by create or connect); without one
    the sandbox lives until the deadline its creator set. ``deadline`` is when
    E2B kills the sandbox (wall-clock seconds, at the latest), if known; the
    keep-alive moves it.
    """

    #: envd streams a command's output as events, so the cap is ours alone:
    #: the same as Daytona's and Modal's, so a page of ``read`` or a listing
    #: costs as many round trips on every cloud provider.
    limits = Limits(max_output_bytes=DEFAULT_MAX_OUTPUT_BYTES)

    def __init__(
        self,
        sandbox: Sandbox | AsyncSandbox,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int | None = None,
        lifetime: E2BLifetime | None = None,
        deadline: float | None = None,
    ) -> None:
        if not isinstance(sandbox, Sandbox | AsyncSandbox):
            raise errors.InvalidArgumentError(
                f"E2BSandbox needs an e2b Sandbox or AsyncSandbox, not {type(sandbox).__name__}"
            )
        self._sync: Sandbox | None = sandbox if isinstance(sandbox, Sandbox) else None
        self._async: AsyncSandbox | None = sandbox if isinstance(sandbox, AsyncSandbox) else None
        self._id = sandbox.sandbox_id
        self.timeout = check_timeout(timeout)
        if max_output_bytes is not None:
            self.limits = replace(self.limits, max_output_bytes=max_output_bytes)
        self.lifetime = lifetime
        self.deadline = deadline
        self._keep_alive_lock = threading.Lock()
        self._keep_alive = self._first_keep_alive()

    def _first_keep_alive(self) -> KeepAlive | None:
        """A keep-alive whose first extension is one interval from now."""
        if self.lifetime is None:
            return None
        keep_alive = KeepAlive(self.lifetime.interval)
        keep_alive.due()
        return keep_alive

    def _extension(self) -> SetTimeout | None:
        """The keep-alive call due before the next SDK call, if any."""
        with self._keep_alive_lock:
            if self._keep_alive is None or not self._keep_alive.due():
                return None
        assert self.lifetime is not None
        seconds = self.lifetime.timeout(time.time())
        return None if seconds is None else SetTimeout(seconds)

    @contextlib.contextmanager
    def _extending(self, extension: SetTimeout) -> Iterator[None]:
        """Around the keep-alive call: its errors typed; on success the deadline
        moves, on failure the next call tries again rather than an interval later."""
        try:
            with extension.errors():
                yield
        except errors.SandboxError:
            with self._keep_alive_lock:
                assert self.lifetime is not None
                self._keep_alive = KeepAlive(self.lifetime.interval)
            raise
        self.deadline = time.time() + extension.seconds

    @property
    def id(self) -> str:
        return self._id

    @property
    def sdk_sandbox(self) -> Sandbox:
        """The SDK's sync ``Sandbox`` for this sandbox."""
        if self._sync is None:
            assert self._async is not None
            self._sync = _twin(Sandbox, self._async)
        return self._sync

    @property
    def sdk_async_sandbox(self) -> AsyncSandbox:
        """The SDK's ``AsyncSandbox`` for this sandbox."""
        if self._async is None:
            assert self._sync is not None
            self._async = _twin(AsyncSandbox, self._sync)
        return self._async

    def __repr__(self) -> str:
        return f"E2BSandbox(id={self.id!r})"

    # -- carrying out the SDK calls -------------------------------------------------------------

    def _perform(self, request: Any) -> Any:
        if not isinstance(request, SdkCall):
            return super()._perform(request)
        self._extend_if_due()
        with request.errors(), self._kept_alive(request):
            return request.call(self.sdk_sandbox)

    async def _aperform(self, request: Any) -> Any:
        if not isinstance(request, SdkCall):
            return await super()._aperform(request)
        await self._aextend_if_due()
        with request.errors():
            if not self._needs_keep_alive(request):
                return await request.call(self.sdk_async_sandbox)
            return await self._akept_alive(request.call(self.sdk_async_sandbox))

    def _extend_if_due(self) -> None:
        if (extension := self._extension()) is not None:
            with self._extending(extension):
                extension.call(self.sdk_sandbox)

    async def _aextend_if_due(self) -> None:
        if (extension := self._extension()) is not None:
            with self._extending(extension):
                await extension.call(self.sdk_async_sandbox)

    def _needs_keep_alive(self, request: SdkCall) -> bool:
        """Whether ``request`` waits on a running command of a sandbox with an idle lifetime."""
        return request.waits_on_command and self.lifetime is not None

    @contextlib.contextmanager
    def _kept_alive(self, request: SdkCall) -> Iterator[None]:
        """While ``request`` waits on a running command, a thread extends the
        deadline when due: E2B's deadline does not move on use, so without it a
        command silent for longer than the idle timeout would be killed with
        its sandbox."""
        if not self._needs_keep_alive(request):
            yield
            return
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(stop,), name="e2b-keep-alive", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()

    def _tick(self, stop: threading.Event) -> None:
        assert self.lifetime is not None
        while not stop.wait(self.lifetime.interval):
            with contextlib.suppress(errors.SandboxError):  # the waiting call reports a lost sandbox
                self._extend_if_due()

    async def _akept_alive(self, waiting: Awaitable[R]) -> R:
        """``_kept_alive`` for the async SDK: a task extends the deadline while
        ``waiting`` runs. Its error is raised as it is, not in a group."""
        failure: Exception | None = None
        async with anyio.create_task_group() as ticker:
            ticker.start_soon(self._atick)
            try:
                result = await waiting
            except Exception as exc:  # noqa: BLE001 - raised below, outside the task group
                failure = exc
            finally:
                ticker.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return result

    async def _atick(self) -> None:
        assert self.lifetime is not None
        while True:
            await anyio.sleep(self.lifetime.interval)
            with contextlib.suppress(errors.SandboxError):
                await self._aextend_if_due()

    # -- execute ------------------------------------------------------------------------------------

    def _op_execute(self, command: str, timeout: float | None) -> Generator[SdkCall, Any, ExecuteResponse]:
        """Start the command and wait for its end; past its timeout, kill its process group."""
        seconds = command_seconds(timeout, self.timeout)
        run = _CommandRun(command, seconds, self.limits.max_output_bytes)
        handle: CommandHandle | AsyncCommandHandle | None = None
        try:
            handle = yield StartCommand(run)
            result = yield WaitCommand(run, handle)
        except Exception as exc:  # noqa: BLE001 - sorted out by _CommandRun.failed
            response = run.failed(exc)
            if response.timed_out and handle is not None:
                yield KillGroup(handle.pid)
            return response
        return run.response(result.exit_code)

    def _stream_command(
        self, command: Command, sink: OutputSink, *, keep_output: bool = True
    ) -> Operation[RunResult]:
        """Natively: ``commands.run`` in the background with stdout and stderr
        apart, each output event envd streams handed to ``sink`` as it comes:
        no polling. Past the timeout, or interrupted, the command's process
        group is killed. A command with ``stdin`` takes the derived path
        (envd takes stdin as separate ``SendInput`` calls after the start)."""
        if command.stdin is not None:
            return (yield from super()._stream_command(command, sink, keep_output=keep_output))
        seconds = self.timeout if command.timeout is None else command.timeout
        feed = _Feed(_CommandRun(command.command, seconds, 0, prefix=OWN_GROUP_PREFIX), command)
        pid = yield StartStream(feed)
        try:
            result = yield from _follow(
                feed, Collected(self.limits.max_output_bytes if keep_output else 0), sink
            )
        except BaseException as exc:
            if can_clean_up(exc):
                with contextlib.suppress(errors.SandboxError):
                    yield KillGroup(pid)
                with contextlib.suppress(errors.SandboxError):
                    yield CloseStream(feed)
            raise
        if result.timed_out:
            yield KillGroup(pid)
        return result

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return self._drive(self._op_execute(command, timeout))

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return await self._adrive(self._op_execute(command, timeout))

    # -- native transfers -----------------------------------------------------------------------

    def _upload_batch(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> Operation[list[FileUploadResponse]]:
        """Upload through ``files.write`` then ``files.rename``: per-file errors, in order."""
        items = list(files)
        uploads = [_upload_one(path, data) for path, data in items]
        return (yield from self._op_each(uploads, [path for path, _ in items], progress))

    def _download_batch(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> Operation[list[FileDownloadResponse]]:
        """Download through ``files.read(format="bytes")``: per-file errors, in order."""
        wanted = list(paths)
        return (yield from self._op_each([_download_one(path) for path in wanted], wanted, progress))

    def _op_each(
        self,
        transfers: list[Generator[FilesCall, Any, tuple[R, int]]],
        paths: Sequence[str],
        progress: Progress | None,
    ) -> Generator[Any, Any, list[R]]:
        """Run one transfer per path, up to ``transfer_concurrency`` in flight, results in
        order. When paths repeat they run one after another, so the last one wins as it
        would sequentially."""
        results = _Results[R](progress)
        window = self.limits.transfer_concurrency if len(set(paths)) == len(paths) else 1
        yield Pipeline(calls=transfers, consume=results.add, window=window)
        return results.items


__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "DEFAULT_TIMEOUT", "E2BLifetime", "E2BSandbox"]
