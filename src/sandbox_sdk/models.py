"""Result types returned by sandbox operations (pydantic models)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
    skipped_binary: int = Field(default=0, description="files not searched because they are binary")


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
    items: list[SandboxInfo]
    next_cursor: str | None = None
