"""``DaytonaSandbox``: ``execute`` over the toolbox daemon, transfers over its file API."""

from __future__ import annotations

import asyncio
import math
import os
import shlex
import threading
import weakref
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    Daytona,
    DaytonaConfig,
    DaytonaError,
    DaytonaTimeoutError,
    FileDownloadRequest,
    FileUpload,
    Sandbox,
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
    download_result,
    open_upload_source,
    upload_result,
)
from sandbox_sdk.providers.daytona._errors import translate_errors

#: Default timeout of one command, in seconds (the daemon's own default is 360 s).
DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024


class DaytonaClients:
    """One sync ``Daytona`` client, and one ``AsyncDaytona`` per event loop.

    ``AsyncDaytona`` keeps an aiohttp session bound to the loop that first used
    it, so a client is made (lazily) for each running loop instead of shared."""

    def __init__(self, config: DaytonaConfig) -> None:
        self.config = config
        # The SDK checks credentials here (DAYTONA_API_KEY, or DAYTONA_JWT_TOKEN with
        # DAYTONA_ORGANIZATION_ID); failing now is the "clear error at construction".
        with translate_errors("cannot create the Daytona client"):
            self.sync = Daytona(config)
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncDaytona] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def aclient(self) -> AsyncDaytona:
        """The async client of the running event loop (asyncio only)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = self._async[loop] = AsyncDaytona(self.config)
            return client

    async def aclose(self) -> None:
        """Close the running loop's async client (its HTTP session)."""
        with self._lock:
            client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]  # unannotated in the SDK


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


class DaytonaSandbox(BaseSandbox):
    """A Daytona sandbox. Commands run through ``process.exec``; ``upload_files``
    and ``download_files`` move bytes through the daemon's bulk file API.

    Each command is wrapped as ``<shell> -c <quoted command> <shell> </dev/null``:
    recent daemons feed the command text to a shell on stdin (so the command
    would otherwise read the rest of that stdin), older ones split it on spaces
    and exec it without a shell; the wrapped form means the same to both.

    Timeouts are whole seconds on the wire (rounded up). A timed-out command
    returns ``timed_out=True``, exit code 124 and no output: the daemon kills
    its process group and answers 408 without what the command printed.
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
    ) -> None:
        self._clients = clients
        self._id = sandbox_id
        self._sdk_sandbox = sdk_sandbox
        self._async_sandboxes: dict[asyncio.AbstractEventLoop, AsyncSandbox] = {}
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.shell = shell

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
        self._async_sandboxes[asyncio.get_running_loop()] = sandbox

    async def _async_sdk(self) -> AsyncSandbox:
        loop = asyncio.get_running_loop()
        sandbox = self._async_sandboxes.get(loop)
        if sandbox is None:
            with translate_errors(f"get sandbox {self._id}"):
                sandbox = await self._clients.aclient().get(self._id)
            self._async_sandboxes = {
                known: value for known, value in self._async_sandboxes.items() if not known.is_closed()
            }
            self._async_sandboxes[loop] = sandbox
        return sandbox

    async def aclose(self) -> None:
        """Close the async SDK client of the running event loop (shared with the provider)."""
        self._async_sandboxes.pop(asyncio.get_running_loop(), None)
        await self._clients.aclose()

    # -- execute -------------------------------------------------------------------------

    def _wrap(self, command: str) -> str:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        return f"{self.shell} -c {shlex.quote(command)} {self.shell} </dev/null"

    def _wire_timeout(self, timeout: float | None) -> int:
        seconds = self.timeout if timeout is None else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
            raise errors.InvalidArgumentError(
                f"timeout must be a positive number of seconds, not {timeout!r}"
            )
        return max(1, math.ceil(seconds))

    def _response(self, output: str, exit_code: int | None) -> ExecuteResponse:
        data = output.encode("utf-8", "surrogateescape")
        if len(data) <= self.max_output_bytes:
            return ExecuteResponse(output=output, exit_code=exit_code)
        kept = data[: self.max_output_bytes].decode("utf-8", "ignore")
        return ExecuteResponse(output=kept, exit_code=exit_code, truncated=True)

    def _op_execute(
        self, command: str, timeout: float | None
    ) -> Generator[ToolboxCall, Any, ExecuteResponse]:
        call = ToolboxCall(
            "process", "exec", (self._wrap(command),), {"timeout": self._wire_timeout(timeout)}
        )
        with translate_errors(f"execute in sandbox {self._id}"):
            try:
                reply = yield call
            except DaytonaTimeoutError:
                return ExecuteResponse(output="", exit_code=TIMEOUT_EXIT_CODE, timed_out=True)
        return self._response(reply.result, reply.exit_code)

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return self._drive(self._op_execute(command, timeout))

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return await self._adrive(self._op_execute(command, timeout))

    # -- carrying out toolbox calls -----------------------------------------------------------

    def _perform(self, request: Any) -> Any:
        if isinstance(request, ToolboxCall):
            return request.on(self._sync_sdk())
        return super()._perform(request)

    async def _aperform(self, request: Any) -> Any:
        if isinstance(request, ToolboxCall):
            return await request.on(await self._async_sdk())
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
