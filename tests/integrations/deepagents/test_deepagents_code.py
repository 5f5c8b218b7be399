"""The ``deepagents_code.sandbox_providers`` entry point and the factory it names,
driven as deepagents-code's registry drives it (``entry.load()()``, then
``get_or_create`` / ``delete`` by keyword). deepagents-code itself needs Python
3.14, so it is not installed here: its registry's calls are made directly, on
bubblewrap sandboxes."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest.importorskip("deepagents")

from sandbox_sdk import errors
from sandbox_sdk.integrations.deepagents import DeepAgentsBackend
from sandbox_sdk.integrations.deepagents_code import (
    ENTRY_POINT_GROUP,
    ENTRY_POINT_NAME,
    DeepAgentsCodeProvider,
)
from sandbox_sdk.provider_kit.host_state import HOME_ENV
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.local import LocalProvider
from sandbox_sdk.registry import PROVIDER_ENV


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The state of every provider made from the environment, under tmp_path."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    return tmp_path


def discovered() -> DeepAgentsCodeProvider:
    """What deepagents-code's ``SandboxRegistry.create_provider`` does with an entry point."""
    (point,) = entry_points(group=ENTRY_POINT_GROUP, name=ENTRY_POINT_NAME)
    provider: DeepAgentsCodeProvider = point.load()()
    return provider


def test_the_distribution_registers_the_factory_under_deepagents_codes_group() -> None:
    (point,) = entry_points(group="deepagents_code.sandbox_providers", name="sandbox-sdk")
    assert point.value == "sandbox_sdk.integrations.deepagents_code:DeepAgentsCodeProvider"
    assert point.dist is not None
    assert point.dist.name == "sandbox-sdk-py"
    assert point.load() is DeepAgentsCodeProvider


def test_the_factory_takes_no_arguments_and_reads_the_sdks_provider_variable(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PROVIDER_ENV, raising=False)
    assert isinstance(discovered().provider, BwrapProvider)
    monkeypatch.setenv(PROVIDER_ENV, "local")
    assert isinstance(discovered().provider, LocalProvider)
    # Without deepagents-code (Python 3.14+), no metadata: the registry then assumes
    # /workspace, a sandbox id to reuse and no snapshots, which is what bwrap has.
    assert discovered().metadata is None


def test_a_sandbox_is_made_reused_by_id_and_deleted_as_deepagents_code_does(home: Path) -> None:
    backend = discovered().get_or_create(sandbox_id=None)
    assert isinstance(backend, DeepAgentsBackend)
    assert backend.write("/workspace/notes.txt", "kept").error is None
    # Its server process gets the id from the client process, and a registry of its own.
    again = discovered().get_or_create(sandbox_id=backend.id)
    assert again.id == backend.id
    assert again.execute("cat /workspace/notes.txt; pwd").output == "kept/workspace\n"
    discovered().delete(sandbox_id=backend.id)
    with pytest.raises(errors.SandboxNotFoundError):
        discovered().get_or_create(sandbox_id=backend.id)
    discovered().delete(sandbox_id=backend.id)  # already gone: not an error


async def test_the_async_forms_use_the_providers_async_twins(home: Path) -> None:
    provider = discovered()
    backend = await provider.aget_or_create(labels={"thread": "t1"})
    assert (await backend.aexecute("echo $((6 * 7))")).output == "42\n"
    same = await provider.aget_or_create(labels={"thread": "t1"})
    assert same.id == backend.id
    await provider.adelete(sandbox_id=backend.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await provider.aget_or_create(sandbox_id=backend.id)


def test_a_misspelt_param_is_a_typed_error_and_makes_no_sandbox(home: Path) -> None:
    provider = discovered()
    with pytest.raises(errors.InvalidArgumentError, match="ttll"):
        provider.get_or_create(ttll=5)
    with pytest.raises(errors.InvalidArgumentError, match="snapshot"):
        provider.delete(sandbox_id="bwrap-0", snapshot="x")
    assert list(provider.provider.iter_sandboxes()) == []
