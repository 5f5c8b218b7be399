"""The conformance kit against DaytonaSandbox, through the real SDK and the fake Daytona server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.daytona import DaytonaProvider, DaytonaSandbox
from sandbox_sdk.testing import SandboxConformanceTests
from tests.fakes.daytona_server import FakeDaytonaServer


def _sandbox(server: FakeDaytonaServer) -> Iterator[DaytonaSandbox]:
    provider = DaytonaProvider(api_key=server.api_key, api_url=server.api_url)
    sandbox = provider.create(labels={"suite": "conformance"})
    yield sandbox
    provider.delete(sandbox_id=sandbox.id)


class _DaytonaConformance(SandboxConformanceTests):
    async def test_async_twins(self, sandbox: BaseSandbox, workdir: str) -> None:
        """The kit's async test, then closing the loop's AsyncDaytona client (its aiohttp session)."""
        assert isinstance(sandbox, DaytonaSandbox)
        try:
            await super().test_async_twins(sandbox, workdir)
        finally:
            await sandbox.aclose()


class TestDaytonaSandbox(_DaytonaConformance):
    """Recent daemons: the command text reaches a shell on stdin."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, daytona_server: FakeDaytonaServer) -> Iterator[DaytonaSandbox]:
        yield from _sandbox(daytona_server)


class TestDaytonaSandboxLegacyDaemon(_DaytonaConformance):
    """Older daemons: the command is split on spaces and run without a shell."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, legacy_daytona_server: FakeDaytonaServer) -> Iterator[DaytonaSandbox]:
        yield from _sandbox(legacy_daytona_server)
