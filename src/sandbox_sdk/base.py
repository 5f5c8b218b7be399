"""``BaseSandbox``: every file operation, derived from one ``execute()``.

A provider implements ``id`` and ``execute``; this class supplies ``run``,
``ls``, ``stat``, ``read``, ``read_bytes``, ``write``, ``edit``, ``glob``,
``grep``, ``delete``, ``mkdir`` and the transfers, each with an async twin
prefixed ``a``. Each costs one ``execute()`` round trip unless its data or
result is larger than one command or one output can carry, in which case it
is staged or paged in as few round trips as the budgets allow.
"""

from __future__ import annotations

import base64
import io
import os
import posixpath
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import DELETE, EDIT, GLOB, GREP, LS, MKDIR, READ, STAT, WRITE, RunCall, ShellCall
from sandbox_sdk._core import (
    Operation,
    PathArg,
    SandboxCore,
    check_flag,
    check_int,
    check_path,
    new_token,
    to_bytes,
)
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk.models import (
    EditResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepMatch,
    GrepResult,
    ReadResult,
    WriteResult,
)
from sandbox_sdk.transfer import Progress, UploadSource
from sandbox_sdk.transfer._batch import download_files, upload_files
from sandbox_sdk.transfer._directories import download_dir, upload_dir
from sandbox_sdk.transfer._download import download, download_to
from sandbox_sdk.transfer._sources import Tally
from sandbox_sdk.transfer._staging import discard, stage

if TYPE_CHECKING:
    from sandbox_sdk.remote._runtime import Entry

#: Default cap of ``read_bytes``: the whole file is held in memory.
DEFAULT_MAX_READ_BYTES = 64 * 1024 * 1024
#: Longest line text ``grep`` returns; longer lines are cut and flagged.
GREP_LINE_BYTES = 1000
#: Where ``run`` stdin and ``edit`` texts too large for one command are staged
#: (not beside the target: staging creates parents, and an edit must not).
ARGUMENT_STAGING_DIR = "/tmp"


def file_info(item: Entry) -> FileInfo:
    path = protocol.decode_path(item["path"])
    return FileInfo(
        path=path,
        name=posixpath.basename(path.rstrip("/")) or path,
        type=item["type"],
        size=item["size"],
        mtime=item["mtime"],
        mode=item["mode"],
    )


class BaseSandbox(SandboxCore):
    """A sandbox whose every operation is built on :meth:`execute`.

    Subclass it, implement ``id`` and ``execute`` (and ``aexecute`` if you
    have a native async client), and set ``max_command_bytes`` /
    ``max_output_bytes`` to your transport's limits. See docs/provider-guide.md.
    """

    # -- run ---------------------------------------------------------------------

    def _op_run(
        self,
        command: str,
        cwd: PathArg | None,
        env: Mapping[str, str] | None,
        stdin: str | bytes | None,
        timeout: float | None,
    ) -> Operation[ExecuteResponse]:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        if cwd is None and not env and stdin is None:
            return (yield from ShellCall(command, timeout))
        args: dict[str, Any] = {"command": protocol.encode_path(command.encode("utf-8"))}
        if cwd is not None:
            args["cwd"] = check_path(cwd, "cwd")
        if env:
            args["env"] = {
                protocol.encode_path(to_bytes("env key", k)): protocol.encode_path(to_bytes("env value", v))
                for k, v in env.items()
            }
        blobs: list[bytes] = []
        if stdin is not None:
            data = to_bytes("stdin", stdin)
            args["stdin"] = 0
            if self._fits("run", args, len(data)):
                blobs.append(data)
            else:  # staged; the run script opens and removes the file
                args["stdin"] = protocol.encode_path(
                    posixpath.join(ARGUMENT_STAGING_DIR, f".sbx-stdin-{new_token()}")
                )
                yield from stage(self, args["stdin"], io.BytesIO(data))
        try:
            response = yield from RunCall(args=args, blobs=blobs, timeout=timeout)
        except BaseException as exc:
            if can_clean_up(exc):
                yield from discard([args["stdin"]] if isinstance(args.get("stdin"), str) else [])
            raise
        return response

    def run(
        self,
        command: str,
        *,
        cwd: PathArg | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
    ) -> ExecuteResponse:
        """``execute`` with a working directory, extra environment variables and
        stdin (any size, binary-safe), applied by wrapping the command."""
        return self._drive(self._op_run(command, cwd, env, stdin, timeout))

    async def arun(
        self,
        command: str,
        *,
        cwd: PathArg | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
    ) -> ExecuteResponse:
        return await self._adrive(self._op_run(command, cwd, env, stdin, timeout))

    # -- ls / stat -------------------------------------------------------------------

    def _op_ls(self, path: PathArg) -> Operation[list[FileInfo]]:
        encoded = check_path(path)
        entries: list[FileInfo] = []
        start: int | None = 0
        while start is not None:
            args = {"path": encoded, "start": start, "budget": self._result_budget()}
            value, _ = yield from LS(args, what=f"ls {os.fsdecode(path)!r}")
            entries.extend(file_info(item) for item in value["entries"])
            start = value["next"]
        return entries

    def ls(self, path: PathArg = ".") -> list[FileInfo]:
        """Entries of a directory, sorted by name (paged if the listing is huge)."""
        return self._drive(self._op_ls(path))

    async def als(self, path: PathArg = ".") -> list[FileInfo]:
        return await self._adrive(self._op_ls(path))

    def _op_stat(self, path: PathArg) -> Operation[FileInfo]:
        value, _ = yield from STAT({"path": check_path(path)}, what="stat")
        return file_info(value)

    def stat(self, path: PathArg) -> FileInfo:
        """One entry, as ``lstat`` sees it."""
        return self._drive(self._op_stat(path))

    async def astat(self, path: PathArg) -> FileInfo:
        return await self._adrive(self._op_stat(path))

    # -- read ---------------------------------------------------------------------------

    def _op_read(self, path: PathArg, offset: int, limit: int | None) -> Operation[ReadResult]:
        args = {
            "path": check_path(path),
            "offset": check_int("offset", offset, 0),
            "limit": None if limit is None else check_int("limit", limit, 1),
            "budget": self._result_budget(),
        }
        value, (content,) = yield from READ(args, what=f"read {os.fsdecode(path)!r}")
        return ReadResult(path=os.fsdecode(path), content=content.decode("utf-8"), **value)

    def read(self, path: PathArg, *, offset: int = 0, limit: int | None = None) -> ReadResult:
        """A page of a UTF-8 text file: ``limit`` lines from line ``offset`` (0-based).

        Raises :class:`~sandbox_sdk.errors.NotTextFileError` for binary content."""
        return self._drive(self._op_read(path, offset, limit))

    async def aread(self, path: PathArg, *, offset: int = 0, limit: int | None = None) -> ReadResult:
        return await self._adrive(self._op_read(path, offset, limit))

    def _op_read_bytes(self, path: PathArg, max_bytes: int) -> Operation[bytes]:
        sink = io.BytesIO()
        check_int("max_bytes", max_bytes, 0)
        what = f"read_bytes {os.fsdecode(path)!r}"
        yield from download(self, check_path(path), sink, max_size=max_bytes, tally=None, what=what)
        return sink.getvalue()

    def read_bytes(self, path: PathArg, *, max_bytes: int = DEFAULT_MAX_READ_BYTES) -> bytes:
        """The whole file as bytes, verified by SHA-256; refuses files over ``max_bytes``
        with :class:`~sandbox_sdk.errors.OutputLimitExceededError`."""
        return self._drive(self._op_read_bytes(path, max_bytes))

    async def aread_bytes(self, path: PathArg, *, max_bytes: int = DEFAULT_MAX_READ_BYTES) -> bytes:
        return await self._adrive(self._op_read_bytes(path, max_bytes))

    # -- write / edit ------------------------------------------------------------------

    def _op_write(self, path: PathArg, content: str | bytes, overwrite: bool) -> Operation[WriteResult]:
        data = to_bytes("content", content)
        encoded = check_path(path)
        args = {
            "path": encoded,
            "overwrite": check_flag("overwrite", overwrite),
            "token": new_token(),
        }
        if self._fits("write", args, len(data)):
            yield from WRITE(args, [data], what=f"write {os.fsdecode(path)!r}")
        else:
            yield from stage(self, encoded, io.BytesIO(data), overwrite=overwrite)
        return WriteResult(path=os.fsdecode(path), bytes_written=len(data))

    def write(self, path: PathArg, content: str | bytes, *, overwrite: bool = False) -> WriteResult:
        """Create a file (parents too), all or nothing; an existing file is
        replaced only with ``overwrite=True``, keeping its permission bits."""
        return self._drive(self._op_write(path, content, overwrite))

    async def awrite(self, path: PathArg, content: str | bytes, *, overwrite: bool = False) -> WriteResult:
        return await self._adrive(self._op_write(path, content, overwrite))

    def _op_edit(
        self, path: PathArg, old: str | bytes, new: str | bytes, replace_all: bool
    ) -> Operation[EditResult]:
        old_bytes, new_bytes = to_bytes("old", old), to_bytes("new", new)
        if not old_bytes:
            raise errors.InvalidArgumentError("old must not be empty")
        args: dict[str, Any] = {
            "path": check_path(path),
            "replace_all": check_flag("replace_all", replace_all),
            "token": new_token(),
            "old": 0,
            "new": 1,
        }
        if self._fits("edit", args, len(old_bytes) + len(new_bytes) + 4):
            value, _ = yield from EDIT(args, [old_bytes, new_bytes], what=f"edit {os.fsdecode(path)!r}")
            return EditResult(path=os.fsdecode(path), replacements=value["replacements"])
        # Too large for one command: stage both texts first; the edit script
        # consumes them, and a failure removes what is left.
        staged = {
            key: protocol.encode_path(posixpath.join(ARGUMENT_STAGING_DIR, f".sbx-{key}-{new_token()}"))
            for key in ("old", "new")
        }
        try:
            for key, data in (("old", old_bytes), ("new", new_bytes)):
                yield from stage(self, staged[key], io.BytesIO(data))
            value, _ = yield from EDIT({**args, **staged}, what=f"edit {os.fsdecode(path)!r}")
        except BaseException as exc:
            if can_clean_up(exc):
                yield from discard(list(staged.values()))
            raise
        return EditResult(path=os.fsdecode(path), replacements=value["replacements"])

    def edit(
        self, path: PathArg, old: str | bytes, new: str | bytes, *, replace_all: bool = False
    ) -> EditResult:
        """Replace ``old`` with ``new``: exactly one occurrence, or all of them
        with ``replace_all=True``. Atomic, and locked against concurrent edits."""
        return self._drive(self._op_edit(path, old, new, replace_all))

    async def aedit(
        self, path: PathArg, old: str | bytes, new: str | bytes, *, replace_all: bool = False
    ) -> EditResult:
        return await self._adrive(self._op_edit(path, old, new, replace_all))

    # -- glob / grep -------------------------------------------------------------------

    def _op_glob(
        self, pattern: str, path: PathArg | None, include_hidden: bool, max_results: int
    ) -> Operation[GlobResult]:
        if not isinstance(pattern, str) or not pattern:
            raise errors.InvalidArgumentError("pattern must be a non-empty str")
        args = {
            "pattern": protocol.encode_path(pattern),
            "path": check_path("." if path is None else path),
            "relative": path is None,
            "include_hidden": check_flag("include_hidden", include_hidden),
            "max_results": check_int("max_results", max_results, 1),
            "budget": self._result_budget(),
        }
        value, _ = yield from GLOB(args, what=f"glob {pattern!r}")
        return GlobResult(
            matches=[file_info(item) for item in value["matches"]],
            truncated=value["truncated"],
            unreadable=[protocol.decode_path(p) for p in value["unreadable"]],
        )

    def glob(
        self,
        pattern: str,
        path: PathArg | None = None,
        *,
        include_hidden: bool = False,
        max_results: int = 10_000,
    ) -> GlobResult:
        """Entries matching ``pattern`` (``*``, ``?``, ``[...]``, ``{a,b}``,
        ``**``) below ``path``, sorted. Names starting with a dot match only
        with ``include_hidden=True`` or a pattern segment that starts with one."""
        return self._drive(self._op_glob(pattern, path, include_hidden, max_results))

    async def aglob(
        self,
        pattern: str,
        path: PathArg | None = None,
        *,
        include_hidden: bool = False,
        max_results: int = 10_000,
    ) -> GlobResult:
        return await self._adrive(self._op_glob(pattern, path, include_hidden, max_results))

    def _op_grep(
        self,
        pattern: str,
        path: PathArg | None,
        glob: str | None,
        fixed_strings: bool,
        ignore_case: bool,
        max_matches: int,
    ) -> Operation[GrepResult]:
        if not isinstance(pattern, str) or not pattern:
            raise errors.InvalidArgumentError("pattern must be a non-empty str")
        if glob is not None and not isinstance(glob, str):
            raise errors.InvalidArgumentError("glob must be a str or None")
        args = {
            "pattern": protocol.encode_path(pattern),
            "path": check_path("." if path is None else path),
            "glob": None if glob is None else protocol.encode_path(glob),
            "fixed_strings": check_flag("fixed_strings", fixed_strings),
            "ignore_case": check_flag("ignore_case", ignore_case),
            "max_matches": check_int("max_matches", max_matches, 1),
            "max_line_bytes": GREP_LINE_BYTES,
            "budget": self._result_budget(),
        }
        value, _ = yield from GREP(args, what=f"grep {pattern!r}")
        return GrepResult(
            matches=[
                GrepMatch(
                    path=protocol.decode_path(p),
                    line_number=n,
                    line=base64.b64decode(text).decode("utf-8", "replace"),
                    line_truncated=cut,
                )
                for p, n, text, cut in value["matches"]
            ],
            truncated=value["truncated"],
            unreadable=[protocol.decode_path(p) for p in value["unreadable"]],
            skipped_binary=value["skipped_binary"],
        )

    def grep(
        self,
        pattern: str,
        path: PathArg | None = None,
        *,
        glob: str | None = None,
        fixed_strings: bool = True,
        ignore_case: bool = False,
        max_matches: int = 1000,
    ) -> GrepResult:
        """Lines containing ``pattern`` (a Python regex with ``fixed_strings=False``)
        in regular files below ``path``, optionally only files matching ``glob``."""
        return self._drive(self._op_grep(pattern, path, glob, fixed_strings, ignore_case, max_matches))

    async def agrep(
        self,
        pattern: str,
        path: PathArg | None = None,
        *,
        glob: str | None = None,
        fixed_strings: bool = True,
        ignore_case: bool = False,
        max_matches: int = 1000,
    ) -> GrepResult:
        return await self._adrive(self._op_grep(pattern, path, glob, fixed_strings, ignore_case, max_matches))

    # -- delete / mkdir ------------------------------------------------------------------

    def _op_delete(self, path: PathArg, recursive: bool) -> Operation[None]:
        args = {"path": check_path(path), "recursive": check_flag("recursive", recursive)}
        yield from DELETE(args, what=f"delete {os.fsdecode(path)!r}")

    def delete(self, path: PathArg, *, recursive: bool = False) -> None:
        """Remove a file, symlink or empty directory (any directory with
        ``recursive=True``; symlinks inside are removed, never followed)."""
        self._drive(self._op_delete(path, recursive))

    async def adelete(self, path: PathArg, *, recursive: bool = False) -> None:
        await self._adrive(self._op_delete(path, recursive))

    def _op_mkdir(self, path: PathArg, parents: bool, exist_ok: bool) -> Operation[None]:
        args = {
            "path": check_path(path),
            "parents": check_flag("parents", parents),
            "exist_ok": check_flag("exist_ok", exist_ok),
        }
        yield from MKDIR(args, what=f"mkdir {os.fsdecode(path)!r}")

    def mkdir(self, path: PathArg, *, parents: bool = True, exist_ok: bool = True) -> None:
        self._drive(self._op_mkdir(path, parents, exist_ok))

    async def amkdir(self, path: PathArg, *, parents: bool = True, exist_ok: bool = True) -> None:
        await self._adrive(self._op_mkdir(path, parents, exist_ok))

    # -- transfers -----------------------------------------------------------------------

    def _op_upload_files(
        self, files: Iterable[tuple[str, UploadSource]], progress: Progress | None
    ) -> Operation[list[FileUploadResponse]]:
        return upload_files(self, list(files), progress)

    def upload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> list[FileUploadResponse]:
        """Upload each ``(remote_path, data)``, replacing existing files and
        creating parents; one response per item, in order, with ``error=None``
        on success. One item failing never stops the others.

        Native-transfer providers override this and :meth:`aupload_files`."""
        return self._drive(self._op_upload_files(files, progress))

    async def aupload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> list[FileUploadResponse]:
        return await self._adrive(self._op_upload_files(files, progress))

    def _op_download_files(
        self, paths: Iterable[str], progress: Progress | None
    ) -> Operation[list[FileDownloadResponse]]:
        return download_files(self, list(paths), progress)

    def download_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> list[FileDownloadResponse]:
        """Download each path: one response per path, in order, with ``content``
        or ``error``. Each file is verified against the sandbox's SHA-256.

        Native-transfer providers override this and :meth:`adownload_files`."""
        return self._drive(self._op_download_files(paths, progress))

    async def adownload_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> list[FileDownloadResponse]:
        return await self._adrive(self._op_download_files(paths, progress))

    def _op_download_file(
        self, remote_path: PathArg, dest: str | os.PathLike[str] | BinaryIO, progress: Progress | None
    ) -> Operation[int]:
        what = f"download {os.fsdecode(remote_path)!r}"
        return download_to(self, check_path(remote_path), dest, tally=Tally(progress), what=what)

    def download_file(
        self,
        remote_path: PathArg,
        dest: str | os.PathLike[str] | BinaryIO,
        *,
        progress: Progress | None = None,
    ) -> int:
        """Stream one file into a local path (via a temp file and rename, so
        ``dest`` is whole or untouched) or a binary file object; returns its size."""
        return self._drive(self._op_download_file(remote_path, dest, progress))

    async def adownload_file(
        self,
        remote_path: PathArg,
        dest: str | os.PathLike[str] | BinaryIO,
        *,
        progress: Progress | None = None,
    ) -> int:
        return await self._adrive(self._op_download_file(remote_path, dest, progress))

    def _op_upload_dir(
        self, local_dir: str | os.PathLike[str], remote_dir: PathArg, progress: Progress | None
    ) -> Operation[int]:
        return upload_dir(self, local_dir, remote_dir, progress)

    def upload_dir(
        self, local_dir: str | os.PathLike[str], remote_dir: PathArg, *, progress: Progress | None = None
    ) -> int:
        """Copy a local directory tree (files, empty folders, symlinks, modes)
        into ``remote_dir``, creating it; returns the number of entries.

        The tree travels as one tar archive; the sandbox refuses members that
        would land outside ``remote_dir`` before extracting anything."""
        return self._drive(self._op_upload_dir(local_dir, remote_dir, progress))

    async def aupload_dir(
        self, local_dir: str | os.PathLike[str], remote_dir: PathArg, *, progress: Progress | None = None
    ) -> int:
        return await self._adrive(self._op_upload_dir(local_dir, remote_dir, progress))

    def _op_download_dir(
        self, remote_dir: PathArg, local_dir: str | os.PathLike[str], progress: Progress | None
    ) -> Operation[int]:
        return download_dir(self, remote_dir, local_dir, progress)

    def download_dir(
        self, remote_dir: PathArg, local_dir: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> int:
        """Copy a sandbox directory tree into ``local_dir`` (created if needed);
        returns the number of entries. Members that would land outside
        ``local_dir`` (``..``, absolute names, links pointing out) are refused
        before anything is written."""
        return self._drive(self._op_download_dir(remote_dir, local_dir, progress))

    async def adownload_dir(
        self, remote_dir: PathArg, local_dir: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> int:
        return await self._adrive(self._op_download_dir(remote_dir, local_dir, progress))
