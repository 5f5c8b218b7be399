"""Egress by name from a bubblewrap sandbox (``create(network=NetworkPolicy(...))``,
docs/policy.md): real jails, the real proxy process, and HTTP servers of this
test's own on 127.0.0.x, given names through the policy's ``hosts``. Nothing
leaves the machine: every address used is on the host's loopback."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_sdk import NetworkPolicy, errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.bwrap._jail import EGRESS_PID_FILE, stop_jail
from sandbox_sdk.providers.local import LocalProvider

#: The test's servers: the one the policy lets out to, and one it does not.
ALLOWED_IP, OTHER_IP = "127.0.0.5", "127.0.0.6"

#: Fetches ``argv[1]`` with Python's urllib (which honours HTTP_PROXY) and
#: prints the body, or ``status <code> <body>`` for an HTTP error.
FETCH = """import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode(), end="")
except urllib.error.HTTPError as exc:
    print("status", exc.code, exc.read().decode(), end="")
"""
#: Speaks to the proxy by hand: ``argv[1]`` is the request head to send; then
#: ``argv[2]`` is sent through the tunnel (if the proxy said 200). Prints the
#: proxy's status line, then what came back through the tunnel.
RAW = """import os, socket, sys
conn = socket.create_connection(("127.0.0.1", 3128), timeout=30)
conn.sendall(sys.argv[1].encode())
reply = b""
while b"\\r\\n\\r\\n" not in reply:
    chunk = conn.recv(65536)
    if not chunk:
        break
    reply += chunk
head, _, rest = reply.partition(b"\\r\\n\\r\\n")
print(head.split(b"\\r\\n")[0].decode())
if b" 200 " in head.split(b"\\r\\n")[0] + b" ":
    conn.sendall(sys.argv[2].encode())
    conn.shutdown(socket.SHUT_WR)
    while chunk := conn.recv(65536):
        rest += chunk
print(rest.decode(), end="")
"""


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the address it was reached at and the Host header it got."""

    def do_GET(self) -> None:
        address = self.connection.getsockname()[0]
        body = json.dumps({"server": address, "host": self.headers["Host"]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, int]]:
    """An HTTP server on each of :data:`ALLOWED_IP` and :data:`OTHER_IP`: their ports."""
    running: dict[str, http.server.ThreadingHTTPServer] = {}
    for address in (ALLOWED_IP, OTHER_IP):
        server = http.server.ThreadingHTTPServer((address, 0), Recorder)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        running[address] = server
    yield {address: server.server_address[1] for address, server in running.items()}
    for server in running.values():
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def policed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BwrapProvider, BaseSandbox]]:
    """A sandbox allowed out to ``api.test`` (at :data:`ALLOWED_IP`, which is
    listed too: it is a loopback address) and to ``*.rebind.test``, whose
    name maps to :data:`OTHER_IP`, unlisted."""
    provider = BwrapProvider(tmp_path_factory.mktemp("egress"))
    policy = NetworkPolicy(
        allow=["api.test", "*.rebind.test", ALLOWED_IP],
        hosts={"api.test": ALLOWED_IP, "evil.test": OTHER_IP, "a.rebind.test": OTHER_IP},
    )
    sandbox = provider.create(network=policy)
    yield provider, sandbox
    provider.delete(sandbox.id)


def fetch(sandbox: BaseSandbox, url: str) -> str:
    result = sandbox.run(["python3", "-c", FETCH, url], timeout=120)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def raw(sandbox: BaseSandbox, head: str, then: str = "") -> list[str]:
    result = sandbox.run(["python3", "-c", RAW, head, then], timeout=120)
    assert result.exit_code == 0, result.stderr
    return result.stdout.split("\n", 1)


def test_an_allowed_name_is_reached_over_http_and_through_connect(
    policed: tuple[BwrapProvider, BaseSandbox], servers: dict[str, int]
) -> None:
    _, sandbox = policed
    port = servers[ALLOWED_IP]
    assert json.loads(fetch(sandbox, f"http://api.test:{port}/page")) == {
        "server": ALLOWED_IP,
        "host": f"api.test:{port}",
    }
    status, body = raw(sandbox, f"CONNECT api.test:{port} HTTP/1.1\r\n\r\n", "GET / HTTP/1.0\r\n\r\n")
    assert status == "HTTP/1.1 200 Connection established"
    assert json.loads(body.partition("\r\n\r\n")[2])["server"] == ALLOWED_IP


def test_what_the_policy_does_not_name_is_refused(
    policed: tuple[BwrapProvider, BaseSandbox], servers: dict[str, int]
) -> None:
    """An unlisted name, an unlisted address asked for by number, a listed
    name that resolves to an unlisted private address (DNS rebinding), and
    the host's own loopback: each a 403 with the reason, over HTTP and CONNECT."""
    _, sandbox = policed
    other = servers[OTHER_IP]
    refused = {
        f"evil.test:{other}": "evil.test is not allowed by the policy",
        f"{OTHER_IP}:{other}": f"{OTHER_IP} is an address not listed in the policy",
        f"a.rebind.test:{other}": "resolves only to addresses that are private or loopback",
        f"127.0.0.1:{other}": "127.0.0.1 is an address not listed in the policy",
        f"localhost:{other}": "localhost is not allowed by the policy",
    }
    for target, reason in refused.items():
        if not target.startswith(("127.0.0.1:", "localhost:")):  # (which NO_PROXY keeps off the proxy)
            answer = fetch(sandbox, f"http://{target}/")
            assert answer.startswith("status 403 ") and reason in answer, (target, answer)
        line, answer = raw(sandbox, f"CONNECT {target} HTTP/1.1\r\n\r\n", "never sent")
        assert line == "HTTP/1.1 403 Forbidden", target
        assert reason in answer, target


def test_the_proxy_decides_by_the_target_not_by_what_the_client_claims(
    policed: tuple[BwrapProvider, BaseSandbox], servers: dict[str, int]
) -> None:
    """A Host header naming another server does not move the request (the
    upstream gets the URL's), a second request inside an allowed tunnel
    reaches the tunnel's own server only, and malformed targets are refused."""
    _, sandbox = policed
    port, other = servers[ALLOWED_IP], servers[OTHER_IP]
    line, body = raw(sandbox, f"GET http://api.test:{port}/ HTTP/1.1\r\nHost: evil.test:{other}\r\n\r\n")
    assert line.endswith(" 200 OK")
    assert json.loads(body) == {"server": ALLOWED_IP, "host": f"api.test:{port}"}
    relayed = f"GET http://evil.test:{other}/ HTTP/1.1\r\nHost: evil.test:{other}\r\n\r\n"
    line, body = raw(sandbox, f"CONNECT api.test:{port} HTTP/1.1\r\n\r\n", relayed)
    assert line == "HTTP/1.1 200 Connection established"
    assert json.loads(body.partition("\r\n\r\n")[2])["server"] == ALLOWED_IP
    for head in (
        f"GET /relative HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n",
        f"CONNECT user@api.test:{port} HTTP/1.1\r\n\r\n",
        f"CONNECT api.test:{port}/path HTTP/1.1\r\n\r\n",
        "CONNECT api.test HTTP/1.1\r\n\r\n",
        f"GET https://api.test:{port}/ HTTP/1.1\r\n\r\n",
    ):
        assert raw(sandbox, head)[0] == "HTTP/1.1 400 Bad Request", head


def test_there_is_no_way_out_but_the_proxy(
    policed: tuple[BwrapProvider, BaseSandbox], servers: dict[str, int]
) -> None:
    """A direct connection to the allowed server's address, to the host's
    loopback, and a UDP datagram to a resolver all fail: the jail's network
    namespace has its own loopback and no route."""
    _, sandbox = policed
    probe = (
        "import socket, sys\n"
        "for host, port in ((sys.argv[1], int(sys.argv[2])), ('127.0.0.1', int(sys.argv[2]))):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=5)\n"
        "        print('reached', host)\n"
        "    except OSError:\n"
        "        print('refused', host)\n"
        "try:\n"
        "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.53', 53))\n"
        "    print('sent udp')\n"
        "except OSError:\n"
        "    print('no route for udp')\n"
    )
    result = sandbox.run(["python3", "-c", probe, ALLOWED_IP, str(servers[ALLOWED_IP])], timeout=60)
    assert result.stdout.split("\n") == [f"refused {ALLOWED_IP}", "refused 127.0.0.1", "no route for udp", ""]


def test_the_policy_holds_for_a_new_client_and_a_restarted_jail(
    policed: tuple[BwrapProvider, BaseSandbox], servers: dict[str, int]
) -> None:
    """The policy is recorded with the sandbox: another provider object's
    handle is policed alike, and a jail started again (here: stopped, as its
    idle exit does) gets a proxy of its own, the old one gone with the old jail."""
    provider, sandbox = policed
    port = servers[ALLOWED_IP]
    again = BwrapProvider(provider.store.state_dir).get(sandbox.id)
    assert json.loads(fetch(again, f"http://api.test:{port}/"))["server"] == ALLOWED_IP
    assert fetch(again, f"http://evil.test:{servers[OTHER_IP]}/").startswith("status 403 ")
    jail_dir = provider.store.directory(sandbox.id) / "jail"
    old_pid, old_start = (jail_dir / EGRESS_PID_FILE).read_text().split()
    stop_jail(jail_dir)
    assert not runs(int(old_pid), old_start)  # gone with its jail
    assert json.loads(fetch(sandbox, f"http://api.test:{port}/"))["server"] == ALLOWED_IP
    assert (jail_dir / EGRESS_PID_FILE).read_text().split()[0] != old_pid


def test_deleting_the_sandbox_ends_its_proxy(tmp_path: Path) -> None:
    provider = BwrapProvider(tmp_path)
    sandbox = provider.create(network=NetworkPolicy(allow=["api.test"]))
    assert sandbox.execute("true").exit_code == 0  # its jail, and so its proxy, started
    pid, started = (provider.store.directory(sandbox.id) / "jail" / EGRESS_PID_FILE).read_text().split()
    provider.delete(sandbox.id)
    wait_for(lambda: not runs(int(pid), started), "the proxy to end")


def test_bad_policies_and_providers_that_cannot_enforce_one_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="not a host name"):
        NetworkPolicy(allow=["api.test"], hosts={"*.x.test": "127.0.0.1"})
    with pytest.raises(errors.InvalidArgumentError, match="network must be a bool or a NetworkPolicy"):
        BwrapProvider(tmp_path / "bwrap").create(network="api.test")
    local = LocalProvider(tmp_path / "local")
    with pytest.raises(errors.UnsupportedError, match="cannot enforce a NetworkPolicy"):
        local.create(network=NetworkPolicy(allow=["api.test"]))
    assert local.list().items == []  # refused before anything was made


def runs(pid: int, started: str) -> bool:
    """Whether process ``pid`` is still the one started then, and not a zombie
    (an orphan killed stays one until whoever adopted it reaps it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return fields[19] == started and fields[0] != "Z"


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.1)
