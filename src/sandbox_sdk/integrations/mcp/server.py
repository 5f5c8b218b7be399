"""The MCP server: one sandbox's operations as tools, its files as resources.

Built on the official SDK's ``MCPServer``, not its low-level ``Server``: tool
schemas come from the signatures below, and its resolvers ask the client for
its roots on both protocol eras (a ``roots/list`` request mid-call before
2026-07-28, an input-required round after), which the low-level server would
leave to us.

Every tool returns a result and never raises: a failure is a result with
``isError`` set whose text is the deepagents backend's ``Error: ...`` line.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import mimetypes
import secrets
import time
from collections.abc import Callable, Iterable
from functools import partial
from types import TracebackType
from typing import Annotated, Any, Self

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.resolve import Resolve
from mcp.server.mcpserver.resources import ResourceSecurity
from mcp.types import CallToolResult, InputRequiredResult, ListRootsResult, TextContent, ToolAnnotations
from pydantic import AnyUrl, Field

from sandbox_sdk import PIPE, errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.integrations import _texts as texts
from sandbox_sdk.integrations.mcp._roots import OutsideRootsError, ask_client_roots, inside_roots, root_dirs
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.transfer._sources import open_regular

#: Label of a sandbox made for one server session (its value is random).
SESSION_LABEL = "mcp-session"
#: Seconds between the progress notifications of a running command.
PROGRESS_INTERVAL = 5.0
DEFAULT_READ_LINES = 2000
#: Largest file served as a resource; the ``download`` tool has no limit.
RESOURCE_MAX_BYTES = 16 * 1024 * 1024
RESOURCE_TEMPLATE = "sandbox://{+path}"
INSTRUCTIONS = (
    "Every tool acts inside one sandbox: a separate machine or jail, not the client's computer. "
    "Relative paths are relative to the sandbox's working directory. upload and download copy "
    "files between the client's declared roots and the sandbox. Files can also be read as "
    "resources: sandbox:///absolute/path or sandbox://relative/path."
)

#: The client's roots, filled by the SDK before a transfer tool runs (not a tool argument).
ClientRoots = Annotated[ListRootsResult, Resolve(ask_client_roots)]
Path_ = Annotated[str, Field(description="A sandbox path: absolute, or relative to the working directory")]
LocalPath = Annotated[str, Field(description="An absolute path on the client's machine, under a root")]


def _result(text: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


class SandboxSource:
    """The one sandbox a server works in, opened on first use (listing tools
    starts nothing) and deleted at close if it was made here for this session.

    With ``sandbox_id`` or ``labels`` the sandbox is found (or, for labels,
    created) with ``get_or_create`` and kept; without, a new one is made with a
    random :data:`SESSION_LABEL`, and deleted at close unless ``keep``."""

    def __init__(
        self,
        provider: SandboxProvider[Any],
        *,
        sandbox_id: str | None = None,
        labels: dict[str, str] | None = None,
        keep: bool = False,
    ) -> None:
        self.provider = provider
        self.sandbox_id = sandbox_id
        self.labels = dict(labels or {})
        self.keep = keep
        self._sandbox: BaseSandbox | None = None
        self._owned = False
        self._lock = anyio.Lock()

    async def get(self) -> BaseSandbox:
        """The sandbox, connected to or created on first use (once, under a lock)."""
        async with self._lock:
            if self._sandbox is None:
                self._sandbox = await self._open()
        return self._sandbox

    async def _open(self) -> BaseSandbox:
        sandbox: BaseSandbox
        if self.sandbox_id is not None or self.labels:
            sandbox = await self.provider.aget_or_create(
                sandbox_id=self.sandbox_id, labels=self.labels or None
            )
            return sandbox
        sandbox = await self.provider.acreate(labels={SESSION_LABEL: secrets.token_hex(8)})
        self._owned = not self.keep
        return sandbox

    async def aclose(self) -> None:
        """Delete the sandbox if it belongs to this session; safe to call twice."""
        with anyio.CancelScope(shield=True):
            if self._owned and self._sandbox is not None:
                self._owned = False
                await self.provider.adelete(sandbox_id=self._sandbox.id)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class SandboxTools:
    """The tools and the resource reader, over a sandbox or a :class:`SandboxSource`."""

    def __init__(self, sandbox: BaseSandbox | SandboxSource, progress_interval: float) -> None:
        self.target = sandbox
        self.progress_interval = progress_interval

    async def _sandbox(self) -> BaseSandbox:
        return self.target if isinstance(self.target, BaseSandbox) else await self.target.get()

    # -- execute -----------------------------------------------------------------

    async def execute(
        self,
        command: Annotated[str, Field(description="A bash command line")],
        timeout: Annotated[
            int | None, Field(ge=0, description="Seconds before it is killed; 0 or none: the default")
        ] = None,
        *,
        ctx: Context[Any, Any],
    ) -> CallToolResult:
        """Run a shell command in the sandbox; returns its output (stdout and stderr
        merged) and exit code. A command past its timeout is killed with everything
        it started. Progress notifications mark its start, every few seconds while it
        runs, and its end (progress is the seconds elapsed)."""
        started = time.monotonic()
        await ctx.report_progress(0, None, "started")
        async with anyio.create_task_group() as group:
            group.start_soon(self._report_running, ctx, started)
            result = await self._run(command, timeout)
            group.cancel_scope.cancel()
        elapsed = time.monotonic() - started
        await ctx.report_progress(elapsed, elapsed, "finished")
        return result

    async def _report_running(self, ctx: Context[Any, Any], started: float) -> None:
        while True:
            await anyio.sleep(self.progress_interval)
            elapsed = time.monotonic() - started
            await ctx.report_progress(elapsed, None, f"running for {elapsed:.0f} s")

    async def _run(self, command: str, timeout: int | None) -> CallToolResult:
        try:
            response = await (await self._sandbox()).aexecute(command, timeout=timeout or None)
        except errors.SandboxError as exc:
            return _result(f"Error: the sandbox could not run the command: {exc}", error=True)
        return _result(texts.execute_text(response, timeout), error=response.timed_out)

    # -- background processes -------------------------------------------------------

    async def start_process(
        self, command: Annotated[str, Field(description="A bash command line, run in the background")]
    ) -> CallToolResult:
        """Start a command in the background (a dev server, a watch loop, a long
        build) with its stdin open; returns its pid, for read_process_output,
        write_process_stdin and kill_process. It outlives this call."""
        try:
            process = await (await self._sandbox()).astart(command, stdin=PIPE)
        except errors.SandboxError as exc:
            return _result(f"Error: cannot start the command: {exc}", error=True)
        return _result(f"Started process {process.pid}")

    async def read_process_output(
        self,
        pid: Annotated[int, Field(ge=1, description="The pid start_process returned")],
        since: Annotated[int, Field(ge=0, description="Offset to read from: 0, or the last next_offset")] = 0,
    ) -> CallToolResult:
        """Output of a background process written after offset `since` (its stdout,
        then its stderr), what there is now, with the offset to read on from and its
        exit code once it has ended."""
        try:
            process = await (await self._sandbox()).aprocess(pid)
            page = await process.aread(since)
        except errors.SandboxError as exc:
            return _result(f"Error: cannot read process {pid}: {exc}", error=True)
        return _result(texts.process_output_text(pid, page))

    async def write_process_stdin(
        self,
        pid: Annotated[int, Field(ge=1, description="The pid start_process returned")],
        data: Annotated[str, Field(description="Text to write to its stdin (add a newline to end a line)")],
        close: Annotated[bool, Field(description="Close its stdin afterwards (end of input)")] = False,
    ) -> CallToolResult:
        """Write text to the stdin of a process started by start_process."""
        try:
            process = await (await self._sandbox()).aprocess(pid)
            await process.awrite_stdin(data)
            if close:
                await process.aclose_stdin()
        except errors.SandboxError as exc:
            return _result(f"Error: cannot write to process {pid}: {exc}", error=True)
        return _result(
            f"Wrote {len(data.encode())} bytes to process {pid}" + (" and closed its stdin" if close else "")
        )

    async def kill_process(
        self, pid: Annotated[int, Field(ge=1, description="The pid start_process returned")]
    ) -> CallToolResult:
        """Stop a background process and everything it started (SIGTERM, then
        SIGKILL if it does not end); returns its exit code."""
        try:
            process = await (await self._sandbox()).aprocess(pid)
            await process.akill()
            code = await process.apoll()
        except errors.SandboxError as exc:
            return _result(f"Error: cannot kill process {pid}: {exc}", error=True)
        return _result(f"Process {pid} ended with exit code {code}")

    # -- files --------------------------------------------------------------------

    async def ls(self, path: Path_ = ".") -> CallToolResult:
        """List a directory of the sandbox: one path per line, directories ending in '/'."""
        try:
            entries = await (await self._sandbox()).als(path)
        except errors.SandboxError as exc:
            return _result(texts.error_text("list", path, exc), error=True)
        return _result(texts.listing_text(path, entries))

    async def read_file(
        self,
        path: Path_,
        offset: Annotated[int, Field(ge=0, description="First line to read, 0-based")] = 0,
        limit: Annotated[int, Field(ge=1, description="Most lines to read")] = DEFAULT_READ_LINES,
    ) -> CallToolResult:
        """Read a page of a UTF-8 text file, with line numbers (cat -n). A note at
        the end says when more lines follow and which offset reads them."""
        try:
            page = await (await self._sandbox()).aread(path, offset=offset, limit=limit)
        except errors.SandboxError as exc:
            return _result(texts.error_text("read", path, exc), error=True)
        text, failed = texts.page_text(path, page, offset)
        return _result(text, error=failed)

    async def write_file(
        self,
        path: Path_,
        content: str,
        overwrite: Annotated[bool, Field(description="Replace the file if it exists")] = False,
    ) -> CallToolResult:
        """Create a text file (and its parent directories), all or nothing. An
        existing file is refused unless overwrite is true."""
        try:
            await (await self._sandbox()).awrite(path, content, overwrite=overwrite)
        except errors.SandboxFileExistsError:
            return _result(texts.exists_text(path), error=True)
        except errors.SandboxError as exc:
            return _result(texts.error_text("write", path, exc), error=True)
        return _result(f"Updated file {path}")

    async def edit_file(
        self,
        path: Path_,
        old_string: Annotated[str, Field(description="The exact text to replace")],
        new_string: str,
        replace_all: Annotated[bool, Field(description="Replace every occurrence")] = False,
    ) -> CallToolResult:
        """Replace old_string with new_string in a file, atomically: exactly one
        occurrence must exist unless replace_all is true."""
        if not old_string:
            return _result(texts.EMPTY_OLD_STRING, error=True)
        try:
            done = await (await self._sandbox()).aedit(path, old_string, new_string, replace_all=replace_all)
        except errors.EditNoMatchError:
            return _result(texts.no_match_text(path, old_string), error=True)
        except errors.EditAmbiguousError as exc:
            return _result(texts.ambiguous_text(path, old_string, exc.count), error=True)
        except errors.SandboxError as exc:
            return _result(texts.error_text("edit", path, exc), error=True)
        return _result(f"Successfully replaced {done.replacements} instance(s) of the string in '{path}'")

    # -- search -------------------------------------------------------------------

    async def glob(
        self,
        pattern: Annotated[str, Field(description="*, ?, [...], {a,b} and ** (any depth)")],
        path: Annotated[str | None, Field(description="Where to search; none: the working directory")] = None,
    ) -> CallToolResult:
        """Find files and directories by name pattern, one path per line (relative
        to the working directory when no path is given), directories ending in '/'."""
        try:
            found = await (await self._sandbox()).aglob(pattern, path)
        except errors.SandboxError as exc:
            return _result(texts.error_text("search", path or ".", exc), error=True)
        return _result(texts.glob_text(pattern, found))

    async def grep(
        self,
        pattern: str,
        path: Annotated[str | None, Field(description="Where to search; none: the working directory")] = None,
        glob: Annotated[str | None, Field(description="Only files whose names match this pattern")] = None,
        regex: Annotated[bool, Field(description="pattern is a Python regular expression")] = False,
        ignore_case: bool = False,
        max_matches: Annotated[int, Field(ge=1)] = 1000,
    ) -> CallToolResult:
        """Find lines containing pattern (literal unless regex) in text files;
        one 'path:line:text' per match. Binary files are skipped."""
        try:
            sandbox = await self._sandbox()
            found = await sandbox.agrep(
                pattern,
                path,
                glob=glob,
                fixed_strings=not regex,
                ignore_case=ignore_case,
                max_matches=max_matches,
            )
        except errors.SandboxError as exc:
            return _result(texts.error_text("search", path or ".", exc), error=True)
        return _result(texts.grep_text(pattern, found))

    # -- transfers with the client's machine -------------------------------------------

    async def upload(self, local_path: LocalPath, sandbox_path: Path_, roots: ClientRoots) -> CallToolResult:
        """Copy a file from the client's machine (under one of its roots) into the
        sandbox, replacing any file there and creating parent directories."""
        try:
            source = inside_roots(local_path, root_dirs(roots))
        except OutsideRootsError as exc:
            return _result(str(exc), error=True)
        try:
            # Opened in a worker thread, without blocking and without following
            # a link put there since the check: a FIFO or a device under a
            # root is refused at once rather than stalling every other tool.
            stream = await anyio.to_thread.run_sync(partial(open_regular, source, follow_symlinks=False))
            with stream:
                (done,) = await (await self._sandbox()).aupload_files([(sandbox_path, stream)])
        except errors.SandboxError as exc:  # before OSError: some typed errors are OSErrors too
            return _result(texts.error_text("upload to", sandbox_path, exc), error=True)
        except OSError as exc:
            return _result(texts.local_error_text("read", local_path, exc), error=True)
        if done.error is not None:
            return _result(texts.code_text("upload to", sandbox_path, done.error), error=True)
        return _result(f"Uploaded {local_path} to {sandbox_path}")

    async def download(
        self,
        sandbox_path: Path_,
        local_path: LocalPath,
        roots: ClientRoots,
        overwrite: Annotated[bool, Field(description="Replace the local file if it exists")] = False,
    ) -> CallToolResult:
        """Copy a file from the sandbox to the client's machine (under one of its
        roots), whole or not at all."""
        try:
            target = inside_roots(local_path, root_dirs(roots))
        except OutsideRootsError as exc:
            return _result(str(exc), error=True)
        if target.exists() and not overwrite:
            return _result(texts.local_exists_text(local_path), error=True)
        try:
            size = await (await self._sandbox()).adownload_file(sandbox_path, target)
        except errors.SandboxError as exc:
            return _result(texts.error_text("download", sandbox_path, exc), error=True)
        except OSError as exc:
            return _result(texts.local_error_text("write", local_path, exc), error=True)
        return _result(f"Downloaded {sandbox_path} to {local_path} ({size} bytes)")

    # -- resources -----------------------------------------------------------------------

    async def read_resource(self, path: str) -> str | bytes:
        """A file of the sandbox: text if it is UTF-8, else bytes (a blob)."""
        try:
            data = await (await self._sandbox()).aread_bytes(path, max_bytes=RESOURCE_MAX_BYTES)
        except errors.OutputLimitExceededError as exc:
            raise ResourceError(
                f"Error: cannot read '{path}': larger than {RESOURCE_MAX_BYTES} bytes; use the download tool"
            ) from exc
        except errors.SandboxError as exc:
            raise ResourceError(texts.error_text("read", path, exc)) from exc
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data


class _SandboxServer(MCPServer[Any]):
    """``MCPServer`` with a MIME type per file: a template declares one type for
    every resource it serves, and sandbox files are of every type."""

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        contents = await super().read_resource(uri, context)
        if isinstance(contents, InputRequiredResult):
            return contents
        return [dataclasses.replace(item, mime_type=_mime_type(str(uri), item.content)) for item in contents]


def _version() -> str:
    """The installed sandbox-sdk-py's version, the server's ``serverInfo.version``."""
    try:
        return importlib.metadata.version("sandbox-sdk-py")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "0+unknown"


def _mime_type(uri: str, content: str | bytes) -> str:
    guessed = mimetypes.guess_type(uri)[0]
    return guessed or ("text/plain" if isinstance(content, str) else "application/octet-stream")


def create_server(
    sandbox: BaseSandbox | SandboxSource,
    *,
    name: str = "sandbox",
    progress_interval: float = PROGRESS_INTERVAL,
) -> MCPServer[Any]:
    """An MCP server whose tools and resources act in ``sandbox``.

    Serve it with ``run_stdio_async()`` or its streamable HTTP app, or connect
    the SDK's ``mcp.Client`` to it in-process. A :class:`SandboxSource` is not
    closed here: close it (``async with``) when serving ends."""
    server = _SandboxServer(name, instructions=INSTRUCTIONS, log_level="WARNING", version=_version())
    tools = SandboxTools(sandbox, progress_interval)
    read_only: list[Callable[..., Any]] = [
        tools.ls,
        tools.read_file,
        tools.glob,
        tools.grep,
        tools.read_process_output,
    ]
    for tool in read_only:
        server.add_tool(tool, annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
    # Adding to the sandbox (a new file, a new process, a downloaded copy): nothing overwritten by default.
    for tool in (tools.start_process, tools.upload, tools.download):
        server.add_tool(tool, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    # What may change or end what is there: a command can do anything, a write or edit replaces
    # content, a kill ends a process, stdin drives it.
    for tool in (
        tools.execute,
        tools.write_file,
        tools.edit_file,
        tools.write_process_stdin,
        tools.kill_process,
    ):
        server.add_tool(tool, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
    server.resource(
        RESOURCE_TEMPLATE,
        name="sandbox-file",
        description="A file of the sandbox: text if it is UTF-8, else a blob",
        security=ResourceSecurity(exempt_params={"path"}),  # the sandbox is the boundary
    )(tools.read_resource)
    return server
