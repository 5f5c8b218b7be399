"""Bubblewrap providers over temporary state directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_sdk.providers.bwrap import BwrapProvider


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def provider(state_dir: Path) -> BwrapProvider:
    """A provider over a fresh state directory: a test sees only its own sandboxes."""
    return BwrapProvider(state_dir)


@pytest.fixture(scope="module")
def module_provider(tmp_path_factory: pytest.TempPathFactory) -> BwrapProvider:
    """One provider for a module's class-scoped sandboxes."""
    return BwrapProvider(tmp_path_factory.mktemp("bwrap-state"))
