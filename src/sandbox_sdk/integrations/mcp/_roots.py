"""The client's declared roots: the only local directories ``upload`` may read
from and ``download`` may write into."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import ListRoots
from mcp.types import ListRootsResult


class OutsideRootsError(ValueError):
    """A local path the client's roots do not cover; its message is the tool's ``Error:`` text."""


def ask_client_roots(ctx: Context[Any, Any]) -> ListRoots | ListRootsResult:
    """A resolver asking the client for its roots, on either protocol era; a
    client without the roots capability has none, so every local path is refused."""
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.roots is None:
        return ListRootsResult(roots=[])
    return ListRoots()


def root_dirs(result: ListRootsResult) -> list[Path]:
    """The local directories of the ``file://`` roots, symlinks resolved (other schemes are ignored)."""
    dirs = []
    for root in result.roots:
        parts = urlsplit(str(root.uri))
        if parts.scheme == "file" and parts.netloc in ("", "localhost"):
            dirs.append(Path(os.path.realpath(unquote(parts.path))))
    return dirs


def inside_roots(path: str, roots: Sequence[Path]) -> Path:
    """``path`` with every symlink resolved, if that lies under one of ``roots``.

    Resolving first means a link inside a root that points out of it is refused
    like the place it points to."""
    if not roots:
        raise OutsideRootsError(
            f"Error: cannot use the local path '{path}': the client declared no roots, "
            "so no local file may be read or written"
        )
    if not os.path.isabs(path) or "\0" in path:
        raise OutsideRootsError(f"Error: invalid local path '{path}': it must be absolute, without NUL")
    resolved = Path(os.path.realpath(path))
    if not any(resolved.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(root) for root in roots)
        raise OutsideRootsError(f"Error: the local path '{path}' is outside the client's roots ({allowed})")
    return resolved
