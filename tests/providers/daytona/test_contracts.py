"""The transfer and lifecycle contracts against Daytona, through the real SDK and the fake server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk.providers.daytona import DaytonaSandbox
from sandbox_sdk.testing import ProviderConformanceTests, TransferContractTests
from tests.fakes.daytona_server import FakeDaytonaServer
from tests.providers.daytona.test_conformance import _sandbox


class TestDaytonaTransferContract(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, daytona_server: FakeDaytonaServer) -> Iterator[DaytonaSandbox]:
        yield from _sandbox(daytona_server)


class TestDaytonaProviderContract(ProviderConformanceTests):
    """Uses the ``provider`` fixture of conftest.py."""
