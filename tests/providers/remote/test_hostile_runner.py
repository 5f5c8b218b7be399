"""A runner that lies: the client bounds what it takes by its own limits,
not by what the runner announces."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from websockets.sync.server import ServerConnection, serve

from sandbox_sdk import errors, wire
from sandbox_sdk.providers.remote import RemoteProvider

HUGE_BODY = 1536 * 1024 * 1024


def lying_runner(connection: ServerConnection) -> None:
    """Announces ``max_output_bytes=2**45``, then answers ``list`` with a
    1.5 GiB body that never comes, and ``get`` honestly."""
    wire.decode(connection.recv())
    limits = {
        "max_command_bytes": 4096,
        "max_output_bytes": 2**45,
        "max_concurrent": 2**40,
        "default_timeout": 9,
    }
    connection.send(wire.encode("welcome", runner="liar", backend="local", limits=limits))
    for message in connection:
        frame = wire.decode(message)
        if frame["op"] == "get":
            connection.send(
                wire.encode("response", id=frame["id"], ok=True, result={"id": "local-1"}, size=0)
            )
        else:
            connection.send(wire.encode("response", id=frame["id"], ok=True, result={}, size=HUGE_BODY))


@contextmanager
def hostile_runner() -> Iterator[str]:
    with serve(lying_runner, "127.0.0.1", 0, compression=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
        finally:
            server.shutdown()
            thread.join(10)


def test_announced_limits_are_capped_and_a_huge_body_is_refused(token: str) -> None:
    with hostile_runner() as url, RemoteProvider(url, token) as provider:
        sandbox = provider.get("local-1")
        assert sandbox.limits.max_output_bytes <= 64 * 1024 * 1024  # the client's own cap, not 2**45
        with ThreadPoolExecutor(1) as pool:
            listing = pool.submit(provider.list)
            with pytest.raises(
                errors.ProviderUnavailableError, match=r"broke the protocol.*1610612736 bytes"
            ):
                listing.result(timeout=60)
