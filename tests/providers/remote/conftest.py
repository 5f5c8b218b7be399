"""Runners (bubblewrap and local backends), directly and through a
coordinator, shared by the whole session: starting one costs half a second."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.remote import RemoteProvider
from sandbox_sdk.testing import provided_sandbox
from tests.providers.remote.support import coordinated_runner, listening_runner, new_token


@pytest.fixture(scope="session")
def token() -> str:
    """The client token of the runners of these tests."""
    return new_token()


@pytest.fixture(scope="session")
def runner_token() -> str:
    """The runner token with which a runner registers at a coordinator."""
    return new_token()


@pytest.fixture(scope="session")
def bwrap_url(tmp_path_factory: pytest.TempPathFactory, token: str) -> Iterator[str]:
    """A runner on bubblewrap, taking clients directly."""
    with listening_runner(tmp_path_factory.mktemp("bwrap-runner"), token, backend="bwrap") as runner:
        yield runner.url


@pytest.fixture(scope="session")
def local_url(tmp_path_factory: pytest.TempPathFactory, token: str) -> Iterator[str]:
    """A runner on the local backend, taking clients directly."""
    with listening_runner(tmp_path_factory.mktemp("local-runner"), token, backend="local") as runner:
        yield runner.url


@pytest.fixture(scope="session")
def coordinated_bwrap_url(tmp_path_factory: pytest.TempPathFactory, token: str) -> Iterator[str]:
    """A coordinator's client URL for a bubblewrap runner registered at it."""
    with coordinated_runner(tmp_path_factory.mktemp("coordinated-bwrap"), token, backend="bwrap") as found:
        yield found[2]


@pytest.fixture(scope="session")
def coordinated_local_url(tmp_path_factory: pytest.TempPathFactory, token: str) -> Iterator[str]:
    with coordinated_runner(tmp_path_factory.mktemp("coordinated-local"), token, backend="local") as found:
        yield found[2]


def remote_sandbox(url: str, token: str, suite: str) -> Iterator[BaseSandbox]:
    """The body of a class-scoped ``sandbox`` fixture: a sandbox of the runner at ``url``."""
    with RemoteProvider(url, token) as provider:
        yield from provided_sandbox(provider, suite)
