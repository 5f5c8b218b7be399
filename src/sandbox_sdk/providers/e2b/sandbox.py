"""``E2BSandbox``: a :class:`~sandbox_sdk.BaseSandbox` on one E2B sandbox.

Commands go through ``commands.run`` (envd runs them as ``bash -l -c``); file
transfers go through the native file API (``files.write`` / ``files.read``).
Everything exists for the SDK's sync ``Sandbox`` and its native
``AsyncSandbox``: a transfer is written once, as a generator of SDK file
calls that a sync and an async driver perform.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from e2b import AsyncSandbox, CommandExitException, FileType, Sandbox
from e2b import exceptions as e2b_errors

from sandbox_sdk import _kernel as kernel
from sandbox_sdk import errors
from sandbox_sdk._core import check_path, new_token
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import TIMEOUT_EXIT_CODE, ExecuteResponse, FileDownloadResponse, FileUploadResponse
from sandbox_sdk.providers.e2b._errors import typed_error
from sandbox_sdk.transfer import Progress, UploadSource, open_upload_source, transfer_error

T = TypeVar("T")

#: Command timeout when ``execute`` is given none: the SDK's own default.
DEFAULT_TIMEOUT = 60.0
#: Put in front of every command. ``exec 2>&1``: envd streams stdout and
#: stderr separately, our contract is one merged stream in order. Then the
#: shell re-executes its own ``-c`` string under ``setsid`` (same pid: the
#: shell is not a group leader, so setsid does not fork), making the command a
#: process group of its own that a timeout can kill whole: envd's deadline
#: kills the shell alone and would leave what it started running.
COMMAND_PREFIX = (
    "exec 2>&1\n"
    'if [ -z "${SBX_OWN_GROUP-}" ] && command -v setsid >/dev/null 2>&1; then'
    ' SBX_OWN_GROUP=1 exec setsid bash -l -c "$BASH_EXECUTION_STRING"; fi; unset SBX_OWN_GROUP\n'
)
#: Timeout of the command that kills a timed-out command's process group.
GROUP_KILL_TIMEOUT = 30.0


@dataclass(frozen=True)
class FilesCall:
    """One call on the SDK's ``files`` module, the same for the sync and async sandbox."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


FilesOp = Generator[FilesCall, Any, T]


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
    """One ``execute``: the arguments for ``commands.run`` and the reading of its outcome."""

    def __init__(self, command: str, timeout: float, max_output_bytes: int) -> None:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        self.timeout = timeout
        self.output = _Output(max_output_bytes)
        self.command = COMMAND_PREFIX + command
        self.started = time.monotonic()

    def start_kwargs(self) -> dict[str, Any]:
        """``commands.run`` arguments: in the background, to learn the pid."""
        return {"background": True, "timeout": self.timeout, "retain_output": False}

    @staticmethod
    def group_kill(pid: int) -> str:
        """The command that kills what a timed-out command left behind."""
        return f"kill -KILL -- -{pid} 2>/dev/null; exit 0"

    def response(self, exit_code: int | None, *, timed_out: bool = False) -> ExecuteResponse:
        return ExecuteResponse(
            output=self.output.text(),
            exit_code=TIMEOUT_EXIT_CODE if timed_out else exit_code,
            truncated=self.output.truncated,
            timed_out=timed_out,
        )

    def failed(self, exc: Exception) -> ExecuteResponse:
        """The response for a run that raised, or the typed error to raise."""
        if isinstance(exc, CommandExitException):
            # envd kills the command at the deadline; when its end event (exit
            # code -1, "signal: killed") beats the client's own deadline, the
            # SDK reports an exit instead of a timeout.
            if exc.exit_code == -1 and time.monotonic() - self.started >= self.timeout:
                return self.response(None, timed_out=True)
            return self.response(exc.exit_code)
        if isinstance(exc, e2b_errors.TimeoutException) and not isinstance(
            exc, e2b_errors.SandboxNotRunningException | e2b_errors.SandboxUnreachableException
        ):
            return self.response(None, timed_out=True)
        raise typed_error(exc, "execute") from exc


def _upload_one(path: str, data: UploadSource) -> FilesOp[tuple[FileUploadResponse, int]]:
    """Write to a hidden temporary file beside ``path``, then rename it into
    place, so a reader never sees a partial file; parents are created. Returns
    the response and the bytes sent."""
    try:
        check_path(path)
        if path.endswith("/"):
            raise errors.SandboxIsADirectoryError("upload destination ends with '/'", path=path)
    except errors.SandboxError as exc:
        return FileUploadResponse(path=path, error=transfer_error(exc)), 0
    try:
        source = open_upload_source(data)
    except (OSError, errors.SandboxError) as exc:
        return FileUploadResponse(path=path, error=f"cannot read local source: {exc}"), 0
    staging = posixpath.join(posixpath.dirname(path), f".sbx-upload-{new_token()}")
    stream = source.stream
    try:
        if stream.seekable() and stream.tell():
            # The SDK sizes a file object from its start, but we upload from
            # its current position: hand it just the rest.
            stream = io.BytesIO(stream.read())
    except OSError as exc:
        source.close()
        return FileUploadResponse(path=path, error=f"cannot read local source: {exc}"), 0
    try:
        yield FilesCall("write", (staging, stream))
        try:
            yield FilesCall("rename", (staging, path))
        except errors.SandboxError as exc:
            raise (yield from _rename_failure(path, exc)) from exc
    except errors.SandboxError as exc:
        failure = exc
    else:
        return FileUploadResponse(path=path), source.size or 0
    finally:
        source.close()
    with contextlib.suppress(errors.SandboxError):
        yield FilesCall("remove", (staging,))
    return FileUploadResponse(path=path, error=transfer_error(failure)), 0


def _rename_failure(path: str, exc: errors.SandboxError) -> FilesOp[errors.SandboxError]:
    """envd reports renaming onto a directory as "file exists" (Go's ``os.Rename``):
    look at the destination to report it as what it is."""
    try:
        entry = yield FilesCall("get_info", (path,))
    except errors.SandboxError:
        return exc
    if entry.type == FileType.DIR:
        return errors.SandboxIsADirectoryError(f"upload destination is a directory: {exc}", path=path)
    return exc


def _download_one(path: str) -> FilesOp[FileDownloadResponse]:
    try:
        check_path(path)
        content = yield FilesCall("read", (path,), {"format": "bytes"})
    except errors.SandboxError as exc:
        return FileDownloadResponse(path=path, error=transfer_error(exc))
    return FileDownloadResponse(path=path, content=bytes(content))


class E2BSandbox(BaseSandbox):
    """A running E2B sandbox, from the SDK's ``Sandbox`` or ``AsyncSandbox``.

    ``execute`` and the sync file operations use the sync SDK, the ``a``-prefixed
    ones its native async API; the other flavour is built on first use from the
    same connection details. ``upload_files`` and ``download_files`` use E2B's
    file API instead of scripts. ``timeout`` is the default command timeout in
    seconds.
    """

    def __init__(
        self,
        sandbox: Sandbox | AsyncSandbox,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int | None = None,
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
            self.max_output_bytes = max_output_bytes

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

    def _command_timeout(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else check_timeout(timeout)

    # -- execute -----------------------------------------------------------------------

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        run = _CommandRun(command, self._command_timeout(timeout), self.max_output_bytes)
        commands = self.sdk_sandbox.commands
        pid: int | None = None
        try:
            handle = commands.run(run.command, **run.start_kwargs())
            pid = handle.pid
            result = handle.wait(on_stdout=run.output.add, on_stderr=run.output.add)
        except Exception as exc:  # noqa: BLE001 - sorted out by _CommandRun.failed
            response = run.failed(exc)
            if response.timed_out and pid is not None:
                try:
                    commands.run(run.group_kill(pid), timeout=GROUP_KILL_TIMEOUT)
                except Exception as kill_exc:
                    raise typed_error(kill_exc, "kill a timed-out command") from kill_exc
            return response
        return run.response(result.exit_code)

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        run = _CommandRun(command, self._command_timeout(timeout), self.max_output_bytes)
        commands = self.sdk_async_sandbox.commands
        pid: int | None = None
        try:
            handle = await commands.run(
                run.command, on_stdout=run.output.add, on_stderr=run.output.add, **run.start_kwargs()
            )
            pid = handle.pid
            result = await handle.wait()
        except Exception as exc:  # noqa: BLE001 - sorted out by _CommandRun.failed
            response = run.failed(exc)
            if response.timed_out and pid is not None:
                try:
                    await commands.run(run.group_kill(pid), timeout=GROUP_KILL_TIMEOUT)
                except Exception as kill_exc:
                    raise typed_error(kill_exc, "kill a timed-out command") from kill_exc
            return response
        return run.response(result.exit_code)

    # -- native transfers ------------------------------------------------------------------

    def _perform_files(self, operation: FilesOp[T]) -> T:
        files = self.sdk_sandbox.files

        def perform(call: FilesCall) -> Any:
            try:
                return getattr(files, call.method)(*call.args, **call.kwargs)
            except Exception as exc:
                raise typed_error(exc, f"files.{call.method}", path=str(call.args[0])) from exc

        return kernel.run(operation, perform)

    async def _aperform_files(self, operation: FilesOp[T]) -> T:
        files = self.sdk_async_sandbox.files

        async def perform(call: FilesCall) -> Any:
            try:
                return await getattr(files, call.method)(*call.args, **call.kwargs)
            except Exception as exc:
                raise typed_error(exc, f"files.{call.method}", path=str(call.args[0])) from exc

        return await kernel.arun(operation, perform)

    async def _aperform_all(
        self, operations: list[FilesOp[T]], paths: list[str], finished: Callable[[T], None]
    ) -> list[T]:
        """Run ``operations`` with up to ``transfer_concurrency`` in flight, results
        in order. When paths repeat they run one after another, as listed, so the
        last one wins as it would sequentially."""
        if len(set(paths)) < len(paths):
            ordered = []
            for operation in operations:
                ordered.append(await self._aperform_files(operation))
                finished(ordered[-1])
            return ordered
        results: dict[int, T] = {}
        limit = anyio.Semaphore(self.transfer_concurrency)

        async def one(index: int) -> None:
            async with limit:
                results[index] = await self._aperform_files(operations[index])
                finished(results[index])

        async with anyio.create_task_group() as group:
            for index in range(len(operations)):
                group.start_soon(one, index)
        return [results[index] for index in range(len(operations))]

    @staticmethod
    def _report(progress: Progress | None, done: list[int], count: int) -> None:
        """Progress counts each file's bytes once it is done (totals are not known ahead)."""
        done[0] += count
        if progress is not None:
            progress(done[0], done[0])

    def upload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> list[FileUploadResponse]:
        """Upload through ``files.write`` then ``files.rename``: per-file errors, in order."""
        done: list[int] = [0]
        results = []
        for path, data in list(files):
            response, sent = self._perform_files(_upload_one(path, data))
            results.append(response)
            self._report(progress, done, sent)
        return results

    async def aupload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> list[FileUploadResponse]:
        items = list(files)
        done: list[int] = [0]

        def finished(outcome: tuple[FileUploadResponse, int]) -> None:
            self._report(progress, done, outcome[1])

        outcomes = await self._aperform_all(
            [_upload_one(path, data) for path, data in items], [path for path, _ in items], finished
        )
        return [response for response, _ in outcomes]

    def download_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> list[FileDownloadResponse]:
        """Download through ``files.read(format="bytes")``: per-file errors, in order."""
        done: list[int] = [0]
        results = []
        for path in list(paths):
            response = self._perform_files(_download_one(path))
            results.append(response)
            self._report(progress, done, len(response.content or b""))
        return results

    async def adownload_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> list[FileDownloadResponse]:
        wanted = list(paths)
        done: list[int] = [0]

        def finished(response: FileDownloadResponse) -> None:
            self._report(progress, done, len(response.content or b""))

        return await self._aperform_all([_download_one(path) for path in wanted], wanted, finished)

    def __repr__(self) -> str:
        return f"E2BSandbox(id={self.id!r})"


__all__ = ["DEFAULT_TIMEOUT", "E2BSandbox"]
