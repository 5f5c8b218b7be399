"""The sandbox conformance kit through the remote provider: a bubblewrap
runner taken directly, a local runner through a coordinator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.testing import SandboxConformanceTests
from tests.providers.remote.conftest import remote_sandbox


class TestRemoteSandboxOnBwrap(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, bwrap_url: str, token: str) -> Iterator[BaseSandbox]:
        yield from remote_sandbox(bwrap_url, token, "conformance")


class TestRemoteSandboxOnLocalViaCoordinator(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, coordinated_local_url: str, token: str) -> Iterator[BaseSandbox]:
        yield from remote_sandbox(coordinated_local_url, token, "conformance")
