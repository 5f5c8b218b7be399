"""Host directories mounted into a sandbox: ``create(mounts=[Mount(...)])``.

A mount is a real bind (a provider that cannot make one refuses the
option), never a rewriting of command text: the target path is what the
sandbox's commands and every file operation see. What is refused, before
anything is created (docs/policy.md): a target that is not absolute, is
``/`` or lies over or under a system directory or the workspace, targets
that overlap, a source that does not exist, is not a directory or regular
file, or is reached through a symlink (the source must be the path itself,
so a link planted later cannot point the mount elsewhere).
"""

from __future__ import annotations

import itertools
import os
import posixpath
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from sandbox_sdk import errors

#: Where no mount may go, nor under: the system the sandbox runs on, and
#: what the SDK itself mounts there.
SYSTEM_PATHS = (
    *("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc"),
    *("/run", "/sbin", "/sys", "/tmp", "/usr", "/var"),
)


class Mount(BaseModel):
    """``source`` (a host path) seen at ``target`` (an absolute path in the
    sandbox), read-only unless ``read_only=False``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    source: str
    target: str
    read_only: bool = True


def agent_data_mounts(
    data_dir: str | os.PathLike[str], skills_dir: str | os.PathLike[str] | None = None
) -> list[Mount]:
    """The layout agent harnesses such as DeerFlow give an agent:
    ``data_dir``'s ``workspace``, ``uploads`` and ``outputs`` read-write at
    ``/mnt/user-data/...``, and ``skills_dir`` read-only at ``/mnt/skills``.
    The directories must exist (they are the caller's: nothing is created)."""
    data = Path(data_dir)
    mounts = [
        Mount(source=str(data / name), target=f"/mnt/user-data/{name}", read_only=False)
        for name in ("workspace", "uploads", "outputs")
    ]
    if skills_dir is not None:
        mounts.append(Mount(source=str(skills_dir), target="/mnt/skills", read_only=True))
    return mounts


def check_mounts(mounts: Iterable[object], *, workspace: str) -> tuple[Mount, ...]:
    """``mounts`` as checked :class:`Mount` s (targets normalized, sources
    absolute), or a typed error naming the first one refused."""
    if isinstance(mounts, str | bytes) or not isinstance(mounts, Iterable):
        raise errors.InvalidArgumentError("mounts must be a list of sandbox_sdk.Mount")
    checked = [_checked(mount, workspace) for mount in mounts]
    targets = sorted(mount.target for mount in checked)
    for a, b in itertools.pairwise(targets):
        if b == a or b.startswith(a.rstrip("/") + "/"):
            raise errors.InvalidArgumentError(f"mount targets {a!r} and {b!r} overlap")
    return tuple(checked)


def _checked(mount: object, workspace: str) -> Mount:
    if isinstance(mount, dict):
        try:
            mount = Mount.model_validate(mount)
        except ValidationError as exc:
            raise errors.InvalidArgumentError(f"invalid mount: {exc}") from None
    if not isinstance(mount, Mount):
        raise errors.InvalidArgumentError(f"a mount must be a sandbox_sdk.Mount, not {mount!r}")
    target = _checked_target(mount.target, workspace)
    return Mount(source=_checked_source(mount.source), target=target, read_only=mount.read_only)


def _checked_target(target: str, workspace: str) -> str:
    if not target.startswith("/") or "\0" in target:
        raise errors.InvalidPathError(f"a mount target must be an absolute path: {target!r}", path=target)
    normal = posixpath.normpath(target)
    if normal.startswith("//"):
        normal = normal[1:]
    refused = [*SYSTEM_PATHS, workspace]
    for path in refused:
        if normal in ("/", path) or normal.startswith(path + "/") or path.startswith(normal + "/"):
            raise errors.InvalidPathError(
                f"mount target {target!r} would cover {path if normal != '/' else '/'}: mount under /mnt, "
                "/opt, /srv, /home or /data instead",
                path=target,
            )
    return normal


def _checked_source(source: str) -> str:
    if "\0" in source:
        raise errors.InvalidPathError("a mount source contains a NUL byte", path=source)
    path = os.path.abspath(os.path.expanduser(source))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise errors.SandboxFileNotFoundError(
            f"mount source {source!r} does not exist", path=source
        ) from None
    if stat.S_ISLNK(st.st_mode) or os.path.realpath(path) != path:
        raise errors.InvalidPathError(
            f"mount source {source!r} is reached through a symlink: name the directory itself "
            f"({os.path.realpath(path)!r})",
            path=source,
        )
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise errors.InvalidPathError(f"mount source {source!r} is not a directory or a file", path=source)
    return path


def open_source(mount: Mount) -> int:
    """An ``O_PATH`` descriptor of the mount's source, opened without following
    a symlink and checked to be the path recorded: what a jail binds, so a
    source replaced since ``create`` (a symlink planted in its place) is
    refused rather than followed."""
    try:
        fd = os.open(mount.source, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise errors.SandboxFileNotFoundError(
            f"mount source {mount.source!r} no longer exists", path=mount.source
        ) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode) or os.path.realpath(f"/proc/self/fd/{fd}") != mount.source:
            raise errors.InvalidPathError(
                f"mount source {mount.source!r} was replaced by a symlink since the sandbox was created",
                path=mount.source,
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def as_records(mounts: Sequence[Mount]) -> list[dict[str, object]]:
    """Mounts as a sandbox record keeps them."""
    return [mount.model_dump() for mount in mounts]
