"""Fixtures running the fake Modal backend (``fake_server.py``) on 127.0.0.1.

The modal SDK reads its server URL and tokens from the environment when a
client is made, so fixtures set them only around that moment: nothing leaks
into other tests (the live tests read the real environment).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("modal", reason="the modal extra is not installed: pip install -e '.[modal]'")

from sandbox_sdk.providers.modal import ModalProvider, ModalSandbox
from tests.providers.modal.fake_server import FakeModalServer


@pytest.fixture(scope="session")
def modal_server() -> Iterator[FakeModalServer]:
    """One fake backend for the session; each test makes its own sandboxes on it."""
    with FakeModalServer().running() as server:
        yield server


@pytest.fixture
def modal_env(modal_server: FakeModalServer, monkeypatch: pytest.MonkeyPatch) -> FakeModalServer:
    """The modal SDK's environment variables pointed at the fake backend for one test."""
    for name, value in modal_server.env().items():
        monkeypatch.setenv(name, value)
    return modal_server


def make_provider(server: FakeModalServer, **options: Any) -> ModalProvider:
    """A provider whose client talks to ``server``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODAL_SERVER_URL", server.url)
        return ModalProvider(token_id=server.token_id, token_secret=server.token_secret, **options)


@pytest.fixture(scope="class")
def modal_provider(modal_server: FakeModalServer) -> ModalProvider:
    return make_provider(modal_server, app_name="sandbox-sdk-tests")


@pytest.fixture
def provider(modal_server: FakeModalServer) -> Iterator[ModalProvider]:
    """A provider on an app of its own, so listings only see this test's sandboxes."""
    provider = make_provider(modal_server, app_name=f"test-{secrets.token_hex(6)}")
    yield provider
    for info in provider.iter_sandboxes():
        provider.delete(sandbox_id=info.id)


@pytest.fixture
def sandbox(provider: ModalProvider) -> ModalSandbox:
    return provider.create(labels={"role": "test"})
