"""The local shell provider's fixtures: the shared state-directory ones
(tests/providers/host_state.py) over :class:`LocalProvider`."""

from __future__ import annotations

import pytest

from sandbox_sdk.providers.local import LocalProvider
from tests.providers.host_state import module_provider, provider, state_dir

__all__ = ["module_provider", "provider", "provider_class", "state_dir"]


@pytest.fixture(scope="module")
def provider_class() -> type[LocalProvider]:
    return LocalProvider
