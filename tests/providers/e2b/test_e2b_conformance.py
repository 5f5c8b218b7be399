"""The conformance suite against E2B through the real SDK and the fake service:
once on a sandbox created with the sync ``Sandbox`` and once on one created
with the native ``AsyncSandbox`` (each then reaches the other flavour)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from e2b import AsyncSandbox

from sandbox_sdk.providers.e2b import E2BSandbox
from sandbox_sdk.testing import SandboxConformanceTests
from tests.fakes.e2b_server import FakeE2BServer
from tests.providers.e2b.support import API_KEY, make_provider


class TestE2BSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, fake_e2b: FakeE2BServer) -> Iterator[E2BSandbox]:
        provider = make_provider(fake_e2b)
        sandbox = provider.create(labels={"suite": "conformance"})
        yield sandbox
        provider.delete(sandbox_id=sandbox.id)


@pytest.mark.slow
class TestE2BSandboxFromAsyncSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, fake_e2b: FakeE2BServer) -> Iterator[E2BSandbox]:
        native = asyncio.run(
            AsyncSandbox.create(timeout=600, api_key=API_KEY, api_url=fake_e2b.url, sandbox_url=fake_e2b.url)
        )
        yield E2BSandbox(native)
        make_provider(fake_e2b).delete(sandbox_id=native.sandbox_id)
