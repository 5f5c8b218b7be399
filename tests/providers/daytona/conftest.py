"""Fixtures that run the fake Daytona server (``fake_server.py``) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

pytest.importorskip(
    "daytona", reason="the daytona extra is not installed: pip install 'sandbox-sdk-py[daytona]'"
)

from sandbox_sdk.providers.daytona import DaytonaProvider
from tests.providers.daytona.fake_server import DEFAULT_LISTING_LAG_S, FakeDaytonaServer, running_fake_daytona


def make_provider(server: FakeDaytonaServer) -> DaytonaProvider:
    """A provider whose clients talk to ``server``."""
    return DaytonaProvider(api_key=server.api_key, api_url=server.api_url)


@pytest.fixture(scope="module")
def daytona_server() -> Iterator[FakeDaytonaServer]:
    """One fake control plane + daemon per test module, started on an ephemeral port."""
    with running_fake_daytona() as server:
        yield server


@pytest.fixture(scope="module")
def legacy_daytona_server() -> Iterator[FakeDaytonaServer]:
    """A fake whose daemon splits commands on spaces instead of feeding them to a shell."""
    with running_fake_daytona(exec_mode="argv-split") as server:
        yield server


@pytest.fixture
def provider(daytona_server: FakeDaytonaServer) -> DaytonaProvider:
    return make_provider(daytona_server)


@pytest.fixture
async def aprovider(daytona_server: FakeDaytonaServer) -> AsyncIterator[DaytonaProvider]:
    """A provider for async tests; its AsyncDaytona client is closed on the test's loop."""
    provider = make_provider(daytona_server)
    yield provider
    await provider.aclose()


@pytest.fixture
def calm_listing(daytona_server: FakeDaytonaServer) -> Iterator[FakeDaytonaServer]:
    """The fake listing a sandbox as soon as it is created, for a test that checks
    what a listing shows right after making it (the default lags: see the fake)."""
    daytona_server.listing_lag = 0.0
    yield daytona_server
    daytona_server.listing_lag = DEFAULT_LISTING_LAG_S
