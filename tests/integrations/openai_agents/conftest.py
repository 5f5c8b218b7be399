"""A sandbox-sdk provider (bwrap and local, each test on both) behind the
Agents SDK client, with its sandboxes in the test's own state directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "agents", reason="the openai-agents extra is not installed: pip install -e '.[openai-agents]'"
)

from agents.sandbox.session import SandboxSession

from sandbox_sdk.integrations.openai_agents import SandboxSDKClient, SandboxSDKSession
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.registry import get_provider


@pytest.fixture(autouse=True)
def snapshot_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the SDK's runner keeps the snapshots of the sessions it makes
    (``$XDG_STATE_HOME/openai-agents-python/sandbox/snapshots``, else under ``~/.local/state``):
    the test's own directory, never the user's."""
    home = tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


@pytest.fixture(params=["bwrap", "local"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SandboxProvider[Any]]:
    with get_provider(request.param, state_dir=str(tmp_path / "state")) as made:
        yield made


@pytest.fixture
def client(provider: SandboxProvider[Any]) -> SandboxSDKClient:
    return SandboxSDKClient(provider)


def sandbox_ids(provider: SandboxProvider[Any]) -> list[str]:
    """The sandboxes the provider holds now."""
    return [info.id for info in provider.iter_sandboxes()]


def inner(session: SandboxSession) -> SandboxSDKSession:
    """Our session inside the SDK's instrumented wrapper."""
    sdk_session = session._inner
    assert isinstance(sdk_session, SandboxSDKSession)
    return sdk_session


def sandbox_id(session: SandboxSession) -> str:
    """The id of the sandbox a session runs in."""
    return inner(session).state.sandbox_id
