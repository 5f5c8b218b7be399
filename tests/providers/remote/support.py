"""Runners and coordinators as real processes on 127.0.0.1 (ephemeral
ports), for the remote provider's tests and benchmarks/remote.py."""

from __future__ import annotations

import datetime
import ipaddress
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from sandbox_sdk.wire.security import CLIENT_TOKEN_ENV, TOKEN_ENV, RunnerTokens

READY_SECONDS = 30.0


def new_token() -> str:
    return secrets.token_urlsafe(24)


class Service:
    """A ``python -m sandbox_sdk.runner`` process, started and awaited until
    it prints its ready line; its log (stderr) goes to ``log_path``.
    ``tokens`` are its environment's (by variable), none inherited."""

    def __init__(
        self, args: Sequence[str], log_path: Path, *, tokens: dict[str, str], ready: str | None
    ) -> None:
        env = {key: value for key, value in os.environ.items() if key not in (TOKEN_ENV, CLIENT_TOKEN_ENV)}
        env.update(tokens)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "sandbox_sdk.runner", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                text=True,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ready = "" if ready is None else self.expect(ready)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def expect(self, prefix: str, seconds: float = READY_SECONDS) -> str:
        """The rest of the next stdout line starting with ``prefix``."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                raise AssertionError(f"no {prefix!r} line from {self.process.args!r}; log:\n{self.log()}")
            if line.startswith(prefix):
                return line[len(prefix) :]

    @property
    def url(self) -> str:
        """Where a listening service listens."""
        return self.ready

    @property
    def port(self) -> int:
        return int(self.ready.rsplit(":", 1)[1])

    def log(self) -> str:
        return self.log_path.read_text()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def start_runner(
    directory: Path,
    token: str | None,
    *,
    runner_token: str | None = None,
    backend: str = "local",
    listen: str = "127.0.0.1:0",
    connect: str | None = None,
    extra: Sequence[str] = (),
    wait: bool = True,
) -> Service:
    """A runner whose workspace root is ``directory/root``, listening or dialled
    out to ``connect`` (with ``runner_token``); its clients present ``token``.
    Awaited until ready unless ``wait`` is false."""
    where = ["--connect", connect] if connect else ["--listen", listen]
    args = [*where, "--backend", backend, "--root", str(directory / "root"), *extra]
    ready = ("registered at " if connect else "listening on ") if wait else None
    tokens = {CLIENT_TOKEN_ENV: token, TOKEN_ENV: runner_token}
    present = {name: value for name, value in tokens.items() if value is not None}
    return Service(args, _log_path(directory, "runner"), tokens=present, ready=ready)


def start_coordinator(
    directory: Path,
    tokens: dict[str, RunnerTokens],
    *,
    listen: str = "127.0.0.1:0",
    extra: Sequence[str] = (),
) -> Service:
    tokens_file = directory / "tokens.txt"
    tokens_file.write_text(
        "# runner-id runner-token client-token\n"
        + "".join(f"{rid} {pair.runner} {pair.client}\n" for rid, pair in tokens.items())
    )
    args = ["coordinator", "--listen", listen, "--tokens", str(tokens_file), *extra]
    return Service(args, _log_path(directory, "coordinator"), tokens={}, ready="listening on ")


@contextmanager
def coordinated_runner(
    directory: Path, token: str, *, backend: str = "local", runner_id: str = "laptop"
) -> Iterator[tuple[Service, Service, str]]:
    """A coordinator, a runner registered at it (with a runner token of its
    own), and the client URL for that runner, whose clients present ``token``."""
    directory.mkdir(parents=True, exist_ok=True)
    runner_token = new_token()
    coordinator = start_coordinator(directory, {runner_id: RunnerTokens(runner_token, token)})
    try:
        runner = start_runner(
            directory,
            token,
            runner_token=runner_token,
            backend=backend,
            connect=f"{coordinator.url}/runner/{runner_id}",
        )
        try:
            yield coordinator, runner, f"{coordinator.url}/client/{runner_id}"
        finally:
            runner.stop()
    finally:
        coordinator.stop()


@contextmanager
def listening_runner(directory: Path, token: str, *, backend: str = "local") -> Iterator[Service]:
    directory.mkdir(parents=True, exist_ok=True)
    runner = start_runner(directory, token, backend=backend)
    try:
        yield runner
    finally:
        runner.stop()


def _log_path(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{name}-{secrets.token_hex(3)}.log"


def wait_for(condition: Callable[[], bool], seconds: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not true after {seconds} s")
        time.sleep(0.05)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM), made with the
    ``cryptography`` package if installed, else the ``openssl`` command;
    the test is skipped if neither is here."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    try:
        _certificate_with_cryptography(cert, key)
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("making a test certificate needs the cryptography package or the openssl command")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True,
            capture_output=True,
        )  # fmt: skip
    return cert, key


def _certificate_with_cryptography(cert: Path, key: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
