"""The bubblewrap provider's lifecycle: the conformance kit's contract, the
state-directory behaviour it shares with local, and a jail that cannot even
start a shell rolled back."""

from __future__ import annotations

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.bwrap import BwrapProvider, ResourceLimits
from sandbox_sdk.testing import ProviderConformanceTests
from tests.providers.host_state import HostStateLifecycleTests, leftovers


class TestBwrapProvider(ProviderConformanceTests):
    """Runs on the conftest's ``provider``."""


class TestBwrapLifecycle(HostStateLifecycleTests):
    """Runs on the conftest's ``provider_class``."""


def test_failed_health_check_rolls_the_sandbox_back(provider: BwrapProvider) -> None:
    # 1 MiB of address space: bash cannot even start, so the sandbox is dead on arrival
    with pytest.raises(errors.SandboxRuntimeError, match="health check"):
        provider.create(limits=ResourceLimits(memory_bytes=1024 * 1024))
    assert leftovers(provider) == []
