"""Ports of a container exposed to the host (docs/policy.md): the shared contract
(tests/providers/ports.py) on dockerd, with the provider's default ``network=False``
(the container has no network of its own: every forwarded connection is relayed by an
exec inside it). test_podman_ports.py runs the same on podman."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from sandbox_sdk.providers.docker import DockerProvider
from tests.providers.ports import ECHO, ExposedPortTests, eventually

pytestmark = pytest.mark.engines
#: The engine client's timeout in the idle test: shorter than the idle time.
ENGINE_TIMEOUT = 1.0


class TestDockerPorts(ExposedPortTests):
    @pytest.fixture
    def impatient(self, docker_url: str) -> Iterator[DockerProvider]:
        """A provider whose engine client gives up on a silent connection after ``ENGINE_TIMEOUT``."""
        with DockerProvider(base_url=docker_url, engine_timeout=ENGINE_TIMEOUT) as provider:
            yield provider

    def test_an_idle_connection_outlives_the_engine_clients_timeout(self, impatient: DockerProvider) -> None:
        """A WebSocket may be quiet for minutes: the relay's engine connection has no
        timeout, whatever the client's."""
        with impatient.create() as sandbox:
            sandbox.write("echo.py", ECHO)
            sandbox.start("python3 echo.py")
            address = urlsplit(sandbox.expose_port(9000))

            def connected() -> socket.socket:
                conn = socket.create_connection((address.hostname, address.port), timeout=10)
                conn.sendall(b"hello")
                if conn.recv(5) != b"hello":
                    conn.close()
                    raise ConnectionResetError("the echo server is not up yet")
                return conn

            with eventually(connected) as conn:
                time.sleep(2 * ENGINE_TIMEOUT)  # idle, past the engine client's timeout
                conn.sendall(b"again")
                assert conn.recv(5) == b"again"
