"""Local providers over temporary state directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalProvider


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def provider(state_dir: Path) -> LocalProvider:
    """A provider over a fresh state directory: a test sees only its own sandboxes."""
    return LocalProvider(state_dir)


@pytest.fixture(scope="module")
def module_provider(tmp_path_factory: pytest.TempPathFactory) -> LocalProvider:
    """One provider for a module's class-scoped sandboxes."""
    return LocalProvider(tmp_path_factory.mktemp("local-state"))
