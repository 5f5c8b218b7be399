"""Fixtures that run the fake Daytona server (tests/fakes/daytona_server.py) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.daytona_server import FakeDaytonaServer, running_fake_daytona

pytest.importorskip(
    "daytona", reason="the daytona extra is not installed: pip install 'sandbox-sdk[daytona]'"
)


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
