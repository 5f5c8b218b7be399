"""What the model reads, shared by the integrations (no framework imported
here): the ``Error: ...`` texts for failures, and plain-text renderings of
results (numbered lines, one path per line), so an agent moving between the
deepagents backend and the MCP server sees the same words."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from sandbox_sdk import errors
from sandbox_sdk.models import ExecuteResponse, FileInfo, GlobResult, GrepResult, ProcessOutput, ReadResult

#: The reason shown for each typed error, as the deepagents backend words it.
_REASONS: tuple[tuple[type[errors.SandboxError], str], ...] = (
    (errors.SandboxFileNotFoundError, "not found"),
    (errors.SandboxIsADirectoryError, "is a directory"),
    (errors.SandboxNotADirectoryError, "not a directory (or a parent is a file)"),
    (errors.SandboxPermissionError, "permission denied"),
    (errors.SandboxFileExistsError, "already exists"),
    (errors.NotTextFileError, "not a UTF-8 text file"),
)
#: The same reasons for the per-file codes of ``upload_files``.
_CODE_REASONS = {
    "file_not_found": "not found",
    "is_directory": "is a directory",
    "permission_denied": "permission denied",
    "invalid_path": "invalid path",
}
EMPTY_OLD_STRING = "Error: old_string cannot be empty. Provide the exact text to replace."
EMPTY_FILE = "System reminder: File exists but has empty contents"


def error_text(action: str, path: str, exc: errors.SandboxError) -> str:
    """The one line the model sees when an operation fails: what, where and why."""
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return f"Error: cannot {action} '{path}': {reason}"
    return f"Error: cannot {action} '{path}': {exc}"


def code_text(action: str, path: str, code: str) -> str:
    """:func:`error_text` for a transfer's per-file error code."""
    return f"Error: cannot {action} '{path}': {_CODE_REASONS.get(code, code)}"


def local_error_text(action: str, path: str, exc: OSError) -> str:
    """A failure on the client's side of a transfer (a local file)."""
    return f"Error: cannot {action} '{path}': {exc.strerror or exc}"


def exists_text(path: str) -> str:
    return (
        f"Error: cannot write '{path}': it already exists. Read it and then edit it, or write to a new path."
    )


def local_exists_text(path: str) -> str:
    return f"Error: cannot write '{path}': it already exists. Pass overwrite=true to replace it."


def no_match_text(path: str, old: str) -> str:
    return f"Error: String not found in file '{path}': '{old}'"


def ambiguous_text(path: str, old: str, count: int) -> str:
    return (
        f"Error: String '{old}' appears multiple times ({count}) in '{path}'. "
        "Use replace_all=True to replace all occurrences, or include more context."
    )


def with_timeout_note(response: ExecuteResponse, timeout: int | None) -> str:
    """The command's output, with a note on its own line if it was killed at its timeout."""
    output = response.output
    if response.timed_out:
        limit = f"after {timeout} seconds" if timeout else "at the sandbox's default timeout"
        note = f"Error: Command timed out {limit} and was killed."
        output = f"{output}\n{note}" if output and not output.endswith("\n") else output + note
    return output


def execute_text(response: ExecuteResponse, timeout: int | None) -> str:
    """Output, then the timeout note and exit status as deepagents' ``execute`` tool shows them."""
    parts = [with_timeout_note(response, timeout)]
    if response.exit_code is not None:
        status = "succeeded" if response.exit_code == 0 else "failed"
        parts.append(f"\n[Command {status} with exit code {response.exit_code}]")
    if response.truncated:
        parts.append("\n[Output was truncated due to size limits]")
    return "".join(parts)


def page_text(path: str, page: ReadResult, offset: int) -> tuple[str, bool]:
    """A page of a text file with ``cat -n`` line numbers and a note on how to
    read on; ``(text, is_error)``, an error when ``offset`` is past the end."""
    if page.total_lines == 0:
        return EMPTY_FILE, False
    if offset >= page.total_lines:
        past = f"Line offset {offset} exceeds file length ({page.total_lines} lines)"
        return f"Error: File '{path}': {past}", True
    lines = page.content.removesuffix("\n").split("\n")
    text = "\n".join(f"{page.start_line + index:6d}\t{line}" for index, line in enumerate(lines))
    if page.truncated:
        text += f"\n[Line {page.end_line} is longer than one page and was cut.]"
    if page.has_more:
        text += (
            f"\n[Lines {page.start_line}-{page.end_line} of {page.total_lines}. "
            f"To read more, call read_file with offset={page.end_line}.]"
        )
    return text, False


def _entry_line(path: str, info: FileInfo) -> str:
    return path + "/" if info.type == "dir" else path


def listing_text(path: str, entries: Sequence[FileInfo]) -> str:
    """One path per line, directories ending in ``/``."""
    if not entries:
        return f"'{path}' is empty"
    return "\n".join(_entry_line(posixpath.normpath(posixpath.join(path, e.name)), e) for e in entries)


def _notes(truncated: str | None, unreadable: Sequence[str]) -> list[str]:
    notes = [truncated] if truncated else []
    if unreadable:
        notes.append("[Could not read: " + ", ".join(unreadable) + "]")
    return notes


def glob_text(pattern: str, found: GlobResult) -> str:
    lines = [_entry_line(info.path, info) for info in found.matches] or [f"No files match '{pattern}'"]
    more = "[More matches exist: narrow the pattern or the path.]" if found.truncated else None
    return "\n".join(lines + _notes(more, found.unreadable))


def grep_text(pattern: str, found: GrepResult) -> str:
    """``path:line:text`` per match, as ``grep -n`` prints them."""
    lines = [
        f"{match.path}:{match.line_number}:{match.line}" + (" [line cut]" if match.line_truncated else "")
        for match in found.matches
    ] or [f"No matches for '{pattern}'"]
    more = "[More matches exist: narrow the pattern, the path or the glob.]" if found.truncated else None
    notes = _notes(more, found.unreadable)
    if found.skipped_binary:
        notes.append(f"[{found.skipped_binary} binary files hold matches that are not shown.]")
    return "\n".join(lines + notes)


def process_output_text(pid: int, page: ProcessOutput) -> str:
    """A page of a background process's output, with where to read on and its exit."""
    output = page.stdout.decode("utf-8", "replace")
    if page.stderr:
        output += "\n[stderr]\n" + page.stderr.decode("utf-8", "replace")
    state = "still running" if page.exit_code is None else f"exited with code {page.exit_code}"
    more = "; more output is waiting" if page.has_more else ""
    return f"{output}\n[process {pid} {state}; next_offset={page.next_offset}{more}]"
