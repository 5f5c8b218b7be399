"""``ModalProvider`` against the real Modal service: the conformance kit and a few
provider checks.

Runs only when ``MODAL_TOKEN_ID`` and ``MODAL_TOKEN_SECRET`` are set in the
environment; creates short-lived sandboxes in the app ``sandbox-sdk-live-tests``
and terminates them.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.modal import ModalProvider, ModalSandbox
from sandbox_sdk.testing import SandboxConformanceTests

LIVE = bool(os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"))
pytestmark = pytest.mark.skipif(
    not LIVE, reason="live Modal tests need MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (not set)"
)


@pytest.fixture(scope="module")
def live_provider() -> ModalProvider:
    return ModalProvider(app_name="sandbox-sdk-live-tests")


@pytest.fixture(scope="module")
def live_sandbox(live_provider: ModalProvider) -> Iterator[ModalSandbox]:
    sandbox = live_provider.create(labels={"suite": "live"}, ttl=600, idle_timeout=300)
    yield sandbox
    live_provider.delete(sandbox_id=sandbox.id)


class TestLiveModalSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, live_provider: ModalProvider) -> Iterator[ModalSandbox]:
        sandbox = live_provider.create(labels={"suite": "live-conformance"}, ttl=1800)
        yield sandbox
        live_provider.delete(sandbox_id=sandbox.id)


def test_execute_and_timeout(live_sandbox: ModalSandbox) -> None:
    response = live_sandbox.execute("echo out; echo err >&2; exit 3")
    assert (response.output, response.exit_code) == ("out\nerr\n", 3)
    slow = live_sandbox.execute("sleep 30", timeout=2)
    assert slow.timed_out


def test_file_operations_and_transfers(live_sandbox: ModalSandbox) -> None:
    base = f"/tmp/sbx-live-{secrets.token_hex(4)}"
    live_sandbox.write(f"{base}/a.txt", "hello\n")
    assert live_sandbox.read(f"{base}/a.txt").content == "hello\n"
    uploads = live_sandbox.upload_files([(f"{base}/b.bin", bytes(range(256))), (base, b"x")])
    assert [u.error for u in uploads] == [None, "is_directory"]
    downloads = live_sandbox.download_files([f"{base}/b.bin", f"{base}/missing"])
    assert downloads[0].content == bytes(range(256))
    assert downloads[1].error == "file_not_found"


def test_lifecycle(live_provider: ModalProvider, live_sandbox: ModalSandbox) -> None:
    assert live_provider.get(live_sandbox.id).id == live_sandbox.id
    assert live_sandbox.id in [i.id for i in live_provider.iter_sandboxes(labels={"suite": "live"})]
    with pytest.raises(errors.SandboxNotFoundError):
        live_provider.get("sb-doesnotexist0000000000")
