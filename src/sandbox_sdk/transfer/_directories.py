"""Directory trees, moved as one tar archive each way.

An upload packs the tree on the client, stages the archive into the sandbox
and extracts it there; a download has the sandbox pack the tree, downloads
the archive and extracts it here. Both sides check every member of an
archive before writing anything (:func:`safe_extract` here, the ``archive``
script there).
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Literal

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import ARCHIVE_EXTRACTED, CREATE_ARCHIVE, EXTRACT_ARCHIVE
from sandbox_sdk._core import CLEANUP_TIMEOUT, Operation, PathArg, SandboxCore, check_path, scratch_path
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk.models import DirectoryTransferResult
from sandbox_sdk.remote import archive as remote_archive
from sandbox_sdk.remote._runtime import Fail, file_sha256
from sandbox_sdk.transfer._download import download
from sandbox_sdk.transfer._sources import Progress, Tally
from sandbox_sdk.transfer._staging import COMMIT_REFUSED, discard, remove_staged, stage

#: Directory archives are spooled in memory up to this size, then to disk.
SPOOL_BYTES = 8 * 1024 * 1024
#: What ``upload_dir`` / ``download_dir`` do with a symlink pointing outside the tree.
SymlinkPolicy = Literal["skip", "refuse", "copy-inside"]


def check_selection(exclude: Sequence[str], symlinks: object) -> list[str]:
    """``exclude`` as a list of patterns, after checking both arguments."""
    if isinstance(exclude, str) or not all(isinstance(p, str) and p for p in exclude):
        raise errors.InvalidArgumentError("exclude must be a list of non-empty glob patterns (str)")
    if symlinks not in remote_archive.SYMLINK_POLICIES:
        policies = ", ".join(map(repr, remote_archive.SYMLINK_POLICIES))
        raise errors.InvalidArgumentError(f"symlinks must be one of {policies}, not {symlinks!r}")
    return list(exclude)


def upload_dir(
    sandbox: SandboxCore,
    local_dir: str | os.PathLike[str],
    remote_dir: PathArg,
    progress: Progress | None,
    *,
    exclude: Sequence[str],
    symlinks: SymlinkPolicy,
) -> Operation[DirectoryTransferResult]:
    """Copy a local tree into ``remote_dir``; returns what was copied and skipped."""
    root = Path(local_dir)
    select = remote_archive.TreeFilter(os.fspath(root), check_selection(exclude, symlinks), symlinks)
    if not root.is_dir():
        raise errors.SandboxNotADirectoryError(f"not a local directory: {root}", path=str(root))
    args = {"archive": scratch_path(sandbox, "upload", ".tar"), "path": check_path(remote_dir)}
    with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
        size = _pack(select, spool)
        try:
            yield from stage(sandbox, args["archive"], spool, tally=Tally(progress, size))
            entries = yield from _extract(args, spool, what=f"upload_dir to {os.fsdecode(remote_dir)!r}")
            return DirectoryTransferResult(entries=entries, skipped=select.skipped)
        except BaseException as exc:
            # The extract script removes the archive itself, but a call
            # that failed may never have run it, or lost the reply of
            # the commit that put the archive in place.
            if can_clean_up(exc):
                yield from discard([args["archive"]])
            raise


def _extract(args: dict[str, str], archive: IO[bytes], *, what: str) -> Operation[int]:
    """Extract the staged ``archive``; returns its number of members. If the
    reply is lost (not a refusal), ask whether the tree landed, as a staged
    upload's commit does."""
    try:
        value, _ = yield from EXTRACT_ARCHIVE(args, what=what)
    except errors.SandboxError as exc:
        if isinstance(exc, COMMIT_REFUSED):
            raise
        members = _members(archive)
        if not (yield from _extracted(args, members)):
            raise
        return len(members)
    return value["members"]


def _members(archive: IO[bytes]) -> list[tuple[str, str, str]]:
    """What the tree holds once ``archive`` is extracted: each member's
    payload-encoded name, kind, and a file's SHA-256 or a link's target."""
    archive.seek(0)
    members = []
    with tarfile.open(fileobj=archive, mode="r:") as tar:
        for member in tar:
            kind, detail = "other", ""
            if member.isreg():
                content = tar.extractfile(member)
                assert content is not None  # a regular member has content
                kind, detail = "file", file_sha256(content)
            elif member.isdir():
                kind = "dir"
            elif member.issym():
                kind, detail = "symlink", protocol.encode_path(member.linkname)
            members.append((protocol.encode_path(member.name), kind, detail))
    return members


def _extracted(args: dict[str, str], members: list[tuple[str, str, str]]) -> Operation[bool]:
    """Whether the extract of ``args`` landed; ``False`` if that cannot be told."""
    try:
        check = {**args, "members": members}
        value, _ = yield from ARCHIVE_EXTRACTED(check, what="check an extract", timeout=CLEANUP_TIMEOUT)
    except errors.SandboxError:
        return False
    return value["landed"] is True


def _pack(select: remote_archive.TreeFilter, spool: IO[bytes]) -> int:
    """Write the tree ``select`` chooses into ``spool`` as a tar archive;
    returns its size, with ``spool`` rewound."""
    try:
        with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
            select.pack(tar)
    except Fail as exc:
        raise errors.InvalidPathError(f"refusing the tree: {exc.message}") from None
    size = spool.tell()
    spool.seek(0)
    return size


def download_dir(
    sandbox: SandboxCore,
    remote_dir: PathArg,
    local_dir: str | os.PathLike[str],
    progress: Progress | None,
    *,
    exclude: Sequence[str],
    symlinks: SymlinkPolicy,
) -> Operation[DirectoryTransferResult]:
    """Copy a sandbox tree into ``local_dir``; returns what was copied and skipped."""
    what = f"download_dir {os.fsdecode(remote_dir)!r}"
    archive = scratch_path(sandbox, "download", ".tar")
    args = {
        "archive": archive,
        "path": check_path(remote_dir),
        "exclude": [protocol.encode_path(pattern) for pattern in check_selection(exclude, symlinks)],
        "symlinks": symlinks,
    }
    try:
        created, _ = yield from CREATE_ARCHIVE(args, what=what)
        with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
            yield from download(sandbox, archive, spool, max_size=None, tally=Tally(progress), what=what)
            spool.seek(0)
            count = safe_extract(spool, Path(local_dir))
    except BaseException as exc:
        # Also after a failed create: it may have run and lost its reply.
        if can_clean_up(exc):
            yield from discard([archive])
        raise
    yield from remove_staged(archive, what=what)
    skipped = [protocol.decode_path(name) for name in created["skipped"]]
    return DirectoryTransferResult(entries=count, skipped=skipped)


def safe_extract(archive: IO[bytes], dest: Path) -> int:
    """Extract a tar archive into ``dest`` after checking every member.

    Nothing is written unless the archive as a whole passes the sandbox's own
    :func:`~sandbox_sdk.remote.archive.check_members` (no absolute names, no
    ``..``, no links pointing outside ``dest``, nothing below or through a
    symlink member, no device files). Extraction then re-checks each member
    with :func:`tarfile.data_filter` where it exists (Python 3.11.4+), and
    drops the sandbox's owners; permission bits of files and directories are
    kept. Returns the number of members."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=archive, mode="r:") as tar:
        members = tar.getmembers()
        try:
            remote_archive.check_members(os.path.realpath(dest), members)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter=_data_keeping_modes)
            else:  # Python before 3.11.4 (Debian 12's 3.11.2): check_members alone guards
                for member in members:
                    member.mode &= 0o777
                    member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
                tar.extractall(dest, members=members)
        except Fail as exc:
            raise errors.InvalidPathError(f"refusing the archive: {exc.message}") from None
        except tarfile.FilterError as exc:
            raise errors.InvalidPathError(f"refusing the archive: {exc}") from None
    return len(members)


def _data_keeping_modes(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    checked = tarfile.data_filter(member, dest)
    if member.isreg() or member.isdir():
        return checked.replace(mode=member.mode & 0o777, deep=False)
    return checked
