"""The sandbox conformance kit and the transfer contract on podman's Docker-compatible
service: test_sandbox.py's classes, collected here with the ``engine`` fixture saying podman."""

from __future__ import annotations

import pytest

from tests.providers.docker.test_sandbox import TestDockerSandbox as TestPodmanSandbox
from tests.providers.docker.test_sandbox import TestDockerTransfers as TestPodmanTransfers

pytestmark = pytest.mark.engines
__all__ = ["TestPodmanSandbox", "TestPodmanTransfers", "engine"]


@pytest.fixture(scope="module")
def engine() -> str:
    return "podman"
