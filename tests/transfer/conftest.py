"""Fixtures for the transfer tests: local sandboxes behind real transport limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import LimitedSandbox

from .transfer_helpers import LARGE_COMMAND_BYTES, LARGE_OUTPUT_BYTES, SMALL_COMMAND_BYTES, SMALL_OUTPUT_BYTES


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The sandbox's directory, seen from the test."""
    path = tmp_path / "sandbox"
    path.mkdir()
    return path


@pytest.fixture
def local(root: Path) -> LocalSandbox:
    return LocalSandbox(root)


@pytest.fixture
def small(local: LocalSandbox) -> LimitedSandbox:
    return LimitedSandbox(local, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES)


@pytest.fixture
def large(local: LocalSandbox) -> LimitedSandbox:
    return LimitedSandbox(local, max_command_bytes=LARGE_COMMAND_BYTES, max_output_bytes=LARGE_OUTPUT_BYTES)
