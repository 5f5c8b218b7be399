"""Result types returned by sandbox operations (pydantic models)."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox_sdk import errors

FileType = Literal["file", "dir", "symlink", "other"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


#: Exit code of a command killed at its timeout (as timeout(1) reports it), with
#: ``timed_out=True``: one value on every provider.
TIMEOUT_EXIT_CODE = 124


class ExecuteResponse(_Model):
    """What one command produced: the provider's whole contract."""

    output: str = Field(description="stdout and stderr merged, as an agent sees them")
    exit_code: int | None = Field(description="None when the command never finished")
    truncated: bool = Field(default=False, description="output was cut at the provider's cap")
    timed_out: bool = Field(default=False, description="the command was killed at its timeout")


class RunResult(ExecuteResponse):
    """What a command produced, its two streams kept apart (``output`` still
    has both, in the order they arrived, for callers of ``execute``'s shape).

    Text is decoded from UTF-8 with ``errors="replace"``; ``truncated`` says
    the streams were cut at the sandbox's ``max_output_bytes``, together."""

    stdout: str = ""
    stderr: str = ""


#: The stream a piece of output came on.
StreamName = Literal["stdout", "stderr"]


class ProcessOutput(_Model):
    """Output of a background process from one position of its merged stream."""

    stdout: bytes = Field(description="stdout bytes written after the position asked for")
    stderr: bytes = Field(description="stderr bytes written after the position asked for")
    next_offset: int = Field(description="pass it as `since` to read on from here")
    has_more: bool = Field(default=False, description="more output is waiting past this page")
    exit_code: int | None = Field(
        default=None, description="set once the process ended and this page holds the last of its output"
    )
    timed_out: bool = False


class ProcessInfo(_Model):
    """A background process known to the sandbox (see ``BaseSandbox.processes``)."""

    pid: int = Field(description="the command's pid, also its process group's id")
    command: str
    started_at: datetime
    running: bool = Field(description="false once it ended, or if it was lost (killed with its supervisor)")
    exit_code: int | None = Field(description="None while it runs, or if it was lost")
    timed_out: bool = False


class StreamEvent(_Model):
    """One event of ``BaseSandbox.stream`` or ``Process.stream``: a piece of
    text on a stream, or the exit."""

    kind: Literal["stdout", "stderr", "exit"]
    text: str = Field(default="", description="for stdout and stderr events")
    exit_code: int | None = Field(default=None, description="for the exit event")
    timed_out: bool = False
    next_offset: int | None = Field(
        default=None,
        description="of a Process's stream: the position in its merged output after this event's bytes "
        "(pass it as `since` to follow on from here)",
    )


class FileEvent(_Model):
    """One change ``BaseSandbox.watch`` saw (docs/watch.md): ``created``,
    ``modified``, ``deleted``, or ``moved`` (to ``dest``), coalesced per path
    over the debounce; first ``watching`` (with the ``method``: ``inotify``,
    or ``polling`` where inotify cannot be had), and ``overflow`` where the
    kernel dropped events (the tree may have changed in ways not reported)."""

    kind: Literal["watching", "created", "modified", "deleted", "moved", "overflow"]
    path: str = Field(description="the path that changed (its source for moved), decoded as os.fsdecode does")
    dest: str | None = Field(default=None, description="where a moved path went")
    method: Literal["inotify", "polling"] | None = Field(default=None, description="of the watching event")


class Stdin(enum.Enum):
    """What ``start(stdin=...)`` takes besides data: :data:`PIPE`."""

    PIPE = "pipe"


#: ``start(command, stdin=PIPE)``: the process's stdin stays open for
#: ``Process.write_stdin`` until ``Process.close_stdin``.
PIPE = Stdin.PIPE
#: Largest rows or columns of a terminal (``struct winsize`` holds 16 bits).
PTY_SIZE_MAX = 65535


@dataclass(frozen=True)
class PtySize:
    """A terminal's window size, for ``start(command, pty=PtySize(rows=24, cols=80))``
    and ``Process.resize``: each from 1 to 65535, else ``InvalidArgumentError``."""

    rows: int = 24
    cols: int = 80

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= PTY_SIZE_MAX:
                raise errors.InvalidArgumentError(
                    f"{name} must be an int from 1 to {PTY_SIZE_MAX}, not {value!r}"
                )


class FileInfo(_Model):
    """One directory entry, as ``lstat`` sees it (a symlink is not followed).

    ``path`` is decoded with ``surrogateescape``, as ``os.fsdecode`` does, so a
    name that is not UTF-8 still round-trips when passed back to the SDK."""

    path: str
    name: str
    type: FileType
    size: int
    mtime: float
    mode: int = Field(description="permission bits, e.g. 0o644")


class DirectoryListing(_Model):
    path: str
    entries: list[FileInfo]


class ReadResult(_Model):
    """A page of a text file, by lines."""

    path: str
    content: str = Field(description="the lines exactly as stored, line endings included")
    start_line: int = Field(description="1-based number of the first line in the page")
    end_line: int = Field(description="number of the last line in the page (start_line - 1 if empty)")
    total_lines: int
    has_more: bool
    truncated: bool = Field(default=False, description="a single line exceeded the output budget and was cut")


class WriteResult(_Model):
    path: str
    bytes_written: int


class EditResult(_Model):
    path: str
    replacements: int


class GlobResult(_Model):
    matches: list[FileInfo]
    truncated: bool = Field(description="more matches exist than were returned")
    unreadable: list[str] = Field(default_factory=list, description="directories that could not be listed")


class GrepMatch(_Model):
    path: str
    line_number: int
    line: str
    line_truncated: bool = False


class GrepResult(_Model):
    matches: list[GrepMatch]
    truncated: bool = Field(description="the match cap or output budget was reached")
    unreadable: list[str] = Field(default_factory=list, description="files or directories not readable")
    skipped_binary: int = Field(
        default=0,
        description="binary files (a NUL in the first 8 KiB) that hold a match; their lines are not returned",
    )


TransferError = Literal["file_not_found", "permission_denied", "is_directory", "invalid_path"] | str


class FileUploadResponse(_Model):
    path: str
    error: TransferError | None = None


class FileDownloadResponse(_Model):
    path: str
    content: bytes | None = None
    error: TransferError | None = None


class DirectoryTransferResult(_Model):
    """What ``upload_dir`` / ``download_dir`` moved."""

    entries: int = Field(description="members of the tree's archive: files, directories and links")
    skipped: list[str] = Field(
        default_factory=list,
        description="symlinks pointing outside the tree that were left out (paths relative to it)",
    )


class SandboxInfo(_Model):
    id: str
    labels: dict[str, str] = Field(default_factory=dict)
    created_at: datetime
    status: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class SandboxPage(_Model):
    """One page of ``list``: its sandboxes in ``items``, and the cursor of the next
    page (None on the last).

    Iterating a page yields its sandboxes and ``len()`` counts them, as
    ``for info in provider.list():`` is what people write first; pydantic's own
    iteration would yield ``(field, value)`` pairs (``dict(page)`` is not
    supported: use ``model_dump``)."""

    items: list[SandboxInfo]
    next_cursor: str | None = None

    def __iter__(self) -> Iterator[SandboxInfo]:  # type: ignore[override]
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)
