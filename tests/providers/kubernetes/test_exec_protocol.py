"""Pod exec against a fake exec endpoint on 127.0.0.1: what the 1.20 test cluster cannot
show (v5 and its stdin close, a stream that breaks, an empty or contradicting status
channel, refusals), each answered as the protocol says.

The fake is written from the protocol's source: k8s.io/apimachinery
``pkg/util/remotecommand/constants.go`` (the ``v4.channel.k8s.io`` and
``v5.channel.k8s.io`` names), ``pkg/util/httpstream/wsstream/conn.go`` (one channel byte,
then the data, per binary message; channels 0 stdin, 1 stdout, 2 stderr, 3 error) and
KEP-4006 (v5: the message ``[255, N]`` closes channel N), and the exit status as
``k8s.io/kubelet``'s exec handler writes it on the error channel (a ``metav1.Status``:
``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and a cause ``ExitCode``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

import kubernetes.client
import pytest
from websockets.sync.server import Server, ServerConnection, serve

from sandbox_sdk import errors
from sandbox_sdk.providers.kubernetes import _exec
from sandbox_sdk.providers.kubernetes import sandbox as sandbox_module
from sandbox_sdk.providers.kubernetes.sandbox import KubernetesSandbox

SUCCESS = {"kind": "Status", "apiVersion": "v1", "status": "Success"}


def exit_status(code: int) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


@dataclass
class Seen:
    """What the fake received on one exec."""

    argv: list[str]
    stdin: bytes = b""
    closed_stdin: bool = False
    protocol: str = ""


@dataclass
class FakeExec:
    """An exec endpoint: each pod name is a scenario (a method of this class)."""

    protocols: list[str]
    execs: list[Seen] = field(default_factory=list)

    def handle(self, connection: ServerConnection) -> None:
        assert connection.request is not None
        url = urlparse(connection.request.path)
        pod = url.path.split("/")[6]
        seen = Seen(parse_qs(url.query)["command"], protocol=connection.subprotocol or "")
        self.execs.append(seen)
        getattr(self, pod.replace("-", "_"))(connection, seen)

    @staticmethod
    def send(connection: ServerConnection, channel: int, data: bytes) -> None:
        connection.send(bytes([channel]) + data)

    def read_stdin(self, connection: ServerConnection, seen: Seen) -> None:
        """Stdin to its close (v5) or to the byte count the runner was given (v4)."""
        if seen.argv[5] != "stdin":
            return
        wanted = int(seen.argv[6])
        while seen.protocol == _exec.V5_PROTOCOL or len(seen.stdin) < wanted:
            message = connection.recv()
            assert isinstance(message, bytes)
            if message[:1] == bytes([_exec.CLOSE]):
                assert message[1:] == bytes([_exec.STDIN])
                seen.closed_stdin = True
                return
            assert message[0] == _exec.STDIN
            seen.stdin += message[1:]

    def report(self, connection: ServerConnection, seen: Seen, code: int) -> None:
        self.send(connection, _exec.STDERR, f"{seen.argv[-1]} {code}\n".encode())

    # -- scenarios ---------------------------------------------------------------------

    def split_character(self, connection: ServerConnection, seen: Seen) -> None:
        """``héllo``, its é split across two messages; status and report agree."""
        self.read_stdin(connection, seen)
        self.send(connection, _exec.STDOUT, "hé".encode()[:2])
        self.send(connection, _exec.STDOUT, "hé".encode()[2:] + b"llo\n")
        self.report(connection, seen, 0)
        self.send(connection, _exec.ERROR, json.dumps(SUCCESS).encode())
        connection.close()

    def no_status(self, connection: ServerConnection, seen: Seen) -> None:
        self.send(connection, _exec.STDOUT, b"out\n")
        self.report(connection, seen, 7)
        connection.close()

    def status_only(self, connection: ServerConnection, seen: Seen) -> None:
        self.send(connection, _exec.ERROR, json.dumps(exit_status(9)).encode())
        connection.close()

    def disagree(self, connection: ServerConnection, seen: Seen) -> None:
        self.report(connection, seen, 5)
        self.send(connection, _exec.ERROR, json.dumps(exit_status(3)).encode())
        connection.close()

    def not_an_exit(self, connection: ServerConnection, seen: Seen) -> None:
        message = 'container not found ("sandbox")'
        failure = {"status": "Failure", "reason": "InternalError", "message": message}
        self.send(connection, _exec.ERROR, json.dumps(failure).encode())
        connection.close()

    def drop(self, connection: ServerConnection, seen: Seen) -> None:
        """Some output, then the connection is gone: no close frame, no status."""
        self.send(connection, _exec.STDOUT, b"partial")
        connection.socket.close()

    def silent(self, connection: ServerConnection, seen: Seen) -> None:
        """Output, then nothing until the client leaves."""
        self.send(connection, _exec.STDOUT, b"partial")
        connection.recv()


def refuse(connection: ServerConnection, request: Any) -> Any:
    """Refuse the upgrade for pods named ``http-<status>``, as an API server does."""
    pod = urlparse(request.path).path.split("/")[6]
    if pod.startswith("http-"):
        body = json.dumps({"kind": "Status", "status": "Failure", "message": f"refused {pod}"})
        return connection.respond(int(pod[5:]), body)
    return None


@pytest.fixture(params=[[_exec.V5_PROTOCOL, _exec.V4_PROTOCOL], [_exec.V4_PROTOCOL]], ids=["v5", "v4"])
def fake(request: pytest.FixtureRequest) -> Iterator[tuple[FakeExec, str]]:
    """A fake exec endpoint speaking the protocols of ``request.param`` and its URL."""
    endpoint = FakeExec(request.param)
    server: Server = serve(
        endpoint.handle,
        "127.0.0.1",
        0,
        subprotocols=request.param,
        process_request=refuse,
        compression=None,
        max_size=None,
        close_timeout=1,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield endpoint, f"http://127.0.0.1:{server.socket.getsockname()[1]}"
    finally:
        server.shutdown()
        thread.join()


def sandbox_on(url: str, pod: str) -> KubernetesSandbox:
    configuration = kubernetes.client.Configuration(host=url)
    return KubernetesSandbox(configuration, "ns", pod, sandbox_id=f"{pod}.000000000000")


Fake = tuple[FakeExec, str]


def test_the_newest_protocol_is_chosen_and_stdin_ends_by_its_rules(fake: Fake) -> None:
    """A command too long for an argument goes over stdin, in messages of at most 1 MiB:
    on v5 the channel is then closed; on v4 (which cannot close it) the runner reads
    exactly the bytes it was told."""
    endpoint, url = fake
    sandbox = sandbox_on(url, "split-character")
    command = "echo " + "x" * (3 * 1024 * 1024)
    result = sandbox.execute(command)
    assert (result.output, result.exit_code) == ("héllo\n", 0)
    (seen,) = endpoint.execs
    assert sandbox.protocol == seen.protocol == endpoint.protocols[0]
    assert seen.stdin == b"exec 3<&-; " + command.encode()
    assert seen.closed_stdin == (seen.protocol == _exec.V5_PROTOCOL)


def test_a_short_command_is_an_argument_with_no_stdin(fake: Fake) -> None:
    endpoint, url = fake
    assert sandbox_on(url, "split-character").execute("echo hi").output == "héllo\n"
    (seen,) = endpoint.execs
    assert seen.argv[5:7] == ["arg", "echo hi"] and seen.stdin == b""


@pytest.mark.parametrize(("pod", "code"), [("no-status", 7), ("status-only", 9), ("disagree", 5)], ids=str)
def test_the_exit_status_survives_a_missing_or_contradicting_channel(fake: Fake, pod: str, code: int) -> None:
    """The status channel can be empty (kubernetes-client/python #2156, #2328, #1840): the
    runner's report stands in; where they differ, the report is the command's own."""
    assert sandbox_on(fake[1], pod).execute("true").exit_code == code


def test_a_failure_that_is_no_exit_status_is_a_typed_error(fake: Fake) -> None:
    with pytest.raises(errors.SandboxNotFoundError, match="container not found"):
        sandbox_on(fake[1], "not-an-exit").execute("true")


def test_a_connection_that_breaks_mid_exec_is_an_error_not_partial_output(fake: Fake) -> None:
    with pytest.raises(errors.SandboxRuntimeError, match="ended before the command's exit status"):
        sandbox_on(fake[1], "drop").execute("true")


def test_a_silent_exec_times_out_with_what_it_wrote(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the timeout and the backstop, the response says so (a client timeout that
    returned the partial output as a result: kubernetes-client/python #1086)."""
    monkeypatch.setattr(sandbox_module, "BACKSTOP_SECONDS", 0.2)
    result = sandbox_on(fake[1], "silent").execute("sleep 100", timeout=0.3)
    assert (result.timed_out, result.exit_code, result.output) == (True, 124, "partial")


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (404, errors.SandboxNotFoundError),
        (403, errors.AuthenticationError),
        (500, errors.SandboxRuntimeError),
        (503, errors.SandboxRuntimeError),
    ],
    ids=str,
)
def test_a_refused_upgrade_is_a_typed_error(fake: Fake, status: int, error: type[Exception]) -> None:
    with pytest.raises(error, match=f"refused http-{status}"):
        sandbox_on(fake[1], f"http-{status}").execute("true")
