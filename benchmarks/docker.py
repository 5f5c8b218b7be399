"""What a container costs against a bwrap jail, per engine, in one run.

    .venv/bin/python -m benchmarks.docker [--rounds 100] [--mib 50] [--repeat 2] [--creates 5]

The engines are the ones ``scripts/services start`` starts (``DOCKER_HOST`` for dockerd,
``CONTAINER_HOST`` for podman, else their sockets in its state directory); an engine that
does not answer is left out and said so. The baseline, bwrap, is measured in the same run.

* Create: ``create()`` then ``delete``, ``--creates`` times each, alternating; the median.
* Round trip: ``execute("true")`` and ``stat`` (a file operation), alternating sandbox by
  sandbox round by round so drift in machine load hits all alike; median, p90 and the
  ratio of medians against bwrap.
* Ports: the first byte of an HTTP GET (``python3 -m http.server`` started in the
  sandbox) through its ``expose_port`` URL, alternating sandbox by sandbox; median, p90
  and the ratio against the same sandbox's ``execute("true")`` (docker relays each
  connection with an exec, so an exec is what it costs).
* Throughput: ``upload_files`` and ``download_files`` of one ``--mib`` MiB file, best of
  ``--repeat``; MiB/s and the ratio against bwrap.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks._round_trips import round_trips
from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.docker import DockerProvider
from tests.providers.docker.conftest import ENGINES, engine_url

WARMUP = 5
MIB = 1024 * 1024
#: The server whose port the ports round trip reaches.
SERVER = "python3 -m http.server 8000 --bind 127.0.0.1 --directory site"
#: Seconds a server started in a sandbox may take to answer.
PATIENCE = 30.0


def providers(stack: ExitStack, directory: Path) -> dict[str, SandboxProvider[Any]]:
    made: dict[str, SandboxProvider[Any]] = {"bwrap": BwrapProvider(directory / "bwrap")}
    for engine in ENGINES:
        url = engine_url(engine)
        try:
            if url is None:
                raise errors.ProviderUnavailableError("not started: run scripts/services start")
            made[engine] = stack.enter_context(DockerProvider(base_url=url))
        except errors.ProviderUnavailableError as exc:
            print(f"{engine}: left out ({exc})")
    return made


def creates(made: dict[str, SandboxProvider[Any]], count: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {}
    for _ in range(count):
        for name, provider in made.items():
            started = time.perf_counter()
            sandbox = provider.create()
            samples.setdefault(name, []).append(time.perf_counter() - started)
            provider.delete(sandbox.id)
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


def first_byte(address: tuple[str, int]) -> float:
    """Milliseconds from connecting to ``address`` to the first byte of the answer to a GET."""
    started = time.perf_counter()
    with socket.create_connection(address, timeout=PATIENCE) as conn:
        conn.sendall(b"GET /page.txt HTTP/1.0\r\n\r\n")
        if not conn.recv(1):
            raise ConnectionResetError("closed before answering")
        elapsed = (time.perf_counter() - started) * 1000
        while conn.recv(65536):
            pass
    return elapsed


def first_bytes(sandboxes: dict[str, BaseSandbox], rounds: int) -> dict[str, list[float]]:
    """:func:`first_byte` through each sandbox's exposed port 8000, ``rounds`` times after
    ``WARMUP`` (the first waits for the server to answer)."""
    addresses: dict[str, tuple[str, int]] = {}
    for name, sandbox in sandboxes.items():
        sandbox.write("site/page.txt", "page\n")
        sandbox.start(SERVER)
        url = urlsplit(sandbox.expose_port(8000))
        assert url.hostname is not None and url.port is not None
        addresses[name] = (url.hostname, url.port)
    deadline = time.monotonic() + PATIENCE
    for address in addresses.values():
        while True:
            try:
                first_byte(address)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    samples: dict[str, list[float]] = {}
    for done in range(WARMUP + rounds):
        for name, address in addresses.items():
            elapsed = first_byte(address)
            if done >= WARMUP:
                samples.setdefault(name, []).append(elapsed)
    return samples


def throughput(sandboxes: dict[str, BaseSandbox], size: int, repeat: int) -> dict[tuple[str, str], float]:
    data = os.urandom(size)
    best: dict[tuple[str, str], float] = {}
    for _ in range(repeat):
        for name, sandbox in sandboxes.items():
            started = time.perf_counter()
            [upload] = sandbox.upload_files([("bench.bin", data)])
            up = time.perf_counter() - started
            started = time.perf_counter()
            [download] = sandbox.download_files(["bench.bin"])
            down = time.perf_counter() - started
            assert upload.error is None and download.content == data
            for operation, seconds in (("upload_files", up), ("download_files", down)):
                best[(operation, name)] = min(best.get((operation, name), float("inf")), seconds)
    return {key: size / MIB / seconds for key, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--mib", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--creates", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        made = providers(stack, Path(scratch))
        created = creates(made, args.creates)
        print("create + health check, median ms:")
        for name, ms in created.items():
            print(f"  {name:8} {ms:8.0f}  x{ms / created['bwrap']:.1f}")
        sandboxes = {name: provider.create() for name, provider in made.items()}
        try:
            samples = round_trips(sandboxes, args.rounds, WARMUP)
            print("round trip, ms: median / p90 / ratio of medians against bwrap")
            for (operation, name), values in samples.items():
                median = statistics.median(values)
                p90 = statistics.quantiles(values, n=10)[-1]
                base = statistics.median(samples[(operation, "bwrap")])
                print(f"  {operation:16} {name:8} {median:7.1f} {p90:7.1f}  x{median / base:.1f}")
            ports = first_bytes(sandboxes, args.rounds)
            print('first byte of a GET through expose_port, ms: median / p90 / ratio to its execute("true")')
            for name, values in ports.items():
                median = statistics.median(values)
                p90 = statistics.quantiles(values, n=10)[-1]
                command = statistics.median(samples[('execute("true")', name)])
                print(f"  {name:8} {median:7.1f} {p90:7.1f}  x{median / command:.2f}")
            rates = throughput(sandboxes, args.mib * MIB, args.repeat)
            print(f"{args.mib} MiB, MiB/s (best of {args.repeat}) and the ratio against bwrap:")
            for (operation, name), rate in rates.items():
                print(f"  {operation:16} {name:8} {rate:7.1f}  x{rate / rates[(operation, 'bwrap')]:.2f}")
        finally:
            for name, sandbox in sandboxes.items():
                made[name].delete(sandbox.id)


if __name__ == "__main__":
    main()
