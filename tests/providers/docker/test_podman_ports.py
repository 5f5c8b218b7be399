"""test_ports.py's contract on podman's Docker-compatible service."""

from __future__ import annotations

import pytest

from tests.providers.docker.test_ports import TestDockerPorts as TestPodmanPorts

pytestmark = pytest.mark.engines
__all__ = ["TestPodmanPorts", "engine"]


@pytest.fixture(scope="module")
def engine() -> str:
    return "podman"
