"""The transfer contract kit against the bubblewrap sandbox: the embedded
default implementation, through bwrap's own 4 MiB commands and 8 MiB outputs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk import BaseSandbox
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.testing import TransferContractTests, provided_sandbox


class TestBwrapTransfers(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, module_provider: BwrapProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(module_provider, "transfers")
