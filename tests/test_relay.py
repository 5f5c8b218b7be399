"""``remote/_relay.py`` run on this machine as a container runs it (``python3 -I -S
-c``), against a server on this host's loopback; and the demultiplexing of the exec
stream it is read through (``Frames``). The docker provider's ``expose_port`` relays
every forwarded connection this way (tests/providers/docker/test_ports.py runs it in
real containers)."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib import resources

import pytest

from sandbox_sdk.providers.docker.sandbox import STDERR, STDOUT, Frames

SOURCE = resources.files("sandbox_sdk.remote").joinpath("_relay.py").read_text("utf-8")


def relay(port: int, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", SOURCE, str(port)],
        check=False,
        input=stdin,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def echo_port() -> Iterator[int]:
    """An echo server's port on loopback: every byte back, then its close at the client's half-close."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()
    thread.join(timeout=10)


def test_the_relay_carries_bytes_both_ways_and_the_half_close(echo_port: int) -> None:
    """stdin's end reaches the server as a half-close (else it would never close), and
    the relay exits once the server has closed, every byte delivered."""
    payload = bytes(range(256)) * 4096
    done = relay(echo_port, payload)
    assert (done.returncode, done.stdout, done.stderr) == (0, payload, b"")


def test_the_relay_exits_at_once_where_nobody_listens() -> None:
    with socket.socket() as unlistened:
        unlistened.bind(("127.0.0.1", 0))
        done = relay(unlistened.getsockname()[1], b"anyone there?")
    assert done.returncode == 1
    assert done.stdout == b""
    assert b"cannot connect" in done.stderr


def test_frames_are_read_however_the_bytes_are_cut() -> None:
    """The engine's frames (an 8-byte header: the stream, three zero bytes, the size) may
    arrive split anywhere, a header included."""
    sent = [(STDOUT, b"hello "), (STDERR, b"a report"), (STDOUT, b""), (STDOUT, b"world" * 1000)]
    wire = b"".join(struct.pack(">BxxxL", stream, len(data)) + data for stream, data in sent)
    for cut in range(0, len(wire), 3):
        frames = Frames()
        pieces = frames.feed(wire[:cut]) + frames.feed(wire[cut:])
        for stream in (STDOUT, STDERR):
            got = b"".join(piece for number, piece in pieces if number == stream)
            assert got == b"".join(data for number, data in sent if number == stream)
