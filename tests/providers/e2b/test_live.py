"""Against the real E2B service: run only when ``E2B_API_KEY`` is set.

These create real sandboxes (billed to that key) and delete them afterwards;
every sandbox carries the label ``sandbox-sdk-test`` and a short time to live,
so a crashed run cleans itself up.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from sandbox_sdk import errors
from sandbox_sdk.providers.e2b import E2BProvider, E2BSandbox
from sandbox_sdk.testing import SandboxConformanceTests

pytestmark = pytest.mark.skipif(
    not os.environ.get("E2B_API_KEY"),
    reason="live E2B tests need E2B_API_KEY (they create real sandboxes); the fake-service tests run instead",
)

#: Seconds a live sandbox may outlive a crashed test run.
LIVE_TTL = 600


def live_labels() -> dict[str, str]:
    return {"sandbox-sdk-test": secrets.token_hex(4)}


class TestLiveE2BSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls) -> Iterator[E2BSandbox]:
        provider = E2BProvider()
        sandbox = provider.create(labels=live_labels(), ttl=LIVE_TTL)
        yield sandbox
        provider.delete(sandbox_id=sandbox.id)


def test_live_lifecycle_and_transfers() -> None:
    provider = E2BProvider()
    labels = live_labels()
    sandbox = provider.create(labels=labels, ttl=LIVE_TTL)
    try:
        assert [info.id for info in provider.iter_sandboxes(labels=labels)] == [sandbox.id]
        uploaded = sandbox.upload_files([("live/a.bin", bytes(range(256))), ("/", b"x")])
        assert [r.error for r in uploaded] == [None, "is_directory"]
        downloaded = sandbox.download_files(["live/a.bin", "live/missing"])
        assert [(r.content, r.error) for r in downloaded] == [
            (bytes(range(256)), None),
            (None, "file_not_found"),
        ]
        assert provider.get_or_create(labels=labels).id == sandbox.id
    finally:
        provider.delete(sandbox_id=sandbox.id)
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)


async def test_live_async_twins() -> None:
    provider = E2BProvider()
    sandbox = await provider.acreate(labels=live_labels(), ttl=LIVE_TTL)
    try:
        assert (await sandbox.aexecute("echo live")).output == "live\n"
        assert (await sandbox.aexecute("sleep 10", timeout=1)).timed_out
    finally:
        await provider.adelete(sandbox_id=sandbox.id)
