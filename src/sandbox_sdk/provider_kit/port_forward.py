"""A host-side TCP forwarder into a sandbox: what ``expose_port`` returns a URL of.

It listens on the host (``127.0.0.1`` unless asked for another address) and,
for each connection it accepts, asks the provider for a connection to the
port inside the sandbox (``connect``: bwrap's jail server connects from
inside the jail's network namespace and hands the socket over; docker gives
one end of a socket pair carried to a relay exec in the container), then copies
bytes both ways until either side closes, so HTTP and WebSocket both work.
A ``connect`` that raises ``SandboxNotFoundError`` (the sandbox is gone)
closes the forwarder; any other failure closes that one connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable

from sandbox_sdk import errors

log = logging.getLogger("sandbox_sdk.ports")
CHUNK = 64 * 1024


class PortForwarder:
    """Forwards ``host:<a free port>`` to whatever ``connect()`` reaches."""

    def __init__(self, connect: Callable[[], socket.socket], *, host: str = "127.0.0.1") -> None:
        self._connect = connect
        self._listener = socket.create_server((host, 0))
        self.host, self.port = self._listener.getsockname()[:2]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"sandbox-port-{self.port}", daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop listening and end every forwarded connection."""
        with self._lock:
            self._closed = True
            sockets = [self._listener, *self._open]
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = self._connect()
        except errors.SandboxNotFoundError:
            client.close()
            self.close()
            return
        except (OSError, errors.SandboxError) as exc:
            log.info("port %s: no connection into the sandbox: %s", self.port, exc)
            client.close()
            return
        if not self._track(client, upstream):
            return
        relay(client, upstream)
        with self._lock:
            self._open.difference_update((client, upstream))
        client.close()
        upstream.close()

    def _track(self, *sockets: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                for sock in sockets:
                    sock.close()
                return False
            self._open.update(sockets)
            return True


def relay(first: socket.socket, second: socket.socket) -> None:
    """Bytes both ways until both sides have ended (a half-close is passed on)."""
    back = threading.Thread(target=_pump, args=(second, first), daemon=True)
    back.start()
    _pump(first, second)
    back.join()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until ``source`` ends, then end ``sink``'s writing half."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class ExposedPorts:
    """A sandbox's forwarders, one per port exposed: what ``expose_port`` and
    ``unexpose`` keep, whatever ``connect(port)`` reaches the port with."""

    def __init__(self, connect: Callable[[int], socket.socket]) -> None:
        self._connect = connect
        self._forwarders: dict[int, PortForwarder] = {}
        self._lock = threading.Lock()

    def expose(self, port: int, host: str) -> str:
        """The URL of ``port``'s forwarder, started on ``host`` unless one is already
        running (exposing a port again returns the same URL)."""
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise errors.InvalidArgumentError(f"port must be an int from 1 to 65535, not {port!r}")
        with self._lock:
            forwarder = self._forwarders.get(port)
            if forwarder is None or forwarder.closed:
                forwarder = PortForwarder(lambda: self._connect(port), host=host)
                self._forwarders[port] = forwarder
            return forwarder.url

    def unexpose(self, port: int) -> None:
        with self._lock:
            forwarder = self._forwarders.pop(port, None)
        if forwarder is not None:
            forwarder.close()
