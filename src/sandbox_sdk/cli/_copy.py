"""``sbx cp``: a file or a directory tree into or out of a sandbox, with a progress bar.

The SDK's transfers do the work (verified, all or nothing: ``upload_files``,
``upload_dir``, ``download_file``, ``download_dir``); their ``progress=``
callback feeds the bar.
"""

from __future__ import annotations

import os
import posixpath
import re
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from sandbox_sdk import BaseSandbox, DirectoryTransferResult, SandboxFileNotFoundError, SandboxProvider
from sandbox_sdk.cli._text import shown
from sandbox_sdk.transfer import SymlinkPolicy

#: ``ID:PATH``. The ID holds no ``/``, so a local name with a colon is written ``./a:b``.
REMOTE = re.compile(r"^(?P<id>[^/:]+):(?P<path>.*)$", re.DOTALL)
#: A transfer shows its bar once it has run this long: a quick copy prints nothing.
SHOW_AFTER = 0.3


class TransferBar:
    """A ``progress=`` callback that draws a bar on ``console`` once the transfer
    has taken more than :data:`SHOW_AFTER` seconds; nothing when the console is
    not an interactive terminal or is quiet."""

    def __init__(self, console: Console, description: str) -> None:
        self.console = console
        self.description = shown(description)
        self.enabled = console.is_interactive and not console.quiet
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.task = TaskID(0)

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if not self.enabled or time.monotonic() - self.started < SHOW_AFTER:
                return
            self.bar = Progress(
                TextColumn("{task.description}", markup=False),  # a name's brackets are not markup
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.description, total=total)
        self.bar.update(self.task, completed=done, total=total)

    def __enter__(self) -> TransferBar:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.stop()


def split_remote(argument: str) -> tuple[str, str] | None:
    """``(id, path)`` for an ``ID:PATH`` argument (an empty path is the
    sandbox's working directory), ``None`` for a local path."""
    match = REMOTE.match(argument)
    return (match["id"], match["path"] or ".") if match else None


def copy(
    sandboxes: SandboxProvider[Any],
    source: str,
    dest: str,
    exclude: Sequence[str],
    symlinks: SymlinkPolicy,
    console: Console,
) -> None:
    """Copy ``source`` to ``dest``: exactly one of them is ``ID:PATH``.
    ``exclude`` and ``symlinks``: as ``upload_dir`` / ``download_dir`` take them."""
    remote_source, remote_dest = split_remote(source), split_remote(dest)
    if remote_dest is not None and remote_source is None:
        sandbox_id, path = remote_dest
        upload(sandboxes.get(sandbox_id), Path(source), path, exclude, symlinks, console)
    elif remote_source is not None and remote_dest is None:
        sandbox_id, path = remote_source
        download(sandboxes.get(sandbox_id), path, Path(dest), exclude, symlinks, console)
    else:
        raise click.UsageError("one of SOURCE and DEST must be ID:PATH and the other a local path")


def upload(
    sandbox: BaseSandbox,
    local: Path,
    remote: str,
    exclude: Sequence[str],
    symlinks: SymlinkPolicy,
    console: Console,
) -> None:
    """``local`` (a file or a tree) to ``remote``, or into it if it is a directory."""
    is_dir = local.is_dir()
    if not is_dir:
        os.stat(local)  # a missing source is a FileNotFoundError naming it
    target = remote
    if remote.endswith("/") or remote_is_dir(sandbox, remote):
        target = posixpath.join(remote, local.resolve().name)
    with TransferBar(console, f"↑ {target}") as bar:
        if is_dir:
            tree = sandbox.upload_dir(local, target, exclude=exclude, symlinks=symlinks, progress=bar)
            report_skipped(tree, local)
            return
        (result,) = sandbox.upload_files([(target, str(local))], progress=bar)
    if result.error is not None:
        raise click.ClickException(shown(f"{sandbox.id}:{target}: {result.error}"))


def remote_is_dir(sandbox: BaseSandbox, path: str) -> bool:
    try:
        return sandbox.stat(path).type == "dir"
    except SandboxFileNotFoundError:
        return False


def download(
    sandbox: BaseSandbox,
    remote: str,
    local: Path,
    exclude: Sequence[str],
    symlinks: SymlinkPolicy,
    console: Console,
) -> None:
    """``remote`` (a file or a tree) to ``local``, or into it if it is a directory."""
    info = sandbox.stat(remote)  # a missing source is a SandboxFileNotFoundError naming it
    name = PurePosixPath(remote).name
    target = local / name if local.is_dir() and name not in ("", "..") else local
    with TransferBar(console, f"↓ {target}") as bar:
        if info.type == "dir":
            tree = sandbox.download_dir(remote, target, exclude=exclude, symlinks=symlinks, progress=bar)
            report_skipped(tree, remote)
        else:
            sandbox.download_file(remote, target, progress=bar)


def report_skipped(result: DirectoryTransferResult, root: str | Path) -> None:
    """Name on stderr each symlink left out because it points outside the tree."""
    for path in result.skipped:
        name = shown(posixpath.join(root, path))
        click.echo(f"sbx: skipped {name}: a symlink pointing outside the tree", err=True)
