"""Fixtures for the E2B provider: the fake E2B service on 127.0.0.1 (see
``tests/fakes/e2b_server.py``) and providers and sandboxes pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")
pytest.importorskip("starlette", reason="the fake E2B service needs starlette: pip install starlette")
pytest.importorskip("uvicorn", reason="the fake E2B service needs uvicorn: pip install uvicorn")

from sandbox_sdk.providers.e2b import E2BProvider, E2BSandbox
from tests.fakes.e2b_server import FakeE2BServer
from tests.providers.e2b.support import API_KEY, make_provider


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
