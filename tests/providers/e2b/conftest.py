"""Fixtures for the E2B provider: the fake E2B service on 127.0.0.1 (see
``fake_server.py``) and providers and sandboxes pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")
pytest.importorskip("starlette", reason="the fake E2B service needs starlette: pip install starlette")
pytest.importorskip("uvicorn", reason="the fake E2B service needs uvicorn: pip install uvicorn")

from sandbox_sdk.providers.e2b import E2BProvider, E2BSandbox
from tests.providers.e2b.fake_server import DEFAULT_LISTING_LAG_SECONDS, FakeE2BServer

#: The only API key the fake accepts.
API_KEY = "e2b_fake_test_key"


def make_provider(fake: FakeE2BServer, **options: Any) -> E2BProvider:
    """A provider pointed at the fake (both the API and the sandbox URL)."""
    return E2BProvider(api_key=API_KEY, api_url=fake.url, sandbox_url=fake.url, **options)


def home_of(fake: FakeE2BServer, sandbox: E2BSandbox) -> Path:
    """The sandbox's home directory on this machine (the fake's sandboxes are directories)."""
    return fake.sandbox(sandbox.id).home


@pytest.fixture(scope="session")
def fake_e2b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeE2BServer]:
    """One fake E2B service for the whole session, on an ephemeral loopback port."""
    fake = FakeE2BServer(api_key=API_KEY, base_dir=tmp_path_factory.mktemp("fake-e2b"))
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def provider(fake_e2b: FakeE2BServer) -> E2BProvider:
    return make_provider(fake_e2b)


@pytest.fixture
def e2b_sandbox(provider: E2BProvider) -> Iterator[E2BSandbox]:
    """A fresh sandbox for one test, deleted afterwards."""
    sandbox = provider.create()
    yield sandbox
    provider.delete(sandbox_id=sandbox.id)


@pytest.fixture
def calm_listing(fake_e2b: FakeE2BServer) -> Iterator[FakeE2BServer]:
    """The fake listing a sandbox as soon as it is created, for a test that checks
    what a listing shows right after making it (the default lags: see the fake)."""
    fake_e2b.listing_lag = 0.0
    yield fake_e2b
    fake_e2b.listing_lag = DEFAULT_LISTING_LAG_SECONDS
