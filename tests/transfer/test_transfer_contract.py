"""The transfer contract kit against the execute()-based implementation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import LimitedSandbox
from sandbox_sdk.testing.transfer_suite import TransferContractTests

from .transfer_helpers import LARGE_COMMAND_BYTES, LARGE_OUTPUT_BYTES


class TestLocalTransfers(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
        root: Path = tmp_path_factory.mktemp("transfer-contract")
        yield LocalSandbox(root)


class TestLimitedTransfers(TransferContractTests):
    """Through a 1 MiB command limit and a 1 MiB output cap, as on a remote provider."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitedSandbox]:
        root: Path = tmp_path_factory.mktemp("transfer-contract-limited")
        yield LimitedSandbox(
            LocalSandbox(root), max_command_bytes=LARGE_COMMAND_BYTES, max_output_bytes=LARGE_OUTPUT_BYTES
        )
