"""The sandbox conformance kit and the transfer contract against pods of a real cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk import BaseSandbox
from sandbox_sdk.providers.kubernetes import KubernetesProvider
from sandbox_sdk.testing import SandboxConformanceTests, TransferContractTests, provided_sandbox

pytestmark = pytest.mark.engines


class TestKubernetesSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, module_provider: KubernetesProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(module_provider, "conformance")


class TestKubernetesTransfers(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, module_provider: KubernetesProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(module_provider, "transfers")
