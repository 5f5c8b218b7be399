"""``DaytonaSandbox``: ``execute`` over the toolbox daemon, transfers over its file API."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import threading
import time
from collections.abc import AsyncGenerator, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    Daytona,
    DaytonaConfig,
    DaytonaError,
    FileDownloadRequest,
    FileUpload,
    Sandbox,
    SandboxState,
)
from daytona import FileDownloadResponse as DaytonaDownload

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from sandbox_sdk.provider_kit import (
    TIMEOUT_EXIT_CODE,
    NativeRequest,
    Operation,
    Progress,
    UploadSource,
    check_path,
    command_seconds,
    download_result,
    open_upload_source,
    upload_result,
)
from sandbox_sdk.providers.daytona._errors import translate_errors

#: Default timeout of one command, in seconds (the daemon's own default is 360 s).
DEFAULT_TIMEOUT = 120.0
#: Seconds to wait for a sandbox to reach ``started`` (through transitions, and starting it).
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024


class DaytonaClients:
    """One sync ``Daytona`` client, and one ``AsyncDaytona`` per event loop.

    ``AsyncDaytona`` keeps an aiohttp session bound to the loop that first used
    it, so a client is made (lazily) for each running loop instead of shared.
    Each is closed on its own loop: by :meth:`aclose`, or when the loop shuts
    down (``asyncio.run`` and ``anyio.run`` finalize a loop's async generators
    before closing it, and a small generator per client closes the client
    then), so a forgotten ``aclose`` leaks no "Unclosed client session"."""

    def __init__(self, config: DaytonaConfig) -> None:
        self.config = config
        # The SDK checks credentials here (DAYTONA_API_KEY, or DAYTONA_JWT_TOKEN with
        # DAYTONA_ORGANIZATION_ID); failing now is the "clear error at construction".
        with translate_errors("cannot create the Daytona client"):
            self.sync = Daytona(config)
        self._async: dict[asyncio.AbstractEventLoop, tuple[AsyncDaytona, AsyncGenerator[None, None]]] = {}
        self._lock = threading.Lock()

    def aclient(self) -> AsyncDaytona:
        """The async client of the running event loop (asyncio only)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._async.get(loop)
            if entry is not None:
                return entry[0]
            # Loops closed without finalizing their generators: nothing can close their sessions now.
            for closed in [known for known in self._async if known.is_closed()]:
                del self._async[closed]
            client = AsyncDaytona(self.config)
            closer = self._closer(loop, client)
            self._async[loop] = (client, closer)
        # Run the closer to its first yield: the loop now tracks it, and finalizes it at shutdown.
        with contextlib.suppress(StopIteration):
            closer.asend(None).send(None)
        return client

    async def _closer(
        self, loop: asyncio.AbstractEventLoop, client: AsyncDaytona
    ) -> AsyncGenerator[None, None]:
        """Closes ``client`` when finalized: by :meth:`aclose`, or by its loop's shutdown."""
        try:
            yield
        finally:
            with self._lock:
                if self._async.get(loop, (None,))[0] is client:
                    del self._async[loop]
            await client.close()  # type: ignore[no-untyped-call]  # unannotated in the SDK

    async def aclose(self) -> None:
        """Close the running loop's async client (its HTTP session)."""
        with self._lock:
            entry = self._async.get(asyncio.get_running_loop())
        if entry is not None:
            await entry[1].aclose()

    def close(self) -> None:
        """Close every loop's async client that can be closed on its loop now: an
        idle loop's here, one running in another thread there (waited for). The
        calling thread's running loop closes its own at shutdown, or on ``aclose``."""
        with self._lock:
            entries = list(self._async.items())
        for loop, (_, closer) in entries:
            if loop.is_closed() or loop is _running_loop():
                continue
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(closer.aclose(), loop).result(CLOSE_TIMEOUT)
            else:
                loop.run_until_complete(closer.aclose())


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@dataclass(frozen=True)
class ToolboxCall(NativeRequest):
    """``<area>.<method>(*args, **kwargs)`` on the sandbox's toolbox (``process``,
    ``fs``), alike on the SDK's sync and async sandbox. The SDK's errors reach the
    operation as they are: how to read one depends on the call."""

    area: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def on(self, sandbox: Sandbox | AsyncSandbox) -> Any:
        """Make the call: its result from a sync sandbox, an awaitable of it from an async one."""
        return getattr(getattr(sandbox, self.area), self.method)(*self.args, **self.kwargs)


@dataclass(frozen=True)
class StateCall(NativeRequest):
    """``<method>(**kwargs)`` on the SDK's sandbox object itself (``refresh_data``,
    ``start``), or no call when ``method`` is ``None``; the reply is the sandbox's
    state afterwards, as its string value."""

    method: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def on(self, sandbox: Sandbox | AsyncSandbox) -> Any:
        """Make the call: ``None`` from a sync sandbox, an awaitable from an async one."""
        return getattr(sandbox, self.method)(**self.kwargs) if self.method else None


@dataclass(frozen=True)
class Pause(NativeRequest):
    """Wait ``seconds`` (``time.sleep`` or ``anyio.sleep``) before asking again."""

    seconds: float


#: States on the way to another one; ``get`` waits them out (unknown future states too).
_GONE = {SandboxState.DESTROYED.value, SandboxState.DESTROYING.value}
_FAILED = {SandboxState.ERROR.value, SandboxState.BUILD_FAILED.value}
#: States ``start`` leaves for ``started``: it starts a stopped or archived sandbox and
#: resumes a paused one (``start_sandbox``: "Start or resume sandbox", daytona_api_client).
_STARTABLE = {SandboxState.STOPPED.value, SandboxState.ARCHIVED.value, SandboxState.PAUSED.value}
_STARTED = SandboxState.STARTED.value
#: First and longest pause between state polls, as the SDK's own waits (``_wait_for_state``).
_FIRST_POLL, _LAST_POLL = 0.1, 1.0
#: Seconds ``DaytonaClients.close`` waits for another thread's loop to close its client.
CLOSE_TIMEOUT = 10.0


def state_value(state: object) -> str:
    """A sandbox state as its string value, whichever client's enum it comes from."""
    return str(getattr(state, "value", state))


def _never_ran(exc: DaytonaError, state: str) -> bool:
    """Whether a failed toolbox call provably never reached the daemon because the
    sandbox was not running (``state`` read just after the failure): the runner's
    toolbox proxy answers 400 "container has no IP address, it might not be
    running" (apps/runner/pkg/api/controllers/proxy.go, ``getProxyTarget``), and
    the proxy that wakes a stopped VM answers 503 with its "Sandbox is starting"
    page (apps/proxy/pkg/proxy/wake.go), in daytonaio/daytona."""
    if exc.status_code == 400:
        return state != _STARTED
    return exc.status_code == 503 and "Sandbox is starting" in str(exc)


class DaytonaSandbox(BaseSandbox):
    """A Daytona sandbox. Commands run through ``process.exec``; ``upload_files``
    and ``download_files`` move bytes through the daemon's bulk file API.

    Each command runs as ``<shell> -c '<shell> -c "$1" <shell> </dev/null; exit $?'
    <shell> <quoted command>``: recent daemons feed the command text to a shell
    on stdin (so the command would otherwise read the rest of that stdin),
    older ones split it on spaces and exec it without a shell; the wrapped
    form means the same to both. The command's shell is a child of another
    shell on both, so a command killed by signal N exits 128+N (an older
    daemon reports -1 for a process it started that died of a signal).

    Timeouts are whole seconds on the wire (rounded up). A timed-out command
    returns ``timed_out=True``, exit code 124 and no output: the daemon kills
    its process group and answers 408 without what the command printed. Any
    other failure to get an answer (a connection or gateway timeout: the
    command may or may not have run) raises the typed error.

    A handle outlives its sandbox's stops: when the platform answers that the
    sandbox is not running (auto-stopped after ``auto_stop_interval`` idle
    minutes), the command is retried once after starting it again, since that
    answer proves the command never started. Nothing else is retried.
    """

    def __init__(
        self,
        clients: DaytonaClients,
        sandbox_id: str,
        *,
        sdk_sandbox: Sandbox | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        shell: str = "bash",
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self._clients = clients
        self._id = sandbox_id
        self._sdk_sandbox = sdk_sandbox
        #: Per event loop: the loop's client and the SDK sandbox object made with it.
        self._async_sandboxes: dict[asyncio.AbstractEventLoop, tuple[AsyncDaytona, AsyncSandbox]] = {}
        self.timeout = timeout
        self.limits = replace(self.limits, max_output_bytes=max_output_bytes)
        self.shell = shell
        self.start_timeout = start_timeout

    @property
    def id(self) -> str:
        return self._id

    def __repr__(self) -> str:
        return f"DaytonaSandbox(id={self._id!r})"

    # -- SDK objects -------------------------------------------------------------------

    def _sync_sdk(self) -> Sandbox:
        if self._sdk_sandbox is None:
            with translate_errors(f"get sandbox {self._id}"):
                self._sdk_sandbox = self._clients.sync.get(self._id)
        return self._sdk_sandbox

    def _adopt_async(self, sandbox: AsyncSandbox) -> None:
        """Use ``sandbox`` (just created or fetched by the provider) on the running loop."""
        self._async_sandboxes[asyncio.get_running_loop()] = (self._clients.aclient(), sandbox)

    async def _async_sdk(self) -> AsyncSandbox:
        loop = asyncio.get_running_loop()
        client = self._clients.aclient()
        known = self._async_sandboxes.get(loop)
        if known is not None and known[0] is client:
            return known[1]
        with translate_errors(f"get sandbox {self._id}"):
            sandbox = await client.get(self._id)
        self._async_sandboxes = {
            other: value for other, value in self._async_sandboxes.items() if not other.is_closed()
        }
        self._async_sandboxes[loop] = (client, sandbox)
        return sandbox

    async def aclose(self) -> None:
        """Close the async SDK client of the running event loop (shared with the provider)."""
        self._async_sandboxes.pop(asyncio.get_running_loop(), None)
        await self._clients.aclose()

    # -- states ------------------------------------------------------------------------------

    def _op_ready(self) -> Operation[None]:
        """Bring the sandbox to ``started``: wait out transitional states (``starting``,
        ``stopping``, ``archiving``, ``pausing``, ``resuming``, ...; the API refuses to
        start a sandbox while a state change is in progress), then start one that is
        stopped, archived or paused, within ``start_timeout`` seconds in all."""
        state = yield StateCall()
        waited, pause, started = 0.0, _FIRST_POLL, False
        while state != _STARTED:
            if state in _GONE:
                raise errors.SandboxNotFoundError(f"sandbox {self._id} has been deleted ({state})")
            if state in _FAILED:  # Daytona's listing still shows it; to us it is not there
                raise errors.SandboxNotFoundError(
                    f"sandbox {self._id} is in state {state} and cannot be used"
                )
            if state in _STARTABLE and not started:
                started = True
                state = yield StateCall("start", {"timeout": max(1.0, self.start_timeout - waited)})
                continue
            if waited >= self.start_timeout:
                raise errors.SandboxTimeoutError(
                    f"sandbox {self._id} is still {state} after {waited:.0f} s (start_timeout)"
                )
            yield Pause(pause)
            waited, pause = waited + pause, min(_LAST_POLL, pause * 2)
            state = yield StateCall("refresh_data")

    def _op_call(self, call: ToolboxCall) -> Operation[Any]:
        """Make a toolbox call; if the platform proves it never ran because the
        sandbox is not running, start the sandbox and make it once more."""
        try:
            return (yield call)
        except DaytonaError as exc:
            if exc.status_code not in (400, 503):
                raise
            state = yield StateCall("refresh_data")
            if not _never_ran(exc, state):
                raise
        yield from self._op_ready()
        return (yield call)

    # -- execute -------------------------------------------------------------------------

    def _wrap(self, command: str) -> str:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        runner = f'{self.shell} -c "$1" {self.shell} </dev/null; exit $?'
        return f"{self.shell} -c {shlex.quote(runner)} {self.shell} {shlex.quote(command)}"

    def _wire_timeout(self, timeout: float | None) -> int:
        seconds = command_seconds(timeout, self.timeout)
        if seconds == math.inf:
            raise errors.InvalidArgumentError("timeout must be a finite number of seconds on Daytona")
        return max(1, math.ceil(seconds))

    def _response(self, output: str, exit_code: int | None) -> ExecuteResponse:
        data = output.encode("utf-8", "surrogateescape")
        if len(data) <= self.limits.max_output_bytes:
            return ExecuteResponse(output=output, exit_code=exit_code)
        kept = data[: self.limits.max_output_bytes].decode("utf-8", "ignore")
        return ExecuteResponse(output=kept, exit_code=exit_code, truncated=True)

    def _op_execute(self, command: str, timeout: float | None) -> Operation[ExecuteResponse]:
        call = ToolboxCall(
            "process", "exec", (self._wrap(command),), {"timeout": self._wire_timeout(timeout)}
        )
        with translate_errors(f"execute in sandbox {self._id}"):
            try:
                reply = yield from self._op_call(call)
            except DaytonaError as exc:
                # Only the daemon's own 408 says the command ran into its timeout and was
                # killed. A connection or read timeout (DaytonaConnectionTimeoutError) or a
                # gateway's 504 says nothing of the kind: raised, typed, below.
                if exc.status_code != 408:
                    raise
                return ExecuteResponse(output="", exit_code=TIMEOUT_EXIT_CODE, timed_out=True)
        return self._response(reply.result, reply.exit_code)

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return self._drive(self._op_execute(command, timeout))

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return await self._adrive(self._op_execute(command, timeout))

    # -- carrying out native calls ------------------------------------------------------------

    def _perform(self, request: Any) -> Any:
        if isinstance(request, ToolboxCall):
            return request.on(self._sync_sdk())
        if isinstance(request, StateCall):
            sandbox = self._sync_sdk()
            request.on(sandbox)
            return state_value(sandbox.state)
        if isinstance(request, Pause):
            return time.sleep(request.seconds)
        return super()._perform(request)

    async def _aperform(self, request: Any) -> Any:
        if isinstance(request, ToolboxCall):
            return await request.on(await self._async_sdk())
        if isinstance(request, StateCall):
            asandbox = await self._async_sdk()
            if request.method:
                await request.on(asandbox)
            return state_value(asandbox.state)
        if isinstance(request, Pause):
            return await anyio.sleep(request.seconds)
        return await super()._aperform(request)

    # -- native transfers ---------------------------------------------------------------------

    def _upload_batch(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> Operation[list[FileUploadResponse]]:
        """Upload through the daemon's bulk upload (one request), which creates
        parent directories. Any file the daemon rejects is retried through the
        ``execute`` path, which reports the precise error code.

        Not atomic: the daemon truncates and writes each destination in place,
        and its file API cannot rename over an existing file."""
        plan = _UploadPlan.of(list(files))
        failed: Sequence[int] = ()
        if plan.uploads:
            try:
                yield ToolboxCall("fs", "upload_files", ([upload for _, upload in plan.uploads],))
            except DaytonaError as exc:
                failed = plan.failed_indices(exc)
            plan.report(progress, failed)
        retry = plan.retry_items(failed)
        return plan.merge((yield from super()._upload_batch(retry)) if retry else [])

    def _download_batch(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> Operation[list[FileDownloadResponse]]:
        """Download through the daemon's bulk download (one request). A path the
        daemon cannot serve is retried through the ``execute`` path, which
        reports the precise error code (``file_not_found``, ``is_directory``, ...)."""
        plan = _DownloadPlan.of(list(paths))
        replies: list[DaytonaDownload] | None = None
        if plan.sources:
            try:
                replies = yield ToolboxCall("fs", "download_files", (plan.requests(),))
            except DaytonaError:
                replies = None
        retry = plan.take(replies, progress)
        return plan.merge((yield from super()._download_batch(retry)) if retry else [])


@dataclass
class _UploadPlan:
    """Which items go to the bulk upload, and the responses decided so far."""

    paths: list[str]
    results: list[FileUploadResponse | None]
    uploads: list[tuple[int, FileUpload]] = field(default_factory=list)
    sizes: dict[int, int] = field(default_factory=dict)
    retried: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, items: list[tuple[str, UploadSource]]) -> _UploadPlan:
        plan = cls([path for path, _ in items], [None] * len(items))
        for index, (path, data) in enumerate(items):
            try:
                if not isinstance(path, str):
                    raise errors.InvalidPathError(f"path must be a str, not {type(path).__name__}")
                check_path(path)
                source, size = _native_source(data)
            except errors.SandboxError as exc:
                plan.results[index] = upload_result(str(path), exc)
                continue
            except OSError as exc:
                plan.results[index] = FileUploadResponse(path=path, error=f"cannot read local source: {exc}")
                continue
            plan.uploads.append((index, FileUpload(source=source, destination=path)))
            plan.sizes[index] = size
        return plan

    def failed_indices(self, exc: DaytonaError) -> list[int]:
        """The items a failed bulk upload did not write. The daemon answers 400
        with one ``"<destination>: <error>"`` per failed file and writes the
        others; anything else (or an error naming no file) counts as all failed."""
        everything = [index for index, _ in self.uploads]
        if exc.status_code != 400:
            return everything
        text = str(exc)
        named = [index for index, upload in self.uploads if f"{upload.destination}: " in text]
        return named or everything

    def report(self, progress: Progress | None, failed: Sequence[int]) -> None:
        if progress is None:
            return
        total = sum(self.sizes.values())
        progress(total - sum(self.sizes[index] for index in failed), total)

    def retry_items(self, failed: Sequence[int]) -> list[tuple[str, UploadSource]]:
        """Mark the written items done; the failed ones go through ``execute``."""
        retry: list[tuple[str, UploadSource]] = []
        failed_set = set(failed)
        self.retried = [index for index, _ in self.uploads if index in failed_set]
        for index, upload in self.uploads:
            if index in failed_set:
                retry.append((upload.destination, upload.source))
            else:
                self.results[index] = FileUploadResponse(path=self.paths[index])
        return retry

    def merge(self, retried: list[FileUploadResponse]) -> list[FileUploadResponse]:
        for index, response in zip(self.retried, retried, strict=True):
            self.results[index] = response
        assert all(r is not None for r in self.results)
        return [r for r in self.results if r is not None]


def _native_source(data: UploadSource) -> tuple[bytes | str, int]:
    """What ``FileUpload`` takes: bytes, or a local path the SDK streams."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data), len(data)
    if isinstance(data, str | os.PathLike):
        opened = open_upload_source(data)  # a regular file, readable now, or a per-item error
        opened.close()
        return os.fspath(data), opened.size or 0
    if hasattr(data, "read"):
        content = data.read()
        if not isinstance(content, bytes):
            raise errors.InvalidArgumentError("an upload file object must be opened in binary mode")
        return content, len(content)
    raise errors.InvalidArgumentError(f"cannot upload a {type(data).__name__}: pass bytes, a path or a file")


@dataclass
class _DownloadPlan:
    """Which paths go to the bulk download (each once), and the responses so far."""

    paths: list[str]
    results: list[FileDownloadResponse | None]
    sources: dict[str, list[int]] = field(default_factory=dict)
    retried: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, paths: list[str]) -> _DownloadPlan:
        plan = cls(paths, [None] * len(paths))
        for index, path in enumerate(paths):
            try:
                if not isinstance(path, str):
                    raise errors.InvalidPathError(f"path must be a str, not {type(path).__name__}")
                check_path(path)
            except errors.SandboxError as exc:
                plan.results[index] = download_result(str(path), error=exc)
                continue
            # The SDK keys its results by path, so each distinct path is requested once.
            plan.sources.setdefault(path, []).append(index)
        return plan

    def requests(self) -> list[FileDownloadRequest]:
        return [FileDownloadRequest(source=path) for path in self.sources]

    def take(self, replies: list[DaytonaDownload] | None, progress: Progress | None) -> list[str]:
        """Keep what the daemon sent; return the paths to retry through ``execute``."""
        received = 0
        for position, path in enumerate(self.sources):
            reply = replies[position] if replies is not None else None
            if reply is None or reply.error is not None or not isinstance(reply.result, bytes):
                self.retried.append(path)
                continue
            received += len(reply.result)
            for index in self.sources[path]:
                self.results[index] = FileDownloadResponse(path=path, content=reply.result)
        if progress is not None and received:
            progress(received, received)
        return self.retried

    def merge(self, retried: list[FileDownloadResponse]) -> list[FileDownloadResponse]:
        for path, response in zip(self.retried, retried, strict=True):
            for index in self.sources[path]:
                self.results[index] = response
        assert all(r is not None for r in self.results)
        return [r for r in self.results if r is not None]
