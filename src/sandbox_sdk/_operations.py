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

import base64
import contextlib
import io
import json
import os
import shlex
from collections import deque
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from importlib import resources
from signal import SIGKILL
from typing import Any, BinaryIO, Self, TypeVar

import anyio
import anyio.to_thread

from sandbox_sdk import _kernel as kernel
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
    RUN,
    SPAWN,
    STAT,
    WRITE,
    Call,
    Reply,
    Script,
    ShellGrepCall,
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
from sandbox_sdk._process import (
    Collected,
    Command,
    Decoders,
    Follower,
    OutputSink,
    Record,
    end_quietly,
    find_process,
    forget,
    list_processes,
    pieces,
    spawn_args,
    text_sink,
)
from sandbox_sdk.models import (
    PIPE,
    TIMEOUT_EXIT_CODE,
    DirectoryTransferResult,
    EditResult,
    FileDownloadResponse,
    FileEvent,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    ProcessInfo,
    PtySize,
    ReadResult,
    RunResult,
    Stdin,
    StreamEvent,
    StreamName,
    WriteResult,
)
from sandbox_sdk.process import Process
from sandbox_sdk.remote.grep import is_literal
from sandbox_sdk.snapshots import Snapshot, SnapshotStore, restore_snapshot, snapshot_store_for, take_snapshot
from sandbox_sdk.transfer import Progress, TransferResults, UploadSource
from sandbox_sdk.transfer._batch import download_files, upload_files
from sandbox_sdk.transfer._directories import SymlinkPolicy, download_dir, upload_dir
from sandbox_sdk.transfer._download import download, download_to
from sandbox_sdk.transfer._sources import Tally
from sandbox_sdk.transfer._staging import COMMIT_REFUSED, discard, remove_staged, stage

R = TypeVar("R")
V = TypeVar("V")

#: Default cap of ``read_bytes``: the whole file is held in memory.
DEFAULT_MAX_READ_BYTES = 64 * 1024 * 1024
#: Longest line text ``grep`` returns; longer lines are cut and flagged.
GREP_LINE_BYTES = 1000
#: The directories ``grep`` skips unless told otherwise: git's own data
#: (compressed objects, never the user's files), as deepagents skips it.
#: ``node_modules`` is searched: it may hold the user's own code (a
#: workspace's packages, a patched dependency), which a default must not
#: leave out of a result without a word.
GREP_EXCLUDE_DIRS: tuple[str, ...] = (".git",)
#: Seconds of quiet ``watch`` waits for before it reports a batch of changes.
WATCH_DEBOUNCE = 0.1


class SandboxOperations(SandboxCore):
    """The operations of :class:`~sandbox_sdk.BaseSandbox`, one declaration each."""

    # -- run / start / processes ---------------------------------------------------

    def _op_run(
        self,
        command: str | Sequence[str],
        *,
        cwd: PathArg | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        on_stdout: Callable[[str], object] | None = None,
        on_stderr: Callable[[str], object] | None = None,
    ) -> Operation[RunResult]:
        """Run a command to its end, with its stdout and stderr kept apart
        (``output`` has both, in arrival order), in ``cwd``, with ``env``
        added and ``stdin`` (any size, binary-safe). ``command`` is a shell
        command, or an argument vector run without a shell (a program that
        cannot be executed raises ``SandboxPermissionError`` or
        ``SandboxFileNotFoundError``, as ``subprocess`` would). Exit status: the
        command's, 128+N if signal N killed it, 124 with ``timed_out`` at
        ``timeout`` (seconds; ``None`` or ``0``: the sandbox's default). One
        round trip; with ``on_stdout`` / ``on_stderr``, which are called with
        text as it arrives, the command runs detached and is followed by long
        polls (docs/processes.md)."""
        spec = command_of(command, cwd, env, stdin, timeout)
        if on_stdout is None and on_stderr is None:
            return (yield from _run_foreground(self, spec))
        return (yield from _streamed(self, spec, text_sink(on_stdout, on_stderr)))

    def _op_start(
        self,
        command: str | Sequence[str],
        *,
        cwd: PathArg | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | Stdin | None = None,
        pty: PtySize | None = None,
        timeout: float | None = None,
    ) -> Operation[Process]:
        """Start a background command that outlives the call, in a process
        group of its own, its output kept in the sandbox; the
        :class:`~sandbox_sdk.process.Process` reads, waits for and kills it
        (from any client: see :meth:`process`). ``stdin`` is data, or
        :data:`~sandbox_sdk.PIPE` to write it later (``write_stdin``,
        ``close_stdin``). With ``pty`` the command runs on a terminal of
        that size (``TERM=xterm-256color`` unless ``env`` sets it): its output
        is one stream, ``stdout``, and ``write_stdin`` types into it. With
        ``timeout`` (seconds) its group is killed then, and it exits 124 with
        ``timed_out``."""
        extra: dict[str, Any] = {}
        if pty is not None:
            if not isinstance(pty, PtySize):
                raise errors.InvalidArgumentError(f"pty must be a PtySize, not {type(pty).__name__}")
            if stdin not in (None, PIPE):
                raise errors.InvalidArgumentError(
                    "a process on a terminal reads the terminal: pass no stdin data"
                )
            env = {"TERM": "xterm-256color", **(env or {})}
            extra = {"input": "pty", "rows": pty.rows, "cols": pty.cols}
        elif stdin is PIPE:
            extra = {"input": "pipe"}
        spec = command_of(command, cwd, env, None if stdin is PIPE else stdin, timeout)
        record = yield from spawn(self, spec, extra)
        return Process(self, record.pid, spec.command, record.handle)

    def _op_processes(self) -> Operation[list[ProcessInfo]]:
        """The background processes this sandbox knows, running or ended
        (records of processes that ended more than a day ago are removed)."""
        return (yield from list_processes(self))

    def _op_process(self, pid: int) -> Operation[Process]:
        """Reattach to a background process by its pid, from any client of the
        sandbox (its newest record, if the pid was reused);
        :class:`~sandbox_sdk.errors.ProcessNotFoundError` if no process of that
        pid was started through ``start`` (docs/processes.md)."""
        entry = yield from find_process(self, pid)
        return Process(self, entry["pid"], protocol.decode_path(entry["command"]), entry["handle"])

    def stream(
        self,
        command: str | Sequence[str],
        *,
        cwd: PathArg | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
    ) -> Generator[StreamEvent, None, None]:
        """Run a command, yielding its output as ``stdout`` / ``stderr``
        events while it runs, then one ``exit`` event. Leaving the loop early
        kills the command."""
        events: deque[StreamEvent] = deque()
        spec = command_of(command, cwd, env, stdin, timeout)
        return kernel.iterate(_stream(self, spec, events), self._perform, events)

    async def astream(
        self,
        command: str | Sequence[str],
        *,
        cwd: PathArg | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Async twin of :meth:`stream` (``async for event in sandbox.astream(...)``).
        Close it if you leave the loop early (``contextlib.aclosing``), so the
        command is killed at once rather than when the iterator is collected."""
        events: deque[StreamEvent] = deque()
        spec = command_of(command, cwd, env, stdin, timeout)
        iterator = kernel.aiterate(_stream(self, spec, events), self._aperform, events)
        async with contextlib.aclosing(iterator):
            async for event in iterator:
                yield event

    def watch(
        self, path: PathArg, *, recursive: bool = True, debounce: float = WATCH_DEBOUNCE
    ) -> Generator[FileEvent, None, None]:
        """Changes under directory ``path`` as :class:`~sandbox_sdk.models.FileEvent`
        s, as they happen, until the iterator is closed (which ends the
        watcher in the sandbox): a background process (inotify, else
        polling, said in the first event) followed by long polls. Events
        within ``debounce`` seconds of each other are coalesced per path
        (docs/watch.md)."""
        command = _watcher_command(self._drive(self._op_stat(path)), recursive, debounce)
        process = self._drive(self._op_start(command))
        lines = _Lines()
        try:
            for event in process.stream():
                yield from lines.events(event)
        finally:
            with contextlib.suppress(errors.SandboxError):
                process.kill(SIGKILL)

    async def awatch(
        self, path: PathArg, *, recursive: bool = True, debounce: float = WATCH_DEBOUNCE
    ) -> AsyncGenerator[FileEvent, None]:
        """Async twin of :meth:`watch` (``async for event in sandbox.awatch(path)``).
        Close it when you leave the loop early (``contextlib.aclosing``), so
        the watcher ends at once rather than when the iterator is collected."""
        command = _watcher_command(await self._adrive(self._op_stat(path)), recursive, debounce)
        process = await self._adrive(self._op_start(command))
        lines = _Lines()
        try:
            async with contextlib.aclosing(process.astream()) as stream:
                async for event in stream:
                    for change in lines.events(event):
                        yield change
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                await process.akill(SIGKILL)

    def _stream_command(
        self, command: Command, sink: OutputSink, *, keep_output: bool = True
    ) -> Operation[RunResult]:
        """The hook behind ``run`` with callbacks and ``stream``: run
        ``command`` to its end, handing each piece of output to ``sink`` as it
        arrives; the result holds the output too (up to ``limits.max_output_bytes``)
        unless ``keep_output`` is false (``stream`` needs only the exit). By
        default the command runs detached and is followed by long polls; a
        provider whose platform streams a command's output overrides this
        with its own requests (and gets no polling). Interrupted, it must kill
        what it started before the interruption goes on."""
        record = yield from spawn(self, command)
        try:
            keep = self.limits.max_output_bytes if keep_output else 0
            placed = Follower(self, record).to_end(lambda stream, data, _: sink(stream, data), keep=keep)
            result = yield from placed
        except BaseException as exc:
            if can_clean_up(exc):
                yield from end_quietly(self, record)
            raise
        yield from forget(self, record)
        return result

    # -- ls / stat -------------------------------------------------------------------

    def _op_ls(self, path: PathArg | None = None) -> Operation[list[FileInfo]]:
        """Entries of a directory (the working directory without ``path``),
        sorted by name (paged if the listing is huge). Each entry's ``path`` is
        ``path`` joined with its name; without ``path``, its name, as ``glob``
        and ``grep`` give paths relative to the working directory."""
        shown = "." if path is None else path
        encoded = check_path(shown)
        entries: list[FileInfo] = []
        start: int | None = 0
        while start is not None:
            args = {"path": encoded, "start": start, "budget": self.limits.result_budget}
            value, (packed,) = yield from LS(args, what=f"ls {os.fsdecode(shown)!r}")
            entries.extend(listing(packed))
            start = value["next"]
        if path is None:
            return [entry.model_copy(update={"path": entry.name}) for entry in entries]
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
            "budget": self.limits.result_budget,
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
        if self.limits.fits(len(data), "write", args, self.scratch_dir):
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
        inline = {**args, "old": 0, "new": 1}
        if self.limits.fits(len(texts["old"]) + len(texts["new"]) + 4, "edit", inline, self.scratch_dir):
            value, _ = yield from EDIT(inline, [texts["old"], texts["new"]], what=what)
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
        does (docs/protocol.md, "Glob patterns"). Paths are ``path`` joined with
        the entry's path below it; without ``path``, relative to the working
        directory, as ``ls`` and ``grep`` give them. Directories that could not be
        listed or searched are in ``unreadable``."""
        args = {
            "pattern": _pattern(pattern),
            "path": check_path("." if path is None else path),
            "relative": path is None,
            "include_hidden": check_flag("include_hidden", include_hidden),
            "max_results": check_int("max_results", max_results, 1),
            "budget": self.limits.result_budget,
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
        exclude_dirs: Sequence[str] = GREP_EXCLUDE_DIRS,
    ) -> Operation[GrepResult]:
        """Lines containing ``pattern`` (a Python regex with ``fixed_strings=False``)
        in regular files below ``path``, optionally only files matching ``glob``.
        Directories below ``path`` named one of ``exclude_dirs`` (whole names, at
        any depth; never ``path`` itself) are not searched: ``.git`` by default,
        as deepagents does (docs/protocol.md, "grep"). Paths are ``path`` joined
        with the file's path below it; without ``path``, relative to the working
        directory (no ``./``), as ``ls`` and ``glob`` give them."""
        encoded = _pattern(pattern)
        if glob is not None and not isinstance(glob, str):
            raise errors.InvalidArgumentError("glob must be a str or None")
        root = check_path("." if path is None else path)
        excluded = _directory_names("exclude_dirs", exclude_dirs)
        args = {
            "pattern": encoded,
            "path": root,
            "glob": None if glob is None else protocol.encode_path(glob),
            "exclude_dirs": [protocol.encode_path(name) for name in excluded],
            "fixed_strings": check_flag("fixed_strings", fixed_strings),
            "ignore_case": check_flag("ignore_case", ignore_case),
            "max_matches": check_int("max_matches", max_matches, 1),
            "max_line_bytes": GREP_LINE_BYTES,
            "budget": self.limits.result_budget,
        }
        script = GREP(args, what=f"grep {pattern!r}")
        # GNU grep without an interpreter where it finds what the script would
        # (docs/protocol.md, "grep"); the script otherwise, or if it must
        # search after all (in the same round trip where the sandbox can tell)
        raw_glob = None if glob is None else os.fsencode(glob)
        raw = (os.fsencode(pattern), base64.b64decode(root), raw_glob, excluded)
        literal = is_literal(raw[0], fixed_strings)  # a plain word is a regex's own text
        found: GrepResult | None = None
        if literal and not ignore_case and ShellGrepCall.takes(*raw):
            found = yield from ShellGrepCall(script, script.what, *raw)
        if found is None:
            value, _ = yield from script
            found = grep_result(value)
        return found if path is not None else _below_working_directory(found)

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

    # -- workspace state ------------------------------------------------------------------

    def _op_snapshot(
        self,
        paths: Sequence[str] | None = None,
        *,
        exclude: Sequence[str] = (),
        store: SnapshotStore | None = None,
    ) -> Operation[Snapshot]:
        """Capture the workspace (the working directory, or ``paths`` in it)
        into ``store`` (default: a :class:`~sandbox_sdk.DirectorySnapshotStore`
        under ``$SANDBOX_SDK_HOME/snapshots``): every file, empty directory,
        mode, hard link and symlink inside, each file stored once by its
        SHA-256 across snapshots. ``exclude`` as for :meth:`download_dir`;
        a symlink pointing out of the workspace is left out. The manifest is
        saved last: an interrupted snapshot leaves none (docs/state.md)."""
        return take_snapshot(self, paths, exclude, store)

    def _op_restore(
        self, snapshot: Snapshot | str, *, store: SnapshotStore | None = None
    ) -> Operation[Snapshot]:
        """Put a snapshot's files back (bytes, modes, links), each blob checked
        against the manifest before anything in the sandbox changes: each
        of its paths replaced by the snapshot's tree in one step, so an
        interrupted restore leaves the old files or the new ones
        (docs/state.md). ``SnapshotDamagedError`` or ``SnapshotNotFoundError``
        leave the sandbox as it was. Returns the snapshot restored."""
        return restore_snapshot(self, snapshot, store)

    def expose_port(self, port: int, *, host: str = "127.0.0.1") -> str:
        """A URL on the host (``http://HOST:PORT``, for HTTP and WebSocket)
        that reaches ``port`` inside the sandbox, until :meth:`unexpose` or the
        sandbox's end. ``UnsupportedError`` where the provider has no way in
        (docs/policy.md); bwrap forwards into the jail's network namespace,
        docker relays each connection with an exec in the container."""
        raise errors.UnsupportedError(
            f"{type(self).__name__} cannot expose ports to the host "
            "(docs/policy.md lists the providers that can)"
        )

    def unexpose(self, port: int) -> None:
        """Stop forwarding ``port`` (connections through it end); nothing if it was not exposed."""

    async def aexpose_port(self, port: int, *, host: str = "127.0.0.1") -> str:
        """Async twin of :meth:`expose_port`."""
        return await anyio.to_thread.run_sync(lambda: self.expose_port(port, host=host))

    async def aunexpose(self, port: int) -> None:
        """Async twin of :meth:`unexpose`."""
        await anyio.to_thread.run_sync(self.unexpose, port)

    def fork(self, *, store: SnapshotStore | None = None, **create_options: Any) -> Self:
        """A new sandbox of the same provider with this one's workspace files:
        a :meth:`snapshot` (into ``store``, else a temporary one removed after)
        and ``provider.create(from_snapshot=..., **create_options)``."""
        with snapshot_store_for(store) as chosen:
            snapshot = self._drive(self._op_snapshot(store=chosen))
            forked: Self = self._owning_provider().create(
                from_snapshot=snapshot, snapshot_store=chosen, **create_options
            )
            return forked

    async def afork(self, *, store: SnapshotStore | None = None, **create_options: Any) -> Self:
        """Async twin of :meth:`fork`."""
        with snapshot_store_for(store) as chosen:
            snapshot = await self._adrive(self._op_snapshot(store=chosen))
            forked: Self = await self._owning_provider().acreate(
                from_snapshot=snapshot, snapshot_store=chosen, **create_options
            )
            return forked


def command_of(
    command: str | Sequence[str],
    cwd: PathArg | None,
    env: Mapping[str, str] | None,
    stdin: str | bytes | None,
    timeout: object,
) -> Command:
    """A user's command (a shell command, or an argument vector run without a
    shell) checked whole before any round trip."""
    argv = None
    if isinstance(command, str):
        check_command(command)
    elif isinstance(command, Sequence) and command:
        argv = tuple(command)
        for arg in argv:
            check_command(arg)
        command = shlex.join(argv)
    else:
        raise errors.InvalidArgumentError(
            f"command must be a str or a non-empty sequence of str (an argument vector), not {command!r}"
        )
    if cwd is not None:
        check_path(cwd, "cwd")
    if env is not None:
        for key, value in env.items():
            _env_key(key)
            _env_value(key, value)
    data = None if stdin is None else to_bytes("stdin", stdin)
    return Command(command, cwd, env, data, check_timeout(timeout), argv)


def _run_args(command: Command) -> dict[str, Any]:
    args: dict[str, Any] = (
        {"command": protocol.encode_path(command.command.encode("utf-8"))}
        if command.argv is None
        else {"argv": [protocol.encode_path(arg.encode("utf-8")) for arg in command.argv]}
    )
    if command.cwd is not None:
        args["cwd"] = check_path(command.cwd, "cwd")
    if command.env:
        args["env"] = {
            protocol.encode_path(_env_key(key)): protocol.encode_path(_env_value(key, value))
            for key, value in command.env.items()
        }
    return args


def command_call(
    sandbox: SandboxCore, script: Script[V], command: Command, args: dict[str, Any], *, timeout: float | None
) -> Operation[Reply[V] | None]:
    """A script call that runs ``command`` (with ``args`` of its own); the
    program (with its ``cwd`` and ``env``) and its stdin each in the command
    or, when too large for one, staged first."""
    program = _run_args(command)
    staged: list[str] = []
    if not sandbox.limits.fits_program(script.op, {**args, **program}, sandbox.scratch_dir):
        staged.append(scratch_path(sandbox, "program"))  # the script reads and removes it
        yield from stage(sandbox, staged[0], io.BytesIO(json.dumps(program).encode("ascii")))
        program = {"program": staged[0]}
    call = _command_call(sandbox, script, command, {**args, **program}, staged, timeout=timeout)
    return (yield from _consuming(call, staged))


def _command_call(
    sandbox: SandboxCore,
    script: Script[V],
    command: Command,
    args: dict[str, Any],
    staged: list[str],
    *,
    timeout: float | None,
) -> Operation[Reply[V] | None]:
    """:func:`command_call` once the program is in ``args``: stdin in the
    command or staged (its name added to ``staged``, for clean-up)."""
    what = script.op
    if command.stdin is None:
        return (yield from script.command(args, what=what, timeout=timeout))
    if sandbox.limits.fits(len(command.stdin), script.op, {**args, "stdin": 0}, sandbox.scratch_dir):
        return (yield from script.command({**args, "stdin": 0}, [command.stdin], what=what, timeout=timeout))
    staged.append(scratch_path(sandbox, "stdin"))  # the script opens and removes it
    yield from stage(sandbox, staged[-1], io.BytesIO(command.stdin))
    return (yield from script.command({**args, "stdin": staged[-1]}, what=what, timeout=timeout))


#: Seconds a foreground ``run`` with a timeout has beyond it to report (the
#: script kills the command at the timeout itself, and keeps its output).
RUN_REPORT_SECONDS = 10.0


def _run_foreground(sandbox: SandboxCore, command: Command) -> Operation[RunResult]:
    """``run`` in one round trip: the script captures both streams."""
    args = {"budget": sandbox.limits.result_budget, "timeout": command.timeout}
    timeout = None if command.timeout is None else command.timeout + RUN_REPORT_SECONDS
    reply = yield from command_call(sandbox, RUN, command, args, timeout=timeout)
    if reply is None:  # the provider's own timeout cut the script short
        return RunResult(output="", exit_code=TIMEOUT_EXIT_CODE, timed_out=True)
    value, blobs = reply
    collected = Collected(len(blobs[0]) + len(blobs[1]))
    for stream, data in pieces(value["order"], blobs):
        collected.add(stream, data)
    return collected.result(value["exit_code"], value["timed_out"], truncated=value["truncated"])


def spawn(
    sandbox: SandboxCore, command: Command, extra: Mapping[str, Any] | None = None
) -> Operation[Record]:
    """Start ``command`` detached (``remote/proc.py``'s ``spawn``, with
    ``extra`` arguments: its input); its record."""
    args = {**spawn_args(sandbox), "timeout": command.timeout, **(extra or {})}
    reply = yield from command_call(sandbox, SPAWN, command, args, timeout=CLEANUP_TIMEOUT)
    if reply is None:
        raise errors.SandboxTimeoutError("starting the process timed out")
    return Record(reply[0]["pid"], reply[0]["handle"])


def _streamed(
    sandbox: SandboxOperations, command: Command, sink: OutputSink, *, keep_output: bool = True
) -> Operation[RunResult]:
    """``_stream_command``, except that an argument vector and a command
    larger than one ``execute`` command always take the derived path: the
    scripts run an argument vector without a shell (so a program that cannot
    be executed is a typed error on every provider) and stage a large one."""
    program = _run_args(command)
    native = command.argv is None and sandbox.limits.fits_program(SPAWN.op, program, sandbox.scratch_dir)
    if native:
        return (yield from sandbox._stream_command(command, sink, keep_output=keep_output))
    return (yield from SandboxOperations._stream_command(sandbox, command, sink, keep_output=keep_output))


def _stream(sandbox: SandboxOperations, command: Command, events: deque[StreamEvent]) -> Operation[None]:
    """``stream``'s operation: the events go to ``events`` as they come."""
    decoders = Decoders()

    def sink(stream: StreamName, data: bytes) -> None:
        text = decoders.text(stream, data)
        if text:
            events.append(StreamEvent(kind=stream, text=text))

    result = yield from _streamed(sandbox, command, sink, keep_output=False)
    events.append(StreamEvent(kind="exit", exit_code=result.exit_code, timed_out=result.timed_out))


def _watcher_command(directory: FileInfo, recursive: bool, debounce: object) -> list[str]:
    """The argument vector of ``remote/_watcher.py`` watching ``directory``."""
    if directory.type != "dir":
        raise errors.SandboxNotADirectoryError(f"{directory.path} is not a directory: watch takes one")
    if isinstance(debounce, bool) or not isinstance(debounce, int | float) or not 0 < debounce <= 60:
        raise errors.InvalidArgumentError(f"debounce must be seconds from above 0 to 60, not {debounce!r}")
    source = resources.files("sandbox_sdk.remote").joinpath("_watcher.py").read_text("utf-8")
    flag = "1" if check_flag("recursive", recursive) else "0"
    return ["python3", "-I", "-S", "-c", source, directory.path, flag, repr(float(debounce))]


class _Lines:
    """The watcher's stdout as events: whole JSON lines, a partial one kept for the next piece."""

    def __init__(self) -> None:
        self.partial = ""

    def events(self, event: StreamEvent) -> Iterator[FileEvent]:
        if event.kind == "exit":
            if event.exit_code not in (0, None):
                raise errors.SandboxRuntimeError(
                    f"the watcher in the sandbox ended with status {event.exit_code}"
                )
            return
        if event.kind != "stdout":
            return
        *lines, self.partial = (self.partial + event.text).split("\n")
        for line in lines:
            yield FileEvent.model_validate_json(line)


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


def _directory_names(name: str, values: object) -> tuple[bytes, ...]:
    """Directory names (``grep``'s ``exclude_dirs``): a sequence of non-empty
    str, each one whole name (no ``/``, no NUL, not ``.`` or ``..``), as
    bytes; a lone str is refused (it would be taken as its characters)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise errors.InvalidArgumentError(f"{name} must be a sequence of str, not {type(values).__name__}")
    names = []
    for value in values:
        if not isinstance(value, str):
            raise errors.InvalidArgumentError(f"{name} must hold str, not {type(value).__name__}")
        try:
            raw = os.fsencode(value)
        except UnicodeEncodeError as exc:  # a lone surrogate outside surrogateescape's range
            raise errors.InvalidArgumentError(f"{name}: {value!r} is not Unicode: {exc.reason}") from None
        if not raw or b"/" in raw or b"\0" in raw or raw in (b".", b".."):
            raise errors.InvalidArgumentError(
                f"{name}: {value!r} is not a directory name (non-empty, no '/' or NUL, not '.' or '..')"
            )
        names.append(raw)
    return tuple(names)


def _below_working_directory(found: GrepResult) -> GrepResult:
    """A search of ``.`` with its ``./`` taken off each path (the root itself,
    unreadable, stays ``.``): the paths of a ``grep`` without a path."""

    def relative(path: str) -> str:
        return path[2:] if path.startswith("./") else path

    return found.model_copy(
        update={
            "matches": [match.model_copy(update={"path": relative(match.path)}) for match in found.matches],
            "unreadable": [relative(path) for path in found.unreadable],
        }
    )


def _pattern(pattern: str) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise errors.InvalidArgumentError("pattern must be a non-empty str")
    return protocol.encode_path(pattern)
