"""The host-side HTTP(S) proxy that is a policed sandbox's only way out.

It serves a listening socket made inside the sandbox's network namespace
(so only the sandbox can connect to it) from the host's namespace (so it
alone can reach out), and lets each connection out only as
:class:`~sandbox_sdk.network.NetworkPolicy` decides:

- ``CONNECT host:port`` (HTTPS and any other TCP stream): the policy decides
  by ``host`` as asked; the proxy connects to an address it resolved itself,
  answers ``200``, then copies bytes both ways without reading them.
- ``METHOD http://host[:port]/path`` (plain HTTP): decided the same way by the
  URL's host; the request goes upstream with its path only, its ``Host``
  header set from the URL (not from what the client sent) and ``Connection:
  close``, then bytes are copied both ways.
- Anything else, and any refusal, gets an error status and a one-line reason,
  and nothing goes out. A request head must arrive whole within
  :data:`HEAD_SECONDS` and :data:`MAX_HEAD_BYTES`.

Run as a process by a provider that starts one per sandbox
(:func:`start_proxy`): it serves an inherited listening descriptor until the
sandbox's process (a pid and the start time ``/proc/PID/stat`` gave it) ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

from sandbox_sdk.network import EgressRefused, NetworkPolicy
from sandbox_sdk.provider_kit.host_process import start_time
from sandbox_sdk.provider_kit.port_forward import CHUNK, relay

#: The port the proxy listens on in a sandbox (on its own loopback: the
#: sandbox's network namespace has nothing else), the one programs there are
#: told of by :func:`proxy_env`.
EGRESS_PORT = 3128
#: A request head's largest size and how long it may take to arrive.
MAX_HEAD_BYTES = 64 * 1024
HEAD_SECONDS = 30.0
#: How long a connection to an allowed destination may take.
CONNECT_SECONDS = 30.0
#: Connections served at once; more are answered 503 at once, so a sandbox
#: cannot make the host's proxy start threads without end.
MAX_CONNECTIONS = 256
#: How often the process looks for the end of the sandbox it serves.
WATCH_SECONDS = 1.0


class BadRequest(Exception):
    """A request the proxy does not serve; the message says why."""


class EgressProxy:
    """Serves ``listener`` under ``policy``, a thread per connection."""

    def __init__(self, listener: socket.socket, policy: NetworkPolicy) -> None:
        self.listener = listener
        self.policy = policy
        self.room = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def serve_forever(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if not self.room.acquire(blocking=False):
                with client, contextlib.suppress(OSError):
                    reply(client, 503, "Service Unavailable", f"over {MAX_CONNECTIONS} connections at once")
                continue
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client: socket.socket) -> None:
        """One connection (its room given back before it is closed, so a client
        that sees the end may connect again at once)."""
        with client:
            try:
                self._serve(client)
            finally:
                self.room.release()

    def _serve(self, client: socket.socket) -> None:
        try:
            head, rest = read_head(client)
            method, target, headers = parse_head(head)
            if method == "CONNECT":
                host, port = split_authority(target, default_port=None)
                upstream = self.open(host, port)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                host, port, request = origin_request(method, target, headers)
                upstream = self.open(host, port)
                upstream.sendall(request)
        except EgressRefused as exc:  # said to the client only: a log of refusals is the sandbox's to fill
            reply(client, 403, "Forbidden", str(exc))
            return
        except BadRequest as exc:
            reply(client, 400, "Bad Request", str(exc))
            return
        except OSError as exc:
            with contextlib.suppress(OSError):
                reply(client, 502, "Bad Gateway", f"cannot connect: {exc}")
            return
        with upstream:
            if rest:
                upstream.sendall(rest)
            relay(client, upstream)

    def open(self, host: str, port: int) -> socket.socket:
        """A connection to the first address of ``host`` the policy lets out."""
        failure: OSError | None = None
        for address in self.policy.destinations(host):
            try:
                upstream = socket.create_connection((address, port), timeout=CONNECT_SECONDS)
            except OSError as exc:
                failure = exc
                continue
            upstream.settimeout(None)  # a tunnel may be quiet for as long as its ends like
            return upstream
        raise failure or OSError(f"no address of {host}")


def read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """The request head (up to its blank line) and what came after it."""
    client.settimeout(HEAD_SECONDS)
    data = b""
    while (end := data.find(b"\r\n\r\n")) < 0:
        if len(data) > MAX_HEAD_BYTES:
            raise BadRequest("the request head is too large")
        chunk = client.recv(CHUNK)
        if not chunk:
            raise BadRequest("the connection ended before a request")
        data += chunk
    client.settimeout(None)
    return data[:end], data[end + 4 :]


def parse_head(head: bytes) -> tuple[str, str, list[tuple[str, str]]]:
    """The method, the target and the headers of a request head."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise BadRequest("a malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest(f"an unsupported protocol version {version!r}")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadRequest("a malformed header line")
        headers.append((name, value.strip()))
    return method, target, headers


def split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as a host and a port."""
    parsed = urlsplit(f"//{authority}")
    try:
        port = parsed.port or default_port
    except ValueError:
        raise BadRequest(f"a bad port in {authority!r}") from None
    if not parsed.hostname or port is None or parsed.username is not None or parsed.path:
        raise BadRequest(f"{authority!r} is not host:port")
    return parsed.hostname, port


#: Headers not passed upstream: the proxy's own, and the connection's.
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "host"})


def origin_request(method: str, target: str, headers: list[tuple[str, str]]) -> tuple[str, int, bytes]:
    """A plain HTTP request to a proxy (its target an absolute ``http://`` URL)
    as the origin server should get it."""
    url = urlsplit(target)
    if url.scheme != "http" or not url.netloc:
        raise BadRequest("only absolute http:// URLs and CONNECT are served (set HTTP_PROXY and HTTPS_PROXY)")
    host, port = split_authority(url.netloc, default_port=80)
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    lines = [f"{method} {path} HTTP/1.1", f"Host: {url.netloc}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in HOP_HEADERS]
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def reply(client: socket.socket, status: int, phrase: str, reason: str) -> None:
    body = f"sandbox egress proxy: {reason}\n".encode()
    head = f"HTTP/1.1 {status} {phrase}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    client.sendall(head.encode("latin-1") + body)


def proxy_env(port: int = EGRESS_PORT) -> dict[str, str]:
    """The environment that sends a sandbox's HTTP(S) clients (curl, pip, git,
    Python's urllib and requests, Node with a proxy agent) through the proxy."""
    url = f"http://127.0.0.1:{port}"
    local = "localhost,127.0.0.1,::1"
    return {
        **{name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
        **{name: local for name in ("NO_PROXY", "no_proxy")},
    }


def start_proxy(listener: int, policy: NetworkPolicy, watched: int, log_fd: int) -> int:
    """A proxy process serving the listening descriptor ``listener`` under
    ``policy`` until process ``watched`` (the sandbox's) ends; its pid. It is
    no child of this process (it forks once more and reports its pid): it
    outlives this client, as the sandbox does, and its end is reaped by
    whoever reaps orphans, not left a zombie here."""
    started = start_time(watched)
    if not started:
        raise OSError(f"process {watched} is gone")
    report_r, report_w = os.pipe()
    try:
        arguments = [str(listener), policy.model_dump_json(), str(watched), started, str(report_w)]
        launcher = subprocess.Popen(
            [sys.executable, "-m", __name__, *arguments],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            pass_fds=(listener, report_w),
            start_new_session=True,
            env={**os.environ, "PYTHONSAFEPATH": "1"},
        )
    finally:
        os.close(report_w)
    with open(report_r, "rb") as report:
        pid = report.read()  # the end of input once the proxy wrote its pid and the launcher left
    launcher.wait()
    if not pid:
        raise OSError(f"the egress proxy did not start (exit {launcher.returncode})")
    return int(pid)


def main(argv: list[str]) -> None:
    fd, policy_json, pid, started, report = argv
    if os.fork():  # the launcher: its starter waits for it alone
        os._exit(0)
    os.write(int(report), str(os.getpid()).encode())
    os.close(int(report))
    listener = socket.socket(fileno=int(fd))
    proxy = EgressProxy(listener, NetworkPolicy(**json.loads(policy_json)))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    while start_time(int(pid)) == started:
        time.sleep(WATCH_SECONDS)  # a poll of the sandbox's end, not a wait for a condition we are told of


if __name__ == "__main__":
    main(sys.argv[1:])
