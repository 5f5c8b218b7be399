"""The local provider's lifecycle: the conformance kit's contract and the
state-directory behaviour it shares with bwrap."""

from __future__ import annotations

from sandbox_sdk.testing import ProviderConformanceTests
from tests.providers.host_state import HostStateLifecycleTests


class TestLocalProvider(ProviderConformanceTests):
    """Runs on the conftest's ``provider``."""


class TestLocalLifecycle(HostStateLifecycleTests):
    """Runs on the conftest's ``provider_class``."""
