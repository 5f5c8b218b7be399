"""Fixtures running the fake Modal backend (``tests/fakes/modal_server.py``) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("modal", reason="the modal extra is not installed (pip install 'sandbox-sdk[modal]')")

from tests.fakes.modal_server import FakeModalServer


@pytest.fixture(scope="session")
def modal_server() -> Iterator[FakeModalServer]:
    """One fake backend for the session; each test gets its own sandboxes from it."""
    with FakeModalServer().running() as server:
        yield server


@pytest.fixture
def modal_env(modal_server: FakeModalServer, monkeypatch: pytest.MonkeyPatch) -> FakeModalServer:
    """The modal SDK's environment variables pointed at the fake backend."""
    for name, value in modal_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MODAL_PROFILE", raising=False)
    return modal_server
