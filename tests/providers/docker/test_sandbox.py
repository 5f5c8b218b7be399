"""The sandbox conformance kit and the transfer contract against containers of a real engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk import BaseSandbox
from sandbox_sdk.providers.docker import DockerProvider
from sandbox_sdk.testing import SandboxConformanceTests, TransferContractTests, provided_sandbox

pytestmark = pytest.mark.engines


class TestDockerSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, module_provider: DockerProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(module_provider, "conformance")


class TestDockerTransfers(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, module_provider: DockerProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(module_provider, "transfers")
