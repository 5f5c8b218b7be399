"""Live tests against the real Daytona service. They run only when ``DAYTONA_API_KEY`` is set
(``DAYTONA_API_URL`` / ``DAYTONA_TARGET`` are honoured too) and are skipped otherwise. Every
sandbox they create carries the label ``sandbox-sdk-test=live`` and is deleted afterwards."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.daytona import DaytonaProvider, DaytonaSandbox
from tests.providers.daytona.test_sandbox import DaytonaConformance

pytestmark = pytest.mark.skipif(
    not os.environ.get("DAYTONA_API_KEY"),
    reason="DAYTONA_API_KEY is not set: the live Daytona tests need real credentials and network access",
)

LIVE_LABELS = {"sandbox-sdk-test": "live"}
#: Minutes of inactivity before Daytona stops a forgotten test sandbox.
AUTO_STOP_MINUTES = 15


@pytest.fixture(scope="module")
def live_provider() -> DaytonaProvider:
    return DaytonaProvider()


class TestDaytonaLive(DaytonaConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, live_provider: DaytonaProvider) -> Iterator[DaytonaSandbox]:
        sandbox = live_provider.create(labels=LIVE_LABELS, auto_stop_interval=AUTO_STOP_MINUTES)
        yield sandbox
        live_provider.delete(sandbox_id=sandbox.id)


def test_live_lifecycle_and_native_transfers(live_provider: DaytonaProvider) -> None:
    labels = {**LIVE_LABELS, "run": secrets.token_hex(4)}
    sandbox = live_provider.get_or_create(labels=labels, auto_stop_interval=AUTO_STOP_MINUTES)
    try:
        assert live_provider.get_or_create(labels=labels).id == sandbox.id
        assert [i.id for i in live_provider.iter_sandboxes(labels=labels)] == [sandbox.id]
        uploaded = sandbox.upload_files([("live/a.bin", bytes(range(256))), ("live", b"is a directory now")])
        assert [u.error for u in uploaded] == [None, "is_directory"]
        downloaded = sandbox.download_files(["live/a.bin", "live/missing"])
        assert [(d.content, d.error) for d in downloaded] == [
            (bytes(range(256)), None),
            (None, "file_not_found"),
        ]
        timed_out = sandbox.execute("sleep 30", timeout=2)
        assert timed_out.timed_out
    finally:
        live_provider.delete(sandbox_id=sandbox.id)
    live_provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        live_provider.get_or_create(sandbox_id=sandbox.id)


@pytest.fixture
async def alive_provider() -> AsyncIterator[DaytonaProvider]:
    provider = DaytonaProvider()
    yield provider
    await provider.aclose()


async def test_live_async_lifecycle(alive_provider: DaytonaProvider) -> None:
    sandbox = await alive_provider.acreate(labels=LIVE_LABELS, auto_stop_interval=AUTO_STOP_MINUTES)
    try:
        assert (await sandbox.aexecute("echo live")).output == "live\n"
        assert (await alive_provider.aget(sandbox.id)).id == sandbox.id
    finally:
        await alive_provider.adelete(sandbox_id=sandbox.id)
