"""Fixtures running the fake Modal backend (``fake_server.py``) on 127.0.0.1.

The modal SDK reads its server URL and tokens from the environment when a
client is made, so fixtures set them only around that moment: nothing leaks
into other tests (the live tests read the real environment).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

pytest.importorskip("modal", reason="the modal extra is not installed: pip install -e '.[modal]'")

from sandbox_sdk.providers.modal import ModalProvider, ModalSandbox
from tests.providers.modal.fake_server import DEFAULT_LISTING_LAG_SECONDS, FakeModalServer


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


class ServerAddress(Protocol):
    """Where a fake backend answers and the tokens it takes."""

    @property
    def url(self) -> str: ...
    @property
    def token_id(self) -> str: ...
    @property
    def token_secret(self) -> str: ...


@dataclass(frozen=True)
class SeparateServer:
    """A fake backend in a process of its own (see ``serve_until_stdin_closes``)."""

    url: str
    token_id: str
    token_secret: str


@pytest.fixture(scope="session")
def separate_modal_server() -> Iterator[SeparateServer]:
    """A fake backend in another process, for tests that measure the client's own
    memory: tracemalloc then counts the client alone, not the fake's buffers."""
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.providers.modal.fake_server"],
        cwd=root,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the separate fake Modal backend ended at start ({process.wait()})")
        yield SeparateServer(**json.loads(line))
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def make_provider(server: ServerAddress, **options: Any) -> ModalProvider:
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


@pytest.fixture
def calm_listing(modal_server: FakeModalServer) -> Iterator[FakeModalServer]:
    """The fake listing a sandbox as soon as it is created, for a test that checks
    what a listing shows right after making it (the default lags: see the fake)."""
    modal_server.listing_lag = 0.0
    yield modal_server
    modal_server.listing_lag = DEFAULT_LISTING_LAG_SECONDS
