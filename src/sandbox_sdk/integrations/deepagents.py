"""``DeepAgentsBackend``: any sandbox as the backend of a LangChain ``deepagents`` agent.

``create_deep_agent(model=..., backend=DeepAgentsBackend(sandbox))`` gives the
agent's file tools and its ``execute`` tool one of our sandboxes. Every method
runs the sandbox's own operations (never deepagents' shell templates) and turns
our typed errors into the result objects and ``Error: ...`` strings deepagents
hands to the model, so a failed operation never raises into the agent loop.

deepagents 0.6 and 0.7 disagree on a few points; the adapter follows whichever
protocol is installed (see docs/deepagents.md):

* ``write``: 0.6 refuses an existing file, 0.7 overwrites it.
* ``glob``: 0.6 returns paths relative to the search root, directories
  included, as Python's ``glob`` does; 0.7 returns absolute paths of regular
  files only, and a pattern without ``/`` matches file names at any depth.
* 0.7 adds ``delete``, pagination fields on ``ReadResult``, and
  ``grep(max_count=...)`` with a ``truncated`` flag.
* 0.7.32's ``FilesystemMiddleware`` leaves a large ``execute`` output in a
  file in the sandbox and shows the model a preview ("capture at source"),
  only for backends that are its ``BaseSandbox``; this one is registered as
  one (a virtual subclass: it inherits none of that class's shell
  templates) and implements ``execute_with_offload`` (see its docstring).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import posixpath
from collections.abc import Generator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from sandbox_sdk import _kernel as kernel
from sandbox_sdk import errors
from sandbox_sdk._operations import GREP_EXCLUDE_DIRS
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.integrations import _texts as texts
from sandbox_sdk.models import EditResult, ExecuteResponse, FileInfo, GlobResult, GrepResult, ReadResult
from sandbox_sdk.models import FileDownloadResponse as SdkDownload
from sandbox_sdk.models import FileUploadResponse as SdkUpload
from sandbox_sdk.transfer import transfer_error

try:
    from deepagents.backends import protocol as da
    from deepagents.backends import sandbox as da_sandbox
    from deepagents.backends import utils as da_utils
    from deepagents.backends.sandbox import MAX_BINARY_BYTES, MAX_OUTPUT_BYTES, TRUNCATION_MSG
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "sandbox_sdk.integrations.deepagents needs deepagents: pip install 'sandbox-sdk-py[deepagents]'"
    ) from exc

__all__ = ["PROTOCOL_0_7", "DeepAgentsBackend"]

T = TypeVar("T")
R = TypeVar("R")

#: One sandbox call: the name of a ``BaseSandbox`` method (its async twin is
#: ``"a" + name``) with its positional and keyword arguments.
Step = tuple[str, tuple[Any, ...], dict[str, Any]]
#: An operation written once as a generator of steps, run by
#: :meth:`DeepAgentsBackend._run` or :meth:`DeepAgentsBackend._arun`.
Plan = Generator[Step, Any, T]

_DeleteResult: Any = getattr(da, "DeleteResult", None)
#: The 0.7 protocol is the one that added ``delete``; the same release made
#: ``write`` overwrite and ``glob`` return absolute paths of files only.
PROTOCOL_0_7 = _DeleteResult is not None

_ExecuteOffloadResult: Any = getattr(da, "ExecuteOffloadResult", None)
#: deepagents' capture wrapper and the parser of what it prints (0.7.32): its own contract for
#: offloaded output (the preview's shape and notes, which its middleware describes to the model),
#: so it is used as it is rather than copied.
_build_capture_command: Any = getattr(da_sandbox, "_build_capture_execute_cmd", None)
_parse_capture_output: Any = getattr(da_sandbox, "_parse_capture_execute_output", None)
#: Whether the installed deepagents offloads ``execute`` output (0.7.32 on).
CAPTURE_OFFLOAD = None not in (_ExecuteOffloadResult, _build_capture_command, _parse_capture_output) and (
    hasattr(da_sandbox.BaseSandbox, "execute_with_offload")
)
#: Room kept in the sandbox's output budget, under an inline output, for the
#: wrapper's first line (its marker, exit code and flags).
CAPTURE_META_BYTES = 256

#: How deepagents classifies a path for reading: anything but ``"text"`` (an
#: image, audio, a video, a PDF...) is returned whole, base64-encoded.
_read_file_type = getattr(da_utils, "_get_backend_read_file_type", None) or da_utils._get_file_type
_EMPTY_OLD_STRING_ERROR: str = getattr(
    da_utils,
    "EMPTY_OLD_STRING_ERROR",
    "Error: old_string cannot be empty. Provide the exact text to replace.",
)

#: Match cap of ``grep`` when the caller sets none (deepagents then wants every
#: match; the sandbox's output budget may still cut the list short).
DEFAULT_GREP_MATCHES = 100_000
#: Match cap of ``glob`` under the 0.7 protocol, as in deepagents' own sandbox.
GLOB_MAX_MATCHES = 10_000


def _tool_prefixed(error: str) -> str:
    """An error for deepagents' ``ls``, ``read_file`` and ``glob`` tools, which
    put ``Error: `` before a result's error themselves (the other tools pass
    it on as it is): without ours, so the model reads one."""
    return error.removeprefix("Error: ")


def _path_error(path: object) -> str | None:
    """deepagents paths are absolute; a relative one is refused, never resolved
    against whatever the sandbox's working directory happens to be."""
    if isinstance(path, str) and path.startswith("/"):
        return None
    return f"Error: invalid path {path!r}: paths must be absolute (start with '/')"


def _result(cls: type[R], **values: Any) -> R:
    """``cls(**values)`` without the fields the installed deepagents lacks
    (0.6 has no pagination or truncation fields)."""
    known = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{name: value for name, value in values.items() if name in known})


def _entry(path: str, info: FileInfo) -> da.FileInfo:
    return {
        "path": path,
        "is_dir": info.type == "dir",
        "size": info.size,
        "modified_at": datetime.fromtimestamp(info.mtime, tz=UTC).isoformat(),
    }


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def _crlf(text: str) -> str:
    return _lf(text).replace("\n", "\r\n")


def _line_ending_variants(old: str, new: str) -> list[tuple[str, str]]:
    """``(old, new)`` as given, then both with CRLF, then both with LF endings.

    ``read`` shows a CRLF file with LF endings, so an edit the model builds from
    it must still match, and the replacement keeps the file's own endings."""
    variants: list[tuple[str, str]] = []
    for candidate in ((old, new), (_crlf(old), _crlf(new)), (_lf(old), _lf(new))):
        if all(candidate[0] != seen for seen, _ in variants):
            variants.append(candidate)
    return variants


def _text_page(page: ReadResult, offset: int, limit: int) -> da.ReadResult:
    """A page of our ``read`` as deepagents shows it: lines without their
    endings joined by ``\\n``, cut at ``MAX_OUTPUT_BYTES`` with deepagents' own
    continuation note, and 0.7's pagination fields."""
    raw = page.content.removesuffix("\n")
    lines = [line.removesuffix("\r") for line in raw.split("\n")]
    # Our read stops short of ``limit`` when the page outgrows the sandbox's
    # output budget, and cuts a single line longer than the whole budget.
    cut = page.truncated or (page.has_more and len(lines) < limit)
    room = MAX_OUTPUT_BYTES - len(TRUNCATION_MSG.encode("utf-8"))
    parts: list[str] = []
    used = shown = 0
    for line in lines:
        piece = "\n" + line if parts else line
        size = len(piece.encode("utf-8"))
        if used + size > room:
            cut = True
            prefix = piece.encode("utf-8")[: room - used].decode("utf-8", "ignore")
            if prefix:
                parts.append(prefix)
            break
        parts.append(piece)
        used += size
        shown += 1
    text = "".join(parts) + (TRUNCATION_MSG if cut else "")
    # A cut first line still counts, so that paging always moves forward.
    end_line = offset + max(shown, 1)
    return _result(
        da.ReadResult,
        file_data=da.FileData(content=text, encoding="utf-8"),
        total_lines=page.total_lines,
        start_line=offset + 1,
        end_line=end_line,
        next_offset=end_line if end_line < page.total_lines else None,
    )


class DeepAgentsBackend(da.SandboxBackendProtocol):
    """A ``deepagents`` ``SandboxBackendProtocol`` over any :class:`~sandbox_sdk.BaseSandbox`.

    Sync methods call the sandbox's sync operations and async methods its async
    twins, so a provider with a native async client is never driven through
    threads. Paths must be absolute, as deepagents' tools always send them.
    """

    #: Directory names ``grep`` skips at any depth (never the search root
    #: itself), as deepagents 0.7's ``BaseSandbox.grep_exclude_dirs``: ``.git``
    #: unless a subclass or instance sets others (``()`` searches everything).
    grep_exclude_dirs: Sequence[str] = GREP_EXCLUDE_DIRS
    #: Whether :meth:`execute_with_offload` may leave a large output in a file
    #: in the sandbox (deepagents 0.7.32's ``BaseSandbox.enable_capture_offload``,
    #: off there by default because its wrapper needs a POSIX shell with
    #: ``head``, ``tail`` and ``wc``, which every sandbox of this SDK has).
    enable_capture_offload: bool = True

    def __init__(self, sandbox: BaseSandbox) -> None:
        self.sandbox = sandbox

    @property
    def id(self) -> str:
        return self.sandbox.id

    def __repr__(self) -> str:
        return f"DeepAgentsBackend({self.sandbox!r})"

    # -- drivers --------------------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        """Run a plan with the sandbox's sync operations; their errors go back into it."""
        return kernel.run(plan, lambda step: getattr(self.sandbox, step[0])(*step[1], **step[2]))

    async def _arun(self, plan: Plan[T]) -> T:
        """Run a plan with the sandbox's async operations."""
        return await kernel.arun(plan, lambda step: getattr(self.sandbox, "a" + step[0])(*step[1], **step[2]))

    # -- execute ----------------------------------------------------------------------

    @staticmethod
    def _plan_execute(command: str, timeout: int | None) -> Plan[da.ExecuteResponse]:
        # deepagents lets 0 mean "no timeout" where a backend supports that; a
        # sandbox always has one, so 0 means the sandbox's default, as in run().
        try:
            response: ExecuteResponse = yield ("execute", (command,), {"timeout": timeout or None})
        except errors.SandboxError as exc:
            return da.ExecuteResponse(output=f"Error: the sandbox could not run the command: {exc}")
        output = texts.with_timeout_note(response, timeout)
        return da.ExecuteResponse(output=output, exit_code=response.exit_code, truncated=response.truncated)

    def execute(self, command: str, *, timeout: int | None = None) -> da.ExecuteResponse:
        """Run a shell command; output is stdout and stderr merged."""
        return self._run(self._plan_execute(command, timeout))

    async def aexecute(self, command: str, *, timeout: int | None = None) -> da.ExecuteResponse:
        """Async twin of :meth:`execute`."""
        return await self._arun(self._plan_execute(command, timeout))

    @staticmethod
    def _plan_execute_with_offload(
        command: str,
        capture_path: str,
        max_inline_bytes: int,
        max_capture_bytes: int | None,
        timeout: int | None,
        budget: int,
        enabled: bool,
    ) -> Plan[Any]:
        if _ExecuteOffloadResult is None:
            raise NotImplementedError(
                "execute_with_offload is part of deepagents 0.7.32; it is not installed"
            )
        unwrapped = None
        if not enabled or _path_error(capture_path):
            unwrapped = command
        else:
            # The wrapper cannot tell a capture file it failed to create from an empty
            # output (a read-only root: bwrap's /): create it first, or run unwrapped.
            try:
                yield ("write", (capture_path, ""), {"overwrite": True})
            except errors.SandboxError:
                unwrapped = command
        if unwrapped is not None:
            response = yield from DeepAgentsBackend._plan_execute(unwrapped, timeout)
            return _ExecuteOffloadResult(offloaded=False, response=response)
        # An inline output must come back whole through the sandbox's own output budget.
        wrapper = _build_capture_command(
            command,
            capture_path,
            inline_budget=max(min(max_inline_bytes, budget - CAPTURE_META_BYTES), 0),
            max_capture_bytes=max_capture_bytes,
        )
        try:
            done: ExecuteResponse = yield ("execute", (wrapper,), {"timeout": timeout or None})
        except errors.SandboxError as exc:
            output = f"Error: the sandbox could not run the command: {exc}"
            return _ExecuteOffloadResult(offloaded=False, response=da.ExecuteResponse(output=output))
        if done.timed_out:
            # Killed with the wrapper, before it said anything; the file holds at most what
            # ``head`` had flushed, so it is removed rather than pointed to.
            with contextlib.suppress(errors.SandboxError):
                yield ("delete", (capture_path,), {})
            output = texts.with_timeout_note(done, timeout)
            response = da.ExecuteResponse(output=output, exit_code=done.exit_code, truncated=done.truncated)
            return _ExecuteOffloadResult(offloaded=False, response=response)
        raw = da.ExecuteResponse(output=done.output, exit_code=done.exit_code, truncated=done.truncated)
        return _parse_capture_output(raw)

    def execute_with_offload(
        self,
        command: str,
        capture_path: str,
        *,
        max_inline_bytes: int,
        max_capture_bytes: int | None = None,
        timeout: int | None = None,
    ) -> Any:
        """Run ``command``; an output over ``max_inline_bytes`` is left at
        ``capture_path`` in the sandbox and only a preview comes back
        (deepagents 0.7.32's ``BaseSandbox.execute_with_offload`` contract,
        with its own wrapper): the agent's ``read_file`` pages through the
        whole of it without it passing through the agent's process.

        The file is created first (one more round trip): where it cannot be
        (a read-only path, or ``enable_capture_offload`` off), the command runs
        unwrapped and its whole output comes back (``offloaded=False``), never
        an empty one. An inline output is kept within the sandbox's output budget."""
        return self._run(
            self._plan_execute_with_offload(
                command,
                capture_path,
                max_inline_bytes,
                max_capture_bytes,
                timeout,
                self.sandbox.limits.max_output_bytes,
                self.enable_capture_offload,
            )
        )

    async def aexecute_with_offload(
        self,
        command: str,
        capture_path: str,
        *,
        max_inline_bytes: int,
        max_capture_bytes: int | None = None,
        timeout: int | None = None,
    ) -> Any:
        """Async twin of :meth:`execute_with_offload`."""
        return await self._arun(
            self._plan_execute_with_offload(
                command,
                capture_path,
                max_inline_bytes,
                max_capture_bytes,
                timeout,
                self.sandbox.limits.max_output_bytes,
                self.enable_capture_offload,
            )
        )

    # -- ls -------------------------------------------------------------------------------

    @staticmethod
    def _plan_ls(path: str) -> Plan[da.LsResult]:
        if error := _path_error(path):
            return da.LsResult(error=_tool_prefixed(error))
        try:
            entries: list[FileInfo] = yield ("ls", (path,), {})
        except errors.SandboxError as exc:
            return da.LsResult(error=_tool_prefixed(texts.error_text("list", path, exc)))
        base = path.rstrip("/") or "/"
        return da.LsResult(entries=[_entry(posixpath.join(base, info.name), info) for info in entries])

    def ls(self, path: str) -> da.LsResult:
        return self._run(self._plan_ls(path))

    async def als(self, path: str) -> da.LsResult:
        """Async twin of :meth:`ls`."""
        return await self._arun(self._plan_ls(path))

    # -- read -----------------------------------------------------------------------------

    @staticmethod
    def _plan_read_whole(path: str) -> Plan[da.ReadResult]:
        """A file that is not text, whole and base64-encoded, up to deepagents' preview cap."""
        try:
            data: bytes = yield ("read_bytes", (path,), {"max_bytes": MAX_BINARY_BYTES})
        except errors.OutputLimitExceededError:
            return da.ReadResult(
                error=f"File '{path}': Binary file exceeds maximum preview size of {MAX_BINARY_BYTES} bytes"
            )
        except errors.SandboxError as exc:
            return da.ReadResult(error=_tool_prefixed(texts.error_text("read", path, exc)))
        if not data:
            return da.ReadResult(
                file_data=da.FileData(content=da_utils.EMPTY_CONTENT_WARNING, encoding="utf-8")
            )
        return da.ReadResult(
            file_data=da.FileData(content=base64.b64encode(data).decode("ascii"), encoding="base64")
        )

    @classmethod
    def _plan_read(cls, path: str, offset: int, limit: int) -> Plan[da.ReadResult]:
        if error := _path_error(path):
            return da.ReadResult(error=_tool_prefixed(error))
        # Models send degenerate windows (offset=-1, limit=0): clamp, as deepagents does.
        offset, limit = max(int(offset), 0), max(int(limit), 0)
        if _read_file_type(path) != "text":
            return (yield from cls._plan_read_whole(path))
        try:
            page: ReadResult = yield ("read", (path,), {"offset": offset, "limit": max(limit, 1)})
        except errors.NotTextFileError:
            return (yield from cls._plan_read_whole(path))
        except errors.SandboxError as exc:
            return da.ReadResult(error=_tool_prefixed(texts.error_text("read", path, exc)))
        if page.total_lines == 0:
            return da.ReadResult(
                file_data=da.FileData(content=da_utils.EMPTY_CONTENT_WARNING, encoding="utf-8")
            )
        if limit == 0:
            return _result(
                da.ReadResult, file_data=da.FileData(content="", encoding="utf-8"), no_lines_requested=True
            )
        if offset >= page.total_lines:
            return da.ReadResult(
                error=f"File '{path}': Line offset {offset} exceeds file length ({page.total_lines} lines)"
            )
        return _text_page(page, offset, limit)

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> da.ReadResult:
        """``limit`` lines from line ``offset`` (0-based) of a text file; any
        other file whole, base64-encoded, up to deepagents' preview cap."""
        return self._run(self._plan_read(file_path, offset, limit))

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> da.ReadResult:
        """Async twin of :meth:`read`."""
        return await self._arun(self._plan_read(file_path, offset, limit))

    # -- write / edit / delete -----------------------------------------------------------

    @staticmethod
    def _plan_write(path: str, content: str) -> Plan[da.WriteResult]:
        if error := _path_error(path):
            return da.WriteResult(error=error)
        try:
            yield ("write", (path, content), {"overwrite": PROTOCOL_0_7})
        except errors.SandboxFileExistsError:
            return da.WriteResult(
                error=f"Error: cannot write '{path}': it already exists. "
                "Read it and then edit it, or write to a new path."
            )
        except errors.SandboxError as exc:
            return da.WriteResult(error=texts.error_text("write", path, exc))
        return da.WriteResult(path=path)

    def write(self, file_path: str, content: str) -> da.WriteResult:
        """Create a file, parents included, all or nothing. An existing file is
        refused under the 0.6 protocol and replaced under 0.7."""
        return self._run(self._plan_write(file_path, content))

    async def awrite(self, file_path: str, content: str) -> da.WriteResult:
        """Async twin of :meth:`write`."""
        return await self._arun(self._plan_write(file_path, content))

    @staticmethod
    def _plan_edit(path: str, old: str, new: str, replace_all: bool) -> Plan[da.EditResult]:
        if error := _path_error(path):
            return da.EditResult(error=error)
        if not old:
            return da.EditResult(error=_EMPTY_OLD_STRING_ERROR)
        for old_variant, new_variant in _line_ending_variants(old, new):
            try:
                done: EditResult = yield (
                    "edit",
                    (path, old_variant, new_variant),
                    {"replace_all": replace_all},
                )
            except errors.EditNoMatchError:
                continue
            except errors.EditAmbiguousError as exc:
                return da.EditResult(error=texts.ambiguous_text(path, old, exc.count))
            except errors.SandboxError as exc:
                return da.EditResult(error=texts.error_text("edit", path, exc))
            return da.EditResult(path=path, occurrences=done.replacements)
        return da.EditResult(error=texts.no_match_text(path, old))

    def edit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> da.EditResult:
        """Replace ``old_string`` (exactly one occurrence unless ``replace_all``),
        atomically, inside the sandbox: the file never leaves it."""
        return self._run(self._plan_edit(file_path, old_string, new_string, replace_all))

    async def aedit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> da.EditResult:
        """Async twin of :meth:`edit`."""
        return await self._arun(self._plan_edit(file_path, old_string, new_string, replace_all))

    @staticmethod
    def _plan_delete(path: str) -> Plan[Any]:
        if _DeleteResult is None:
            raise NotImplementedError("delete is part of the deepagents 0.7 protocol; 0.6 is installed")
        if error := _path_error(path):
            return _DeleteResult(error=error)
        if posixpath.normpath(path) == "/":
            return _DeleteResult(error="Error: refusing to delete '/'")
        try:
            yield ("delete", (path,), {"recursive": True})
        except errors.SandboxFileNotFoundError:
            return _DeleteResult(error=f"Error: '{path}' not found")
        except errors.SandboxError as exc:
            return _DeleteResult(error=texts.error_text("delete", path, exc))
        return _DeleteResult(path=path)

    def delete(self, file_path: str) -> Any:
        """Delete a file, or a directory with everything in it (deepagents 0.7).

        Symlinks inside are removed, never followed."""
        return self._run(self._plan_delete(file_path))

    async def adelete(self, file_path: str) -> Any:
        """Async twin of :meth:`delete`."""
        return await self._arun(self._plan_delete(file_path))

    # -- grep / glob -------------------------------------------------------------------

    def _plan_grep(
        self, pattern: str, path: str | None, glob: str | None, max_count: int | None
    ) -> Plan[da.GrepResult]:
        if path is not None and (error := _path_error(path)):
            return da.GrepResult(error=error)
        cap = DEFAULT_GREP_MATCHES if max_count is None else max(int(max_count), 0)
        try:
            # One match past the cap tells "exactly at the cap" from "more exist".
            options = {"glob": glob, "max_matches": cap + 1, "exclude_dirs": self.grep_exclude_dirs}
            found: GrepResult = yield ("grep", (pattern, path), options)
        except errors.SandboxError as exc:
            return da.GrepResult(error=texts.error_text("search", path or ".", exc))
        matches: list[da.GrepMatch] = [
            {"path": match.path, "line": match.line_number, "text": match.line} for match in found.matches
        ]
        return _result(da.GrepResult, matches=matches[:cap], truncated=found.truncated or len(matches) > cap)

    def grep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> da.GrepResult:
        """Lines containing ``pattern`` literally (case-sensitive) in files below
        ``path`` (the sandbox's working directory if omitted). ``glob`` without
        ``/`` filters file names at any depth; with ``/``, paths relative to ``path``."""
        return self._run(self._plan_grep(pattern, path, glob, max_count))

    async def agrep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> da.GrepResult:
        """Async twin of :meth:`grep`."""
        return await self._arun(self._plan_grep(pattern, path, glob, max_count))

    @staticmethod
    def _plan_glob(pattern: str, path: str | None) -> Plan[da.GlobResult]:
        root = path or "/"
        if error := _path_error(root):
            return da.GlobResult(error=_tool_prefixed(error))
        if not PROTOCOL_0_7:
            return (yield from DeepAgentsBackend._plan_glob_0_6(pattern, root))
        return (yield from DeepAgentsBackend._plan_glob_0_7(pattern, root))

    @staticmethod
    def _plan_glob_0_6(pattern: str, root: str) -> Plan[da.GlobResult]:
        """Python ``glob`` semantics: paths relative to ``root``, directories included."""
        try:
            found: GlobResult = yield ("glob", (pattern, root), {})
        except errors.SandboxError as exc:
            return da.GlobResult(error=_tool_prefixed(texts.error_text("search", root, exc)))
        anchored = pattern.startswith("/")
        return da.GlobResult(
            matches=[
                _entry(info.path if anchored else posixpath.relpath(info.path, root), info)
                for info in found.matches
            ]
        )

    @staticmethod
    def _plan_glob_0_7(pattern: str, root: str) -> Plan[da.GlobResult]:
        """deepagents 0.7 semantics: absolute paths of regular files; a pattern
        without ``/`` matches names at any depth (hidden directories included, but
        not hidden names unless the pattern starts with a dot); a leading ``/``
        anchors to ``root``."""
        relative = pattern.lstrip("/")
        if ".." in relative.replace("\\", "/").split("/"):
            return da.GlobResult(error=f"glob pattern {pattern!r} must not contain '..'")
        by_name = "/" not in pattern  # "/*.py" is anchored, not a name pattern
        try:
            found: GlobResult = yield (
                "glob",
                (f"**/{relative}" if by_name else relative, root),
                {"include_hidden": by_name, "max_results": GLOB_MAX_MATCHES},
            )
        except errors.SandboxError as exc:
            return da.GlobResult(error=_tool_prefixed(texts.error_text("search", root, exc)))
        hidden_ok = relative.startswith(".")
        matches = [
            {**_entry(info.path, info), "is_dir": False}
            for info in found.matches
            if info.type == "file" and (hidden_ok or not by_name or not info.name.startswith("."))
        ]
        reason = "unreadable" if found.unreadable else "budget" if found.truncated else None
        return _result(da.GlobResult, matches=matches, truncated=reason is not None, truncation_reason=reason)

    def glob(self, pattern: str, path: str | None = None) -> da.GlobResult:
        """Entries matching ``pattern`` below ``path`` (``/`` if omitted), as the
        installed deepagents protocol defines them (see the module docstring)."""
        return self._run(self._plan_glob(pattern, path))

    async def aglob(self, pattern: str, path: str | None = None) -> da.GlobResult:
        """Async twin of :meth:`glob`."""
        return await self._arun(self._plan_glob(pattern, path))

    # -- transfers ---------------------------------------------------------------------

    @staticmethod
    def _plan_upload(files: Sequence[tuple[str, bytes]]) -> Plan[list[da.FileUploadResponse]]:
        results: list[da.FileUploadResponse | None] = [None] * len(files)
        batch: list[tuple[int, str, bytes]] = []
        for index, (path, content) in enumerate(files):
            if _path_error(path):
                results[index] = da.FileUploadResponse(path=path, error="invalid_path")
            elif not isinstance(content, bytes | bytearray | memoryview):
                # Our upload_files would read a str as a *local* file path.
                results[index] = da.FileUploadResponse(path=path, error="content must be bytes")
            else:
                batch.append((index, path, bytes(content)))
        if batch:
            try:
                done: list[SdkUpload] = yield ("upload_files", ([(p, c) for _, p, c in batch],), {})
            except errors.SandboxError as exc:
                done = [SdkUpload(path=p, error=transfer_error(exc)) for _, p, _ in batch]
            for (index, path, _), response in zip(batch, done, strict=True):
                results[index] = da.FileUploadResponse(path=path, error=response.error)
        return [result for result in results if result is not None]

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[da.FileUploadResponse]:
        """Write each ``(path, bytes)``, replacing files and creating parents; one
        response per file, in order, with a deepagents error code on failure."""
        return self._run(self._plan_upload(files))

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[da.FileUploadResponse]:
        """Async twin of :meth:`upload_files`."""
        return await self._arun(self._plan_upload(files))

    @staticmethod
    def _plan_download(paths: Sequence[str]) -> Plan[list[da.FileDownloadResponse]]:
        results: list[da.FileDownloadResponse | None] = [None] * len(paths)
        batch: list[tuple[int, str]] = []
        for index, path in enumerate(paths):
            if _path_error(path):
                results[index] = da.FileDownloadResponse(path=path, error="invalid_path")
            else:
                batch.append((index, path))
        if batch:
            try:
                done: list[SdkDownload] = yield ("download_files", ([p for _, p in batch],), {})
            except errors.SandboxError as exc:
                done = [SdkDownload(path=p, error=transfer_error(exc)) for _, p in batch]
            for (index, path), response in zip(batch, done, strict=True):
                results[index] = da.FileDownloadResponse(
                    path=path, content=response.content, error=response.error
                )
        return [result for result in results if result is not None]

    def download_files(self, paths: list[str]) -> list[da.FileDownloadResponse]:
        """Read each path whole: one response per path, in order, with the bytes
        or a deepagents error code."""
        return self._run(self._plan_download(paths))

    async def adownload_files(self, paths: list[str]) -> list[da.FileDownloadResponse]:
        """Async twin of :meth:`download_files`."""
        return await self._arun(self._plan_download(paths))


if CAPTURE_OFFLOAD:
    # FilesystemMiddleware offloads ``execute`` output only for an ``isinstance(backend,
    # BaseSandbox)``: registered, not subclassed, so none of its shell templates is inherited.
    da_sandbox.BaseSandbox.register(DeepAgentsBackend)
