"""The conformance kit against DaytonaSandbox, through the real SDK and the fake Daytona server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk.providers.daytona import DaytonaProvider, DaytonaSandbox
from tests.fakes.daytona_server import FakeDaytonaServer
from tests.providers.daytona.kit import DaytonaConformance


def _sandbox(server: FakeDaytonaServer) -> Iterator[DaytonaSandbox]:
    provider = DaytonaProvider(api_key=server.api_key, api_url=server.api_url)
    sandbox = provider.create(labels={"suite": "conformance"})
    yield sandbox
    provider.delete(sandbox_id=sandbox.id)


class TestDaytonaSandbox(DaytonaConformance):
    """Recent daemons: the command text reaches a shell on stdin."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, daytona_server: FakeDaytonaServer) -> Iterator[DaytonaSandbox]:
        yield from _sandbox(daytona_server)


@pytest.mark.slow
class TestDaytonaSandboxLegacyDaemon(DaytonaConformance):
    """Older daemons: the command is split on spaces and run without a shell. The whole kit
    again, because every operation depends on the command wrapping surviving that split."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, legacy_daytona_server: FakeDaytonaServer) -> Iterator[DaytonaSandbox]:
        yield from _sandbox(legacy_daytona_server)
