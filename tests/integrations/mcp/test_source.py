"""Which sandbox a served session works in, and when it is deleted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from sandbox_sdk import SandboxProvider, get_provider
from sandbox_sdk.integrations.mcp import SandboxSource, create_server
from sandbox_sdk.integrations.mcp.server import SESSION_LABEL
from tests.integrations.mcp.kit import connect, ok, refused


@pytest.fixture
def provider(tmp_path: Path) -> SandboxProvider[Any]:
    return get_provider("local", state_dir=tmp_path / "state")


def sandbox_ids(provider: SandboxProvider[Any]) -> list[str]:
    return [info.id for info in provider.iter_sandboxes()]


async def test_a_session_sandbox_is_made_on_first_use_and_deleted_at_close(
    provider: SandboxProvider[Any],
) -> None:
    async with SandboxSource(provider) as source, connect(create_server(source)) as client:
        await client.list_tools()
        assert sandbox_ids(provider) == []
        await ok(client, "write_file", path="a.txt", content="a")
        await ok(client, "read_file", path="a.txt")
        (info,) = provider.iter_sandboxes()
        assert list(info.labels) == [SESSION_LABEL]
    assert sandbox_ids(provider) == []


async def test_keep_leaves_the_session_sandbox(provider: SandboxProvider[Any]) -> None:
    async with SandboxSource(provider, keep=True) as source, connect(create_server(source)) as client:
        await ok(client, "execute", command="true")
    assert len(sandbox_ids(provider)) == 1


async def test_a_labelled_sandbox_is_shared_across_sessions_and_kept(provider: SandboxProvider[Any]) -> None:
    labels = {"project": "demo"}
    async with SandboxSource(provider, labels=labels) as source, connect(create_server(source)) as client:
        await ok(client, "write_file", path="notes.txt", content="remember\n")
    async with SandboxSource(provider, labels=labels) as source, connect(create_server(source)) as client:
        assert await ok(client, "read_file", path="notes.txt") == "     1\tremember"
    (info,) = provider.iter_sandboxes()
    assert info.labels == labels


async def test_an_existing_sandbox_by_id_is_kept(provider: SandboxProvider[Any]) -> None:
    existing = provider.create()
    async with (
        SandboxSource(provider, sandbox_id=existing.id) as source,
        connect(create_server(source)) as client,
    ):
        await ok(client, "write_file", path="a.txt", content="a")
    assert sandbox_ids(provider) == [existing.id]
    assert existing.read("a.txt").content == "a"


async def test_a_sandbox_that_cannot_be_had_is_an_error_result(provider: SandboxProvider[Any]) -> None:
    missing = SandboxSource(provider, sandbox_id="local-000000000000000000000000")
    async with missing as source, connect(create_server(source)) as client:
        text = await refused(client, "execute", command="true")
        assert text.startswith("Error: the sandbox could not run the command: ")
        assert (await refused(client, "ls")).startswith("Error: cannot list '.': ")
