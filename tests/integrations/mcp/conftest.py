"""Fixtures of the MCP server tests: a real sandbox of each local provider in a
temp state directory, and a directory standing for the client's root.

Without the ``mcp`` extra, every test module here skips itself (importorskip)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_sdk import BaseSandbox, get_provider

if TYPE_CHECKING:
    from mcp.server import MCPServer

#: Seconds between progress notifications in the tests (5 s when served).
PROGRESS_INTERVAL = 0.1


@pytest.fixture(params=["local", "bwrap"])
def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseSandbox]:
    provider = get_provider(request.param, state_dir=tmp_path / "state")
    sandbox = provider.create()
    yield sandbox
    provider.delete(sandbox_id=sandbox.id)


@pytest.fixture
def server(sandbox: BaseSandbox) -> MCPServer[Any]:
    from sandbox_sdk.integrations.mcp import create_server

    return create_server(sandbox, progress_interval=PROGRESS_INTERVAL)


@pytest.fixture
def client_dir(tmp_path: Path) -> Path:
    """The directory the client declares as its root."""
    root = tmp_path / "client"
    root.mkdir()
    return root
