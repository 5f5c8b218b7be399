"""The transfer contract through the remote provider: a bubblewrap runner
through a coordinator, a local runner taken directly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.testing import TransferContractTests
from tests.providers.remote.conftest import remote_sandbox


class TestRemoteTransfersOnBwrapViaCoordinator(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, coordinated_bwrap_url: str, token: str) -> Iterator[BaseSandbox]:
        yield from remote_sandbox(coordinated_bwrap_url, token, "transfers")


class TestRemoteTransfersOnLocal(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, local_url: str, token: str) -> Iterator[BaseSandbox]:
        yield from remote_sandbox(local_url, token, "transfers")
