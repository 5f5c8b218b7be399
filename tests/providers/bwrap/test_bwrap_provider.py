"""The provider and sandbox conformance suites against the bubblewrap provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox
from sandbox_sdk.testing.provider_suite import ProviderConformanceTests
from sandbox_sdk.testing.sandbox_suite import SandboxConformanceTests
from sandbox_sdk.testing.transfer_suite import TransferContractTests


class TestBwrapProvider(ProviderConformanceTests):
    @pytest.fixture
    def provider(self, tmp_path: Path) -> Iterator[BwrapProvider]:
        yield BwrapProvider(tmp_path / "state")


def one_sandbox(state_dir: Path) -> Iterator[BwrapSandbox]:
    """A sandbox of a provider in ``state_dir``, deleted afterwards."""
    provider = BwrapProvider(state_dir)
    sandbox = provider.create()
    yield sandbox
    provider.delete(sandbox_id=sandbox.id)


class TestBwrapSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BwrapSandbox]:
        yield from one_sandbox(tmp_path_factory.mktemp("bwrap-conformance"))


class TestBwrapTransfers(TransferContractTests):
    """The embedded default, held to the transfer contract through its own
    4 MiB commands and 8 MiB outputs."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BwrapSandbox]:
        yield from one_sandbox(tmp_path_factory.mktemp("bwrap-transfers"))
