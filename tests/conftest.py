"""Shared fixtures: real sandboxes on real directories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalSandbox


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalSandbox]:
    """A fresh local sandbox rooted in a temp directory."""
    root = tmp_path / "sandbox"
    root.mkdir()
    yield LocalSandbox(root)
