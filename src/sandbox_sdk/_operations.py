"""Every operation of :class:`~sandbox_sdk.BaseSandbox`, declared once.

Each ``_op_<name>`` method is an operation generator carrying the public
signature and docstring of ``<name>``. ``scripts/generate_twins.py`` writes
the public methods from these declarations into ``sandbox_sdk/base.py``:
``<name>`` runs the operation with ``execute`` (``self._drive``) and
``a<name>`` with ``aexecute`` (``await self._adrive``), so a signature is
written once and the twins cannot drift. A provider may override an
``_op_<name>`` (to yield its own :class:`~sandbox_sdk._core.NativeRequest`
s, say) and both public methods follow.

Each costs one ``execute()`` round trip unless its data or result is larger
than one command or one output can carry, in which case it is staged or
paged in as few round trips as the budgets allow; the transfers live in
:mod:`sandbox_sdk.transfer`, one module per job.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import (
    DELETE,
    EDIT,
    EDITED,
    GLOB,
    GREP,
    LS,
    MKDIR,
    READ,
    STAT,
    WRITE,
    Call,
    RunCall,
    ShellCall,
    check_command,
    file_info,
    glob_result,
    grep_result,
    listing,
)
from sandbox_sdk._core import (
    CLEANUP_TIMEOUT,
    Operation,
    PathArg,
    SandboxCore,
    check_flag,
    check_int,
    check_path,
    check_timeout,
    new_token,
    scratch_path,
    to_bytes,
)
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk.models import (
    DirectoryTransferResult,
    EditResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    ReadResult,
    WriteResult,
)
from sandbox_sdk.transfer import Progress, TransferResults, UploadSource
from sandbox_sdk.transfer._batch import download_files, upload_files
from sandbox_sdk.transfer._directories import SymlinkPolicy, download_dir, upload_dir
from sandbox_sdk.transfer._download import download, download_to
from sandbox_sdk.transfer._sources import Tally
from sandbox_sdk.transfer._staging import COMMIT_REFUSED, discard, remove_staged, stage

if TYPE_CHECKING:
    pass

R = TypeVar("R")

#: Default cap of ``read_bytes``: the whole file is held in memory.
DEFAULT_MAX_READ_BYTES = 64 * 1024 * 1024
#: Longest line text ``grep`` returns; longer lines are cut and flagged.
GREP_LINE_BYTES = 1000


class SandboxOperations(SandboxCore):
    """The operations of :class:`~sandbox_sdk.BaseSandbox`, one declaration each."""

    # -- run ---------------------------------------------------------------------

    def _op_run(
        self,
        command: str,
        *,
        cwd: PathArg | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
    ) -> Operation[ExecuteResponse]:
        """``execute`` with a working directory, extra environment variables and
        stdin (any size, binary-safe), applied by wrapping the command.
        ``timeout`` in seconds; ``None`` or ``0`` mean the sandbox's default."""
        encoded = check_command(command)
        timeout = check_timeout(timeout)
        if cwd is None and not env and stdin is None:
            return (yield from ShellCall(command, timeout))
        args = _run_args(encoded, cwd, env)
        if stdin is None:
            return (yield from RunCall(args=args, timeout=timeout))
        data = to_bytes("stdin", stdin)
        if self._fits("run", {**args, "stdin": 0}, len(data)):
            return (yield from RunCall(args={**args, "stdin": 0}, blobs=[data], timeout=timeout))
        staged = scratch_path(self, "stdin")  # the run script opens and removes it
        yield from stage(self, staged, io.BytesIO(data))
        return (yield from _consuming(RunCall(args={**args, "stdin": staged}, timeout=timeout), [staged]))

    # -- ls / stat -------------------------------------------------------------------

    def _op_ls(self, path: PathArg = ".") -> Operation[list[FileInfo]]:
        """Entries of a directory, sorted by name (paged if the listing is huge)."""
        encoded = check_path(path)
        entries: list[FileInfo] = []
        start: int | None = 0
        while start is not None:
            args = {"path": encoded, "start": start, "budget": self._result_budget()}
            value, (packed,) = yield from LS(args, what=f"ls {os.fsdecode(path)!r}")
            entries.extend(listing(packed))
            start = value["next"]
        return entries

    def _op_stat(self, path: PathArg) -> Operation[FileInfo]:
        """One entry, as ``lstat`` sees it."""
        value, _ = yield from STAT({"path": check_path(path)}, what="stat")
        return file_info(value)

    # -- read ---------------------------------------------------------------------------

    def _op_read(self, path: PathArg, *, offset: int = 0, limit: int | None = None) -> Operation[ReadResult]:
        """A page of a UTF-8 text file: ``limit`` lines from line ``offset`` (0-based).

        Raises :class:`~sandbox_sdk.errors.NotTextFileError` for binary content."""
        args = {
            "path": check_path(path),
            "offset": check_int("offset", offset, 0),
            "limit": None if limit is None else check_int("limit", limit, 1),
            "budget": self._result_budget(),
        }
        value, (content,) = yield from READ(args, what=f"read {os.fsdecode(path)!r}")
        return ReadResult(path=os.fsdecode(path), content=content.decode("utf-8"), **value)

    def _op_read_bytes(self, path: PathArg, *, max_bytes: int = DEFAULT_MAX_READ_BYTES) -> Operation[bytes]:
        """The whole file as bytes, verified by SHA-256; refuses files over ``max_bytes``
        with :class:`~sandbox_sdk.errors.OutputLimitExceededError`."""
        sink = io.BytesIO()
        check_int("max_bytes", max_bytes, 0)
        what = f"read_bytes {os.fsdecode(path)!r}"
        yield from download(self, check_path(path), sink, max_size=max_bytes, tally=None, what=what)
        return sink.getvalue()

    # -- write / edit ------------------------------------------------------------------

    def _op_write(
        self, path: PathArg, content: str | bytes, *, overwrite: bool = False
    ) -> Operation[WriteResult]:
        """Create a file (parents too), all or nothing; an existing file is
        replaced only with ``overwrite=True``, keeping its permission bits."""
        data = to_bytes("content", content)
        encoded = check_path(path)
        args = {"path": encoded, "overwrite": check_flag("overwrite", overwrite), "token": new_token()}
        if self._fits("write", args, len(data)):
            yield from WRITE(args, [data], what=f"write {os.fsdecode(path)!r}")
        else:
            yield from stage(self, encoded, io.BytesIO(data), overwrite=overwrite)
        return WriteResult(path=os.fsdecode(path), bytes_written=len(data))

    def _op_edit(
        self, path: PathArg, old: str | bytes, new: str | bytes, *, replace_all: bool = False
    ) -> Operation[EditResult]:
        """Replace ``old`` with ``new``: exactly one occurrence, or all of them
        with ``replace_all=True``. Atomic, and locked against concurrent edits."""
        texts = {"old": to_bytes("old", old), "new": to_bytes("new", new)}
        if not texts["old"]:
            raise errors.InvalidArgumentError("old must not be empty")
        args = {
            "path": check_path(path),
            "replace_all": check_flag("replace_all", replace_all),
            "token": new_token(),
        }
        what = f"edit {os.fsdecode(path)!r}"
        if self._fits("edit", {**args, "old": 0, "new": 1}, len(texts["old"]) + len(texts["new"]) + 4):
            value, _ = yield from EDIT({**args, "old": 0, "new": 1}, [texts["old"], texts["new"]], what=what)
            count = value["replacements"]
        else:  # too large for one command: both texts are staged first
            staged = {key: scratch_path(self, key) for key in texts}
            files = {staged[key]: data for key, data in texts.items()}
            edit = _staged_edit(self, {**args, **staged}, files, what=what)
            count = yield from _consuming(edit, list(staged.values()))
        return EditResult(path=os.fsdecode(path), replacements=count)

    # -- glob / grep -------------------------------------------------------------------

    def _op_glob(
        self,
        pattern: str,
        path: PathArg | None = None,
        *,
        include_hidden: bool = False,
        max_results: int = 10_000,
    ) -> Operation[GlobResult]:
        """Entries matching ``pattern`` (``*``, ``?``, ``[...]``, ``{a,b}``,
        ``**``) below ``path``, sorted. Names starting with a dot match only
        with ``include_hidden=True`` or a pattern segment that starts with one.
        A trailing ``/`` matches directories only. Unlike Python's glob,
        ``sub/**`` leaves out ``sub`` itself and ``[^a]`` negates as ``[!a]``
        does (docs/protocol.md, "Glob patterns"). Directories that could not be
        listed or searched are in ``unreadable``."""
        args = {
            "pattern": _pattern(pattern),
            "path": check_path("." if path is None else path),
            "relative": path is None,
            "include_hidden": check_flag("include_hidden", include_hidden),
            "max_results": check_int("max_results", max_results, 1),
            "budget": self._result_budget(),
        }
        return glob_result(*(yield from GLOB(args, what=f"glob {pattern!r}")))

    def _op_grep(
        self,
        pattern: str,
        path: PathArg | None = None,
        *,
        glob: str | None = None,
        fixed_strings: bool = True,
        ignore_case: bool = False,
        max_matches: int = 1000,
    ) -> Operation[GrepResult]:
        """Lines containing ``pattern`` (a Python regex with ``fixed_strings=False``)
        in regular files below ``path``, optionally only files matching ``glob``."""
        encoded = _pattern(pattern)
        if glob is not None and not isinstance(glob, str):
            raise errors.InvalidArgumentError("glob must be a str or None")
        args = {
            "pattern": encoded,
            "path": check_path("." if path is None else path),
            "glob": None if glob is None else protocol.encode_path(glob),
            "fixed_strings": check_flag("fixed_strings", fixed_strings),
            "ignore_case": check_flag("ignore_case", ignore_case),
            "max_matches": check_int("max_matches", max_matches, 1),
            "max_line_bytes": GREP_LINE_BYTES,
            "budget": self._result_budget(),
        }
        value, _ = yield from GREP(args, what=f"grep {pattern!r}")
        return grep_result(value)

    # -- delete / mkdir ------------------------------------------------------------------

    def _op_delete(self, path: PathArg, *, recursive: bool = False) -> Operation[None]:
        """Remove a file, symlink or empty directory (any directory with
        ``recursive=True``; symlinks inside are removed, never followed)."""
        args = {"path": check_path(path), "recursive": check_flag("recursive", recursive)}
        yield from DELETE(args, what=f"delete {os.fsdecode(path)!r}")

    def _op_mkdir(self, path: PathArg, *, parents: bool = True, exist_ok: bool = True) -> Operation[None]:
        """Create a directory, with its missing parents unless ``parents=False``;
        one that exists already is fine unless ``exist_ok=False``."""
        args = {
            "path": check_path(path),
            "parents": check_flag("parents", parents),
            "exist_ok": check_flag("exist_ok", exist_ok),
        }
        yield from MKDIR(args, what=f"mkdir {os.fsdecode(path)!r}")

    # -- transfers -----------------------------------------------------------------------

    def _op_upload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> Operation[TransferResults[FileUploadResponse]]:
        """Upload each ``(remote_path, data)``, replacing existing files and
        creating parents; ``data`` is bytes, a local path or a binary file
        object. One response per item, in order, with ``error=None`` on
        success; one item failing never stops the others, and
        ``.raise_for_errors()`` on the result raises for them all."""
        return TransferResults((yield from self._upload_batch(files, progress=progress)))

    def _op_download_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> Operation[TransferResults[FileDownloadResponse]]:
        """Download each path: one response per path, in order, with ``content``
        or ``error``; ``.raise_for_errors()`` on the result raises for the
        failures. Each file is verified against the sandbox's SHA-256."""
        return TransferResults((yield from self._download_batch(paths, progress=progress)))

    def _upload_batch(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> Operation[list[FileUploadResponse]]:
        """The responses of ``upload_files``: native-transfer providers override this."""
        return upload_files(self, list(files), progress)

    def _download_batch(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> Operation[list[FileDownloadResponse]]:
        """The responses of ``download_files``: native-transfer providers override this."""
        return download_files(self, list(paths), progress)

    def _op_download_file(
        self,
        remote_path: PathArg,
        dest: str | os.PathLike[str] | BinaryIO,
        *,
        progress: Progress | None = None,
    ) -> Operation[int]:
        """Stream one file into a local path (via a temp file and rename, so
        ``dest`` is whole or untouched) or a binary file object; returns its size."""
        what = f"download {os.fsdecode(remote_path)!r}"
        return download_to(self, check_path(remote_path), dest, tally=Tally(progress), what=what)

    def _op_upload_dir(
        self,
        local_dir: str | os.PathLike[str],
        remote_dir: PathArg,
        *,
        exclude: Sequence[str] = (),
        symlinks: SymlinkPolicy = "skip",
        progress: Progress | None = None,
    ) -> Operation[DirectoryTransferResult]:
        """Copy a local directory tree (files, empty folders, symlinks, modes)
        into ``remote_dir``, creating it; returns the entries copied and the
        symlinks skipped.

        ``exclude``: glob patterns matched against each name in a path and the
        whole relative path (``[".git", "__pycache__", ".venv"]``). A symlink
        pointing outside the tree (``.venv/bin/python -> /usr/bin/python3``)
        is left out and listed in ``skipped`` (``symlinks="skip"``), fails the
        upload (``"refuse"``), or is replaced by a copy of the file it points
        to (``"copy-inside"``). The tree travels as one tar archive; the
        sandbox refuses members that would land outside ``remote_dir``
        before extracting anything."""
        return upload_dir(self, local_dir, remote_dir, progress, exclude=exclude, symlinks=symlinks)

    def _op_download_dir(
        self,
        remote_dir: PathArg,
        local_dir: str | os.PathLike[str],
        *,
        exclude: Sequence[str] = (),
        symlinks: SymlinkPolicy = "skip",
        progress: Progress | None = None,
    ) -> Operation[DirectoryTransferResult]:
        """Copy a sandbox directory tree into ``local_dir`` (created if needed);
        returns the entries copied and the symlinks skipped. ``exclude`` and
        ``symlinks`` as for :meth:`upload_dir`, applied in the sandbox. Members
        that would land outside ``local_dir`` (``..``, absolute names, links
        pointing out) are refused before anything is written."""
        return download_dir(self, remote_dir, local_dir, progress, exclude=exclude, symlinks=symlinks)


def _run_args(command: bytes, cwd: PathArg | None, env: Mapping[str, str] | None) -> dict[str, Any]:
    args: dict[str, Any] = {"command": protocol.encode_path(command)}
    if cwd is not None:
        args["cwd"] = check_path(cwd, "cwd")
    if env:
        args["env"] = {
            protocol.encode_path(_env_key(key)): protocol.encode_path(_env_value(key, value))
            for key, value in env.items()
        }
    return args


def _env_key(key: object) -> bytes:
    """A variable's name: what ``execve`` can carry (no ``=``, no NUL, not empty)."""
    raw = to_bytes("env key", key)
    if not raw or b"=" in raw or b"\0" in raw:
        raise errors.InvalidArgumentError(f"env key {key!r} must be non-empty, without '=' or NUL")
    return raw


def _env_value(key: object, value: object) -> bytes:
    raw = to_bytes("env value", value)
    if b"\0" in raw:
        raise errors.InvalidArgumentError(f"env value of {key!r} contains a NUL character")
    return raw


#: Errors a staged edit reports when it refused, having changed nothing;
#: after any other failure the client asks whether it committed.
EDIT_REFUSED = (*COMMIT_REFUSED, errors.EditNoMatchError, errors.EditAmbiguousError, errors.NotTextFileError)


def _staged_edit(
    sandbox: SandboxCore, args: dict[str, Any], files: Mapping[str, bytes], *, what: str
) -> Operation[int]:
    """Stage both texts and edit; returns the replacements. After a lost
    reply the client asks whether the edit committed, as a staged upload
    does; for that a ``replace_all`` edit leaves its count in ``new``'s staged
    file, removed here."""
    for path, data in files.items():
        yield from stage(sandbox, path, io.BytesIO(data))
    try:
        value, _ = yield from EDIT(args, what=what)
        count = value["replacements"]
    except errors.SandboxError as exc:
        committed = None if isinstance(exc, EDIT_REFUSED) else (yield from _edited(args))
        if committed is None:
            raise
        count = committed
    if args["replace_all"]:
        yield from remove_staged(args["new"], what=what)
    return count


def _edited(args: dict[str, Any]) -> Operation[int | None]:
    """The replacements of a staged edit that committed; ``None`` if it did
    not, or if that cannot be told."""
    try:
        check = {key: args[key] for key in ("old", "new", "replace_all")}
        value, _ = yield from EDITED(check, what="check an edit", timeout=CLEANUP_TIMEOUT)
    except errors.SandboxError:
        return None
    return value["replacements"]


def _consuming(step: Call[R] | Operation[R], staged: Sequence[str]) -> Operation[R]:
    """Run ``step``, which consumes the staged files ``staged``; if it fails,
    remove what is left of them."""
    try:
        return (yield from step)
    except BaseException as exc:
        if can_clean_up(exc):
            yield from discard(staged)
        raise


def _pattern(pattern: str) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise errors.InvalidArgumentError("pattern must be a non-empty str")
    return protocol.encode_path(pattern)
