"""Ports of a bubblewrap sandbox exposed to the host (docs/policy.md): a
server started with ``start()`` in the jail's own network namespace answers
through the URL, each sandbox's URL reaches only its own port, and the URL
stops working after ``unexpose`` and after the sandbox is deleted. Real
jails, real servers, host loopback only."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import TypeVar
from urllib.parse import urlsplit

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox
from sandbox_sdk.providers.local import LocalSandbox

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


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body.decode()


@pytest.fixture
def serving(provider: BwrapProvider) -> Iterator[Callable[[str], BwrapSandbox]]:
    """Sandboxes each serving a page saying ``text`` on their port 8000."""
    made: list[BwrapSandbox] = []

    def serve(text: str) -> BwrapSandbox:
        sandbox: BwrapSandbox = provider.create()
        made.append(sandbox)
        sandbox.write("site/page.txt", text)
        sandbox.start("python3 -m http.server 8000 --bind 127.0.0.1 --directory site")
        return sandbox

    yield serve
    for sandbox in made:
        provider.delete(sandbox.id)


def test_a_server_in_the_sandbox_answers_through_the_url(serving: Callable[[str], BwrapSandbox]) -> None:
    sandbox = serving("from the sandbox\n")
    url = sandbox.expose_port(8000)
    assert urlsplit(url).hostname == "127.0.0.1"
    assert eventually(lambda: get(f"{url}/page.txt")) == "from the sandbox\n"
    assert sandbox.expose_port(8000) == url
    sandbox.unexpose(8000)
    with pytest.raises(urllib.error.URLError):
        get(f"{url}/page.txt")


def test_each_url_reaches_only_its_own_sandbox(serving: Callable[[str], BwrapSandbox]) -> None:
    """Two sandboxes serve on the same port, each in its own network namespace."""
    first, second = serving("first\n"), serving("second\n")
    first_url, second_url = first.expose_port(8000), second.expose_port(8000)
    assert first_url != second_url
    assert eventually(lambda: get(f"{first_url}/page.txt")) == "first\n"
    assert eventually(lambda: get(f"{second_url}/page.txt")) == "second\n"


def test_a_stream_flows_both_ways_and_a_deleted_sandbox_ends_it(provider: BwrapProvider) -> None:
    """Bytes both ways and a half-close, as a WebSocket needs; once the
    sandbox is deleted, a connection through its URL gets nothing."""
    sandbox: BwrapSandbox = provider.create()
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
    with socket.create_connection((address.hostname, address.port), timeout=10) as conn:
        conn.sendall(b"anyone there?")
        assert conn.recv(1) == b""


def test_a_port_nobody_listens_on_closes_the_connection(provider: BwrapProvider) -> None:
    with provider.create() as sandbox:
        address = urlsplit(sandbox.expose_port(8123))
        with socket.create_connection((address.hostname, address.port), timeout=10) as conn:
            assert conn.recv(1) == b""
        with pytest.raises(errors.InvalidArgumentError):
            sandbox.expose_port(70000)


def test_a_provider_without_a_way_in_says_so(local: LocalSandbox) -> None:
    with pytest.raises(errors.UnsupportedError, match="cannot expose ports"):
        local.expose_port(8000)
