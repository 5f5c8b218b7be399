"""The runner and the coordinator as real processes: authentication, limits,
concurrency, cancellation, failures and reconnection, TLS, the log."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from sandbox_sdk import errors, wire
from sandbox_sdk.providers.remote import RemoteProvider
from sandbox_sdk.providers.remote import sandbox as remote_sandbox
from sandbox_sdk.runner.coordinator import MAX_UNAUTHENTICATED
from sandbox_sdk.wire.security import RunnerTokens
from tests.providers.remote.support import (
    Service,
    new_token,
    self_signed_certificate,
    start_coordinator,
    start_runner,
    wait_for,
)


@pytest.fixture
def runner(tmp_path: Path, token: str) -> Iterator[Service]:
    """A runner of this test alone (its log is the test's to read), on the local backend."""
    service = start_runner(tmp_path, token)
    yield service
    service.stop()


@contextmanager
def raw_connection(url: str, token: str | None = None) -> Iterator[ClientConnection]:
    """A WebSocket speaking the protocol by hand; authenticated if ``token`` is given."""
    with connect(url, max_size=None, compression=None, open_timeout=10) as connection:
        if token is not None:
            connection.send(wire.encode("hello", token=token))
            assert wire.decode(connection.recv(timeout=10))["type"] == "welcome"
        yield connection


def close_code(connection: ClientConnection) -> int:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            connection.recv(timeout=10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code


def send_execute(connection: ClientConnection, request_id: int, sandbox_id: str, command: str) -> None:
    body = command.encode()
    args = {"sandbox": sandbox_id, "timeout": 10.0}
    connection.send(wire.encode("request", id=request_id, op="execute", args=args, size=len(body)))
    for chunk in wire.chunks(request_id, body):
        connection.send(chunk)


def responses(connection: ClientConnection, count: int) -> list[dict[str, Any]]:
    """The next ``count`` response headers, in arrival order (bodies skipped)."""
    found: list[dict[str, Any]] = []
    while len(found) < count:
        message = connection.recv(timeout=10)
        if isinstance(message, str):
            found.append(wire.decode(message))
    return found


def executed(log: str) -> int:
    """How many commands the runner's log says it executed."""
    return log.count("op=execute")


def running(pattern: str) -> list[int]:
    """The processes whose command line holds ``pattern``."""
    found = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True, check=False)
    return [int(pid) for pid in found.stdout.split()]


def is_running(pattern: str) -> bool:
    return bool(running(pattern))


def resident_bytes(pid: int) -> int:
    """The memory process ``pid`` holds (VmRSS)."""
    status = Path(f"/proc/{pid}/status").read_text()
    [kib] = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
    return int(kib) * 1024


def send_request(
    connection: ClientConnection, request_id: int, op: str, args: dict[str, Any], size: int
) -> None:
    connection.send(wire.encode("request", id=request_id, op=op, args=args, size=size))


# -- authentication ------------------------------------------------------------------------


def test_nothing_runs_before_authentication(runner: Service, token: str, tmp_path: Path) -> None:
    marker = tmp_path / "must-not-exist"
    with raw_connection(runner.url) as connection:
        with contextlib.suppress(ConnectionClosed):  # the runner may hang up before the body is sent
            send_execute(connection, 1, "local-000000000000000000000000", f"touch {marker}")
        assert close_code(connection) == wire.CloseCode.UNAUTHORIZED
    with raw_connection(runner.url) as connection:
        connection.send(wire.encode("hello", token=token[:-1] + "!"))
        assert close_code(connection) == wire.CloseCode.UNAUTHORIZED
    with (
        RemoteProvider(runner.url, "a-wrong-token-of-some-length") as provider,
        pytest.raises(errors.AuthenticationError, match="refused the token"),
    ):
        provider.create()
    assert not marker.exists()
    assert executed(runner.log()) == 0
    assert runner.log().count("refused: no valid token") == 3


def test_wrong_tokens_at_the_coordinator(tmp_path: Path, token: str, runner_token: str) -> None:
    coordinator = start_coordinator(tmp_path, {"laptop": RunnerTokens(runner_token, token)})
    laptop = f"{coordinator.url}/runner/laptop"
    try:
        # Nor a stranger nor a client (it holds the client token) registers as the runner while it is away.
        for wrong in ("not-the-runner-token", token):
            impostor = start_runner(tmp_path, new_token(), runner_token=wrong, connect=laptop, wait=False)
            assert impostor.process.wait(30) == 2
            assert "refused this runner's token" in impostor.log()
        same = start_runner(tmp_path, token, runner_token=token, connect=laptop, wait=False)
        assert same.process.wait(30) == 2
        assert "must differ" in same.log()
        runner = start_runner(tmp_path, token, runner_token=runner_token, connect=laptop)
        for url in (f"{coordinator.url}/client/laptop", f"{coordinator.url}/client/unknown-runner"):
            for wrong in ("a-wrong-token-of-some-length", runner_token):
                with RemoteProvider(url, wrong) as provider, pytest.raises(errors.AuthenticationError):
                    provider.list()
        with RemoteProvider(f"{coordinator.url}/client/laptop", token) as provider:
            assert provider.list(labels={"none": "such"}).items == []
        runner.stop()
    finally:
        coordinator.stop()
    assert coordinator.log().count("refused: no valid token") == 6


#: A WebSocket handshake's request, by hand.
UPGRADE = (
    b"GET /client/laptop HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def test_the_coordinator_drops_connections_that_do_not_authenticate(
    tmp_path: Path, token: str, runner_token: str
) -> None:
    """Silent TCP connections (more than the coordinator keeps), ones
    trickling an HTTP request, and silent WebSockets: all dropped in time."""
    coordinator = start_coordinator(tmp_path, {"laptop": RunnerTokens(runner_token, token)})
    connections: list[socket.socket] = []
    try:

        def connect() -> socket.socket:
            return socket.create_connection(("127.0.0.1", coordinator.port))

        upgraded = [connect() for _ in range(4)]
        for connection in upgraded:
            connection.sendall(UPGRADE)
        trickling = [connect() for _ in range(4)]
        for connection in trickling:
            connection.sendall(b"GET /client/laptop HTTP/1.1\r\n")
        silent = [connect() for _ in range(MAX_UNAUTHENTICATED + 8)]
        connections = upgraded + trickling + silent
        for connection in connections:
            connection.setblocking(False)

        def all_closed() -> bool:
            for connection in trickling:
                with contextlib.suppress(OSError):
                    connection.send(b"X")  # one byte of a header at a time, never its end
            return all(is_closed(connection) for connection in connections)

        wait_for(all_closed, 60, "the coordinator dropped every unauthenticated connection")
        log = coordinator.log()
        assert "connections are in their handshake" in log
        assert "no WebSocket handshake within" in log
        assert "refused: no valid token" in log  # the upgraded ones, at their hello's deadline
        runner = start_runner(
            tmp_path, token, runner_token=runner_token, connect=f"{coordinator.url}/runner/laptop"
        )
        try:
            with RemoteProvider(f"{coordinator.url}/client/laptop", token) as provider:
                assert provider.list(labels={"none": "such"}).items == []
        finally:
            runner.stop()
    finally:
        for connection in connections:
            connection.close()
        coordinator.stop()


def is_closed(connection: socket.socket) -> bool:
    """Whether the peer closed ``connection`` (a non-blocking socket); what it sent is read and dropped."""
    try:
        while connection.recv(65536):
            pass
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


# -- limits ------------------------------------------------------------------------------------


def test_an_oversized_frame_closes_the_connection(tmp_path: Path, token: str, runner_token: str) -> None:
    coordinator = start_coordinator(tmp_path, {"laptop": RunnerTokens(runner_token, token)})
    runner = start_runner(
        tmp_path, token, runner_token=runner_token, connect=f"{coordinator.url}/runner/laptop"
    )
    direct = start_runner(tmp_path / "direct", token)
    try:
        for url in (direct.url, f"{coordinator.url}/client/laptop"):
            with raw_connection(url, token) as connection:
                connection.send(b"\0\0\0\1" + bytes(wire.MAX_FRAME_BYTES))
                assert close_code(connection) == wire.CloseCode.MESSAGE_TOO_BIG
            with RemoteProvider(url, token) as provider:  # others are served as before
                assert provider.list(labels={"none": "such"}).items == []
        with raw_connection(direct.url, token) as connection:  # a body announced over max_command_bytes
            size = 4 * 1024 * 1024 + 1
            connection.send(wire.encode("request", id=1, op="execute", args={"sandbox": "x"}, size=size))
            assert close_code(connection) == wire.CloseCode.PROTOCOL_ERROR
    finally:
        for service in (direct, runner, coordinator):
            service.stop()


def test_requests_over_the_concurrency_limit(tmp_path: Path, token: str) -> None:
    runner = start_runner(tmp_path, token, extra=["--max-concurrent", "2"])
    try:
        with RemoteProvider(runner.url, token) as provider:
            sandbox_id = provider.create().id
            # A client that ignores the advertised limit gets the third refused at once.
            with raw_connection(runner.url, token) as connection:
                for request_id in (1, 2, 3):
                    send_execute(connection, request_id, sandbox_id, "sleep 1; echo done")
                headers = responses(connection, 3)
            assert headers[0]["id"] == 3
            assert headers[0]["error"] == {
                "type": "RateLimitedError",
                "message": "more than 2 requests in flight on one connection",
                "path": None,
            }
            assert sorted(header["ok"] for header in headers) == [False, True, True]
            # The provider keeps to the limit: six calls queue and all succeed. Each
            # command counts the commands running as it starts (itself included) and
            # leaves before it ends, so no count passes the limit if none ran past it.
            sandbox = provider.get(sandbox_id)
            sandbox.mkdir("running")
            command = "touch running/{n}; ls running | wc -l > count-{n}; sleep 0.3; rm running/{n}; echo {n}"
            with ThreadPoolExecutor(6) as pool:
                outputs = list(pool.map(lambda n: sandbox.execute(command.format(n=n)).output, range(6)))
            assert outputs == [f"{n}\n" for n in range(6)]
            counts = [int(sandbox.read(f"count-{n}").content) for n in range(6)]
            assert max(counts) <= 2, counts
    finally:
        runner.stop()


#: Longest a command of the 32 waits for the others to run (a bound: they all run at once).
BARRIER_SECONDS = 60.0


def test_reap_deletes_the_runners_expired_sandboxes(runner: Service, token: str) -> None:
    """The runner's sandboxes live on its machine, which nothing else expires."""
    with RemoteProvider(runner.url, token) as provider:
        expiring = provider.create(idle_timeout=1).id
        kept = provider.create().id
        reaped: list[str] = []

        def reaped_some() -> bool:
            reaped.extend(provider.reap())
            return bool(reaped)

        wait_for(reaped_some, 60, "the idle sandbox was reaped")
        assert reaped == [expiring]
        assert [info.id for info in provider.iter_sandboxes()] == [kept]
        assert asyncio.run(provider.areap()) == []
    with raw_connection(runner.url, token) as connection:
        connection.send(wire.encode("request", id=1, op="reap", args={"all": True}, size=0))
        for chunk in wire.chunks(1, b""):
            connection.send(chunk)
        (header,) = responses(connection, 1)
    assert header["error"]["type"] == "InvalidArgumentError"


async def test_32_concurrent_operations_over_one_connection(runner: Service, token: str) -> None:
    with RemoteProvider(runner.url, token) as provider:
        sandbox = await provider.acreate()

        await sandbox.amkdir("running")

        async def one(n: int) -> str:
            await sandbox.awrite(f"file-{n}.txt", f"content {n}\n")
            # Each command waits until all 32 run: run one after another, the first
            # would wait for ever (its timeout ends it, and the test fails).
            barrier = f"touch running/{n}; until [ $(ls running | wc -l) -ge 32 ]; do sleep 0.05; done"
            response = await sandbox.aexecute(f"{barrier}; cat file-{n}.txt", timeout=BARRIER_SECONDS)
            return response.output

        outputs = await asyncio.gather(*(one(n) for n in range(32)))
        await provider.adelete(sandbox_id=sandbox.id)
    assert outputs == [f"content {n}\n" for n in range(32)]
    assert runner.log().count(": opened") == 1


@pytest.mark.parametrize("bad_id", [-1, 2**32, 2**40])
def test_request_ids_out_of_range_are_refused_and_the_session_goes_on(
    runner: Service, token: str, bad_id: int
) -> None:
    with raw_connection(runner.url, token) as connection:
        send_request(connection, bad_id, "list", {}, 0)
        send_request(connection, bad_id, "execute", {"sandbox": "x"}, 5)  # no chunk can carry its body
        for header in responses(connection, 2):
            assert header["id"] == bad_id
            assert header["ok"] is False and header["size"] == 0
            assert header["error"]["type"] == "InvalidArgumentError"
            assert "out of range" in header["error"]["message"]
        send_request(connection, 1, "list", {}, 0)
        [header] = responses(connection, 1)
        assert header["id"] == 1 and header["ok"] is True
    assert "Traceback" not in runner.log()


def test_announced_bodies_cost_nothing_and_a_session_buffers_a_bounded_amount(
    runner: Service, token: str
) -> None:
    size = 4 * 1024 * 1024
    with raw_connection(runner.url, token) as connection:
        before = resident_bytes(runner.process.pid)
        for request_id in range(1, 51):  # 200 MiB announced, none sent, all cancelled
            send_request(connection, request_id, "execute", {"sandbox": "x"}, size)
            connection.send(wire.encode("cancel", id=request_id))
        headers = responses(connection, 50)
        assert {header["error"]["type"] for header in headers} == {wire.CANCELLED}
        assert resident_bytes(runner.process.pid) - before < 32 * 1024 * 1024
    with raw_connection(runner.url, token) as connection:  # bodies sent all but their last byte
        with contextlib.suppress(ConnectionClosed):
            for request_id in (1, 2, 3):
                send_request(connection, request_id, "execute", {"sandbox": "x"}, size)
                for chunk in wire.chunks(request_id, bytes(size - 1)):
                    connection.send(chunk)
        assert close_code(connection) == wire.CloseCode.PROTOCOL_ERROR
    wait_for(lambda: "bytes of bodies under way" in runner.log(), 10, "the runner logged why")


# -- cancellation ------------------------------------------------------------------------------


def test_requests_cancelled_as_they_are_sent_are_answered_and_free_their_slots(
    runner: Service, token: str
) -> None:
    with raw_connection(runner.url, token) as connection:
        for request_id in range(1, 101):  # more than max_concurrent (64)
            send_request(connection, request_id, "list", {}, 0)
            connection.send(wire.encode("cancel", id=request_id))
        headers = responses(connection, 100)
        assert sorted(header["id"] for header in headers) == list(range(1, 101))
        assert all(header["ok"] or header["error"]["type"] == wire.CANCELLED for header in headers)
        send_request(connection, 101, "list", {}, 0)
        assert responses(connection, 1)[0]["ok"] is True


@pytest.mark.parametrize("backend_url", ["bwrap_url", "local_url"])
async def test_cancellation_kills_the_command_on_the_runner(
    backend_url: str, token: str, request: pytest.FixtureRequest
) -> None:
    pattern = f"sleep 987.{secrets.randbelow(10**6)}"
    with RemoteProvider(request.getfixturevalue(backend_url), token) as provider:
        sandbox = await provider.acreate()
        try:
            call = asyncio.ensure_future(sandbox.aexecute(f"{pattern}; echo finished", timeout=60))
            await asyncio.to_thread(wait_for, lambda: is_running(pattern), 15, "the command started")
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.to_thread(wait_for, lambda: not is_running(pattern), 5, "the command was killed")
            assert (await sandbox.aexecute("echo still usable")).output == "still usable\n"
        finally:
            await provider.adelete(sandbox_id=sandbox.id)


def test_a_call_past_its_deadline_is_cancelled_on_the_runner(
    local_url: str, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_sandbox, "REPLY_GRACE_SECONDS", -9.0)  # the client gives up after 1 s of 10
    pattern = f"sleep 876.{secrets.randbelow(10**6)}"
    with RemoteProvider(local_url, token) as provider:
        sandbox = provider.create()
        with pytest.raises(errors.SandboxTimeoutError, match="no answer from the runner within 1 s"):
            sandbox.execute(f"touch started; {pattern}", timeout=10)
        wait_for(lambda: not is_running(pattern), 5, "the command was killed")
        assert sandbox.stat("started").type == "file"  # it had started
        provider.delete(sandbox_id=sandbox.id)


# -- failures and reconnection -----------------------------------------------------------------


def test_a_runner_killed_mid_command_takes_the_command_along(tmp_path: Path, token: str) -> None:
    runner = start_runner(tmp_path, token)  # the local backend: no jail to end the command
    pattern = f"sleep 654.{secrets.randbelow(10**6)}"
    try:
        with RemoteProvider(runner.url, token) as provider, ThreadPoolExecutor(1) as pool:
            sandbox = provider.create()
            command = pool.submit(sandbox.execute, f"{pattern}; echo finished")
            wait_for(lambda: is_running(pattern), 15, "the command started")
            runner.kill()
            wait_for(lambda: not is_running(pattern), 30, "the command died with the runner")
            with pytest.raises(errors.ProviderUnavailableError):
                command.result(timeout=15)
    finally:
        for pid in running(pattern):  # only if the test failed
            os.kill(pid, signal.SIGKILL)
        runner.stop()


@pytest.mark.slow
def test_a_runner_killed_mid_command_fails_typed_and_commits_nothing(tmp_path: Path, token: str) -> None:
    runner = start_runner(tmp_path, token, backend="bwrap")
    same_place = f"127.0.0.1:{runner.port}"
    with RemoteProvider(runner.url, token) as provider, ThreadPoolExecutor(1) as pool:
        sandbox = provider.create()
        pattern = f"sleep 30.{secrets.randbelow(10**6)}"
        command = pool.submit(sandbox.execute, pattern)
        wait_for(lambda: is_running(pattern), 30, "the command started")
        runner.kill()
        with pytest.raises(errors.ProviderUnavailableError, match=r"lost|closed"):
            command.result(timeout=15)

        runner = start_runner(
            tmp_path, token, backend="bwrap", listen=same_place
        )  # the same root: the sandbox is there
        upload = pool.submit(sandbox.write, "big.bin", os.urandom(24 * 1024 * 1024))
        wait_for(lambda: executed(runner.log()) >= 1, 30, "the first chunk landed")
        runner.kill()
        with pytest.raises(errors.ProviderUnavailableError):
            upload.result(timeout=30)

        runner = start_runner(tmp_path, token, backend="bwrap", listen=same_place)
        try:
            with pytest.raises(FileNotFoundError):
                sandbox.stat("big.bin")  # the provider dialled the new runner by itself
            assert sandbox.execute("echo back").output == "back\n"
        finally:
            provider.delete(sandbox_id=sandbox.id)
            runner.stop()


def test_the_runner_redials_a_restarted_coordinator(tmp_path: Path, token: str, runner_token: str) -> None:
    tokens = {"laptop": RunnerTokens(runner_token, token)}
    coordinator = start_coordinator(tmp_path, tokens)
    runner = start_runner(
        tmp_path, token, runner_token=runner_token, connect=f"{coordinator.url}/runner/laptop"
    )
    try:
        with RemoteProvider(f"{coordinator.url}/client/laptop", token) as provider:
            sandbox = provider.create()
            coordinator.kill()
            with pytest.raises(errors.ProviderUnavailableError):
                sandbox.execute("true")
            coordinator = start_coordinator(tmp_path, tokens, listen=f"127.0.0.1:{coordinator.port}")
            runner.expect("registered at ")
            assert sandbox.execute("echo again").output == "again\n"
            provider.delete(sandbox_id=sandbox.id)
        assert "redialling in about" in runner.log()
    finally:
        runner.stop()
        coordinator.stop()


def test_a_second_runner_with_the_same_id_is_refused(tmp_path: Path, token: str, runner_token: str) -> None:
    coordinator = start_coordinator(tmp_path, {"laptop": RunnerTokens(runner_token, token)})
    first = start_runner(
        tmp_path / "first", token, runner_token=runner_token, connect=f"{coordinator.url}/runner/laptop"
    )
    second = start_runner(
        tmp_path / "second",
        token,
        runner_token=runner_token,
        connect=f"{coordinator.url}/runner/laptop",
        wait=False,
    )
    try:
        wait_for(lambda: "runner id already connected" in second.log(), 15, "the second runner was refused")
        with RemoteProvider(f"{coordinator.url}/client/laptop", token) as provider:
            sandbox = provider.create()
            assert (tmp_path / "first" / "root" / "sandboxes" / sandbox.id).is_dir()
            provider.delete(sandbox_id=sandbox.id)
        assert "already connected" in coordinator.log()
    finally:
        for service in (second, first, coordinator):
            service.stop()


# -- TLS and the log ------------------------------------------------------------------------------


def test_tls_direct_and_through_the_coordinator(tmp_path: Path, token: str, runner_token: str) -> None:
    cert, key = self_signed_certificate(tmp_path)
    tls = ["--certfile", str(cert), "--keyfile", str(key)]
    direct = start_runner(tmp_path / "direct", token, extra=tls)
    coordinator = start_coordinator(tmp_path, {"laptop": RunnerTokens(runner_token, token)}, extra=tls)
    runner_url = f"{coordinator.url}/runner/laptop"
    relayed = start_runner(
        tmp_path / "relayed",
        token,
        runner_token=runner_token,
        connect=runner_url,
        extra=["--cafile", str(cert)],
    )
    try:
        for url in (direct.url, f"{coordinator.url}/client/laptop"):
            assert url.startswith("wss://")
            with RemoteProvider(url, token, cafile=str(cert)) as provider:
                sandbox = provider.create()
                assert sandbox.execute("echo over tls").output == "over tls\n"
                provider.delete(sandbox_id=sandbox.id)
            with (
                RemoteProvider(url, token) as untrusting,
                pytest.raises(errors.ProviderUnavailableError, match="CERTIFICATE_VERIFY_FAILED"),
            ):
                untrusting.list()
    finally:
        for service in (relayed, coordinator, direct):
            service.stop()


def test_what_a_client_sends_cannot_forge_log_lines(runner: Service, token: str) -> None:
    forged = "\nsession 9 (forged): request=1 op=delete sandbox=all"
    with raw_connection(runner.url, token) as connection:
        send_request(connection, 1, "get", {"sandbox": "x" + forged}, 0)
        send_request(connection, 2, "op" + forged, {}, 0)
        assert [header["ok"] for header in responses(connection, 2)] == [False, False]
        connection.send(wire.encode("bogus" + forged))
        assert close_code(connection) == wire.CloseCode.PROTOCOL_ERROR
    escaped = "\\nsession 9 (forged)"  # on the lines of the requests and of the protocol error
    wait_for(lambda: runner.log().count(escaped) == 3, 10, "the runner logged all three")
    log = runner.log()
    assert not [line for line in log.splitlines() if line.startswith("session 9")]
    assert "sandbox='x\\nsession 9" in log


def test_one_log_line_per_command_without_its_content(runner: Service, token: str) -> None:
    secret = "s3cr3t-" + secrets.token_hex(8)
    with RemoteProvider(runner.url, token) as provider:
        sandbox = provider.create()
        command = f"echo {secret} > /dev/null"
        assert sandbox.execute(command).exit_code == 0
        provider.delete(sandbox_id=sandbox.id)
    log = runner.log()
    [line] = [
        line for line in log.splitlines() if "op=execute" in line and f"command_bytes={len(command)}" in line
    ]
    assert f"sandbox={sandbox.id}" in line and "exit=0" in line
    assert secret not in log
