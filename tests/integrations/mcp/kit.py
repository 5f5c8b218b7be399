"""Helpers of the MCP server tests: a client of the SDK's own, connected in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client, types
from mcp.client.context import ClientRequestContext
from pydantic import FileUrl

#: Every tool the server offers.
TOOLS = {
    "execute",
    "ls",
    "read_file",
    "write_file",
    "edit_file",
    "glob",
    "grep",
    "upload",
    "download",
    "start_process",
    "read_process_output",
    "write_process_stdin",
    "kill_process",
}


def roots_callback(roots: Sequence[Path]) -> Any:
    """A client's answer to ``roots/list``: these directories, as ``file://`` URIs."""

    async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl(root.as_uri())) for root in roots])

    return list_roots


@asynccontextmanager
async def connect(
    server: Any, roots: Sequence[Path] | None = None, *, mode: str = "auto"
) -> AsyncIterator[Client]:
    """A client of ``server`` (an in-process server, stdio parameters or a URL);
    with ``roots`` it declares the roots capability and those directories."""
    callback = None if roots is None else roots_callback(roots)
    async with Client(server, list_roots_callback=callback, mode=mode) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> tuple[str, bool]:
    """The text of a tool's result and whether it is an error."""
    result = await client.call_tool(tool, arguments)
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text, bool(result.is_error)


async def ok(client: Client, tool: str, **arguments: Any) -> str:
    """The text of a tool's result, which must not be an error."""
    text, failed = await call(client, tool, **arguments)
    assert not failed, text
    return text


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """The text of a tool's result, which must be an ``Error:`` result."""
    text, failed = await call(client, tool, **arguments)
    assert failed, text
    assert "Error" in text, text
    return text
