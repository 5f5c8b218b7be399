"""The bubblewrap provider's fixtures: the shared state-directory ones
(tests/providers/host_state.py) over :class:`BwrapProvider`."""

from __future__ import annotations

import pytest

from sandbox_sdk.providers.bwrap import BwrapProvider
from tests.providers.host_state import module_provider, provider, state_dir

__all__ = ["module_provider", "provider", "provider_class", "state_dir"]


@pytest.fixture(scope="module")
def provider_class() -> type[BwrapProvider]:
    return BwrapProvider
