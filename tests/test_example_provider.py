"""The provider guide's worked example passes the conformance kit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from examples.unshare_provider import UnshareProvider, UnshareSandbox
from sandbox_sdk.testing import SandboxConformanceTests


@pytest.fixture(scope="module")
def provider() -> Iterator[UnshareProvider]:
    provider = UnshareProvider()
    yield provider
    for sandbox_id in list(provider.sandboxes):
        provider.delete(sandbox_id=sandbox_id)


class TestUnshareSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, provider: UnshareProvider) -> UnshareSandbox:
        return provider.create(labels={"suite": "conformance"})


def test_example_has_no_network(provider: UnshareProvider) -> None:
    sandbox = provider.get_or_create(labels={"net": "none"})
    assert provider.get_or_create(labels={"net": "none"}).id == sandbox.id
    interfaces = sandbox.execute("tail -n +3 /proc/net/dev | cut -d: -f1").output.split()
    assert interfaces == ["lo"]
    assert provider.list(labels={"net": "none"}).items[0].id == sandbox.id
