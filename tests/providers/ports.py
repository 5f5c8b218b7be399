"""The contract of ``expose_port`` / ``unexpose`` (docs/policy.md), for any provider
whose sandboxes can expose a port: a server started with ``start()`` answers through
the URL, each sandbox's URL reaches only its own port, a stream flows both ways with a
half-close (what a WebSocket needs), and the URL stops working after ``unexpose``, after
the sandbox is deleted and where nobody listens. Real sandboxes, real servers, host
loopback only. A provider's test module subclasses :class:`ExposedPortTests` next to a
``provider`` fixture."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import TypeVar
from urllib.parse import urlsplit

import pytest

from sandbox_sdk import BaseSandbox, errors
from sandbox_sdk.provider import SandboxProvider

T = TypeVar("T")
#: How long a server started in a sandbox may take to answer (a loaded machine).
PATIENCE = 30.0
#: An echo server: every byte back, until the client closes its half.
ECHO = (
    "import socket\n"
    "s = socket.create_server(('127.0.0.1', 9000))\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    while data := c.recv(65536):\n"
    "        c.sendall(data)\n"
    "    c.close()\n"
)


def eventually(attempt: Callable[[], T]) -> T:
    """``attempt()``'s first result that does not raise ``OSError``, within ``PATIENCE``."""
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            return attempt()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def answers_nothing(host: str | None, port: int | None) -> bool:
    """Whether a connection there is refused, or closed (or reset: it was
    closed with our bytes unread) before a single byte comes back."""
    try:
        with socket.create_connection((host, port), timeout=10) as conn:
            conn.sendall(b"anyone there?")
            return conn.recv(1) == b""
    except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
        return True


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body.decode()


class ExposedPortTests:
    """The tests; the subclass's module supplies ``provider``."""

    @pytest.fixture
    def serving(self, provider: SandboxProvider[BaseSandbox]) -> Iterator[Callable[[str], BaseSandbox]]:
        """Sandboxes each serving a page saying ``text`` on their port 8000."""
        made: list[BaseSandbox] = []

        def serve(text: str) -> BaseSandbox:
            sandbox = provider.create()
            made.append(sandbox)
            sandbox.write("site/page.txt", text)
            sandbox.start("python3 -m http.server 8000 --bind 127.0.0.1 --directory site")
            return sandbox

        yield serve
        for sandbox in made:
            provider.delete(sandbox.id)

    def test_a_server_in_the_sandbox_answers_through_the_url(
        self, serving: Callable[[str], BaseSandbox]
    ) -> None:
        sandbox = serving("from the sandbox\n")
        url = sandbox.expose_port(8000)
        assert urlsplit(url).hostname == "127.0.0.1"
        assert eventually(lambda: get(f"{url}/page.txt")) == "from the sandbox\n"
        assert sandbox.expose_port(8000) == url
        sandbox.unexpose(8000)
        with pytest.raises(urllib.error.URLError):
            get(f"{url}/page.txt")

    def test_each_url_reaches_only_its_own_sandbox(self, serving: Callable[[str], BaseSandbox]) -> None:
        """Two sandboxes serve on the same port, each on its own loopback."""
        first, second = serving("first\n"), serving("second\n")
        first_url, second_url = first.expose_port(8000), second.expose_port(8000)
        assert first_url != second_url
        assert eventually(lambda: get(f"{first_url}/page.txt")) == "first\n"
        assert eventually(lambda: get(f"{second_url}/page.txt")) == "second\n"

    def test_a_stream_flows_both_ways_and_a_deleted_sandbox_ends_it(
        self, provider: SandboxProvider[BaseSandbox]
    ) -> None:
        """Bytes both ways and a half-close, as a WebSocket needs; once the
        sandbox is deleted, a connection through its URL gets nothing."""
        sandbox = provider.create()
        sandbox.write("echo.py", ECHO)
        sandbox.start("python3 echo.py")
        address = urlsplit(sandbox.expose_port(9000))
        payload = bytes(range(256)) * 4096

        def exchange() -> bytes:
            with socket.create_connection((address.hostname, address.port), timeout=10) as conn:
                conn.sendall(payload)
                conn.shutdown(socket.SHUT_WR)
                received = b""
                while data := conn.recv(65536):
                    received += data
                if not received:
                    raise ConnectionResetError("nothing came back yet")
                return received

        assert eventually(exchange) == payload
        provider.delete(sandbox.id)
        assert answers_nothing(address.hostname, address.port)

    def test_a_port_nobody_listens_on_closes_the_connection(
        self, provider: SandboxProvider[BaseSandbox]
    ) -> None:
        with provider.create() as sandbox:
            address = urlsplit(sandbox.expose_port(8123))
            assert answers_nothing(address.hostname, address.port)
            with pytest.raises(errors.InvalidArgumentError):
                sandbox.expose_port(70000)
