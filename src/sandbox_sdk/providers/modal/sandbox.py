"""``ModalSandbox``: a :class:`~sandbox_sdk.BaseSandbox` on one ``modal.Sandbox``."""

from __future__ import annotations

import math
import os
import posixpath
import shlex
import time
from collections.abc import AsyncIterable, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import modal

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from sandbox_sdk.provider_kit import (
    TIMEOUT_EXIT_CODE,
    NativeRequest,
    Operation,
    Pipeline,
    Progress,
    UploadSource,
    check_path,
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
        """Wait until the stream closes or no output arrived for ``idle`` seconds."""
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

    max_command_bytes = MODAL_ARG_MAX - len("bash") - len("-c") - len(PRELUDE) - 512

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
        self.max_output_bytes = max_output_bytes
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
        seconds = self.timeout if timeout is None else timeout
        if seconds <= 0:
            raise errors.InvalidArgumentError(f"timeout must be positive, not {seconds!r}")
        return max(1, math.ceil(seconds))

    def _check_command(self, command: str) -> str:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        if len(command.encode("utf-8")) > self.max_command_bytes:
            raise errors.InvalidArgumentError(
                f"command of {len(command.encode('utf-8'))} bytes exceeds max_command_bytes="
                f"{self.max_command_bytes} (Modal caps exec arguments at 64 KiB)"
            )
        return PRELUDE + command

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
        output = _Output(self.max_output_bytes)
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
            response = yield ShellCommand("pwd", self.operation_timeout)
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
        """``path`` made absolute, after the checks every transfer path gets."""
        check_path(path)
        return posixpath.normpath(posixpath.join(workdir, path))

    def _perform(self, request: Any) -> Any:
        if isinstance(request, FilesystemCall):
            with translate_errors(request.what, path=request.path):
                return getattr(self.sandbox.filesystem, request.method)(*request.args)
        if isinstance(request, ShellCommand):
            return self.execute(request.command, timeout=request.timeout)
        return super()._perform(request)

    async def _aperform(self, request: Any) -> Any:
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
        yield Pipeline(stages, _ignore, self.transfer_concurrency)
        for command in plan.commit_commands(self.max_command_bytes):
            plan.committed((yield ShellCommand(command, self.operation_timeout)))
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
        yield Pipeline(reads, downloads.done, self.transfer_concurrency)
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
