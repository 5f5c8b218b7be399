"""One pod exec over the ``exec`` subresource's WebSocket channel protocol.

Written on ``websocket-client`` (the official client's own transport) rather than
``kubernetes.stream.stream``: that call swaps the shared ``ApiClient``'s request method
for the duration of the call (not thread-safe), decodes each frame as text on arrival
(a multibyte character split across two frames becomes two replacement characters), and
returns partial output when its timeout passes. Here each call opens its own connection
from the provider's read-only ``Configuration``, keeps bytes, and says whether the stream
ended.

The protocol (k8s.io/apimachinery ``pkg/util/remotecommand/constants.go`` and
``pkg/util/httpstream/wsstream/conn.go``; KEP-4006 for v5): every binary message is one
channel byte and its data. Channels: 0 stdin, 1 stdout, 2 stderr, 3 the error channel
(one ``metav1.Status`` as JSON when the process has ended: ``Success``, or ``Failure``
with reason ``NonZeroExitCode`` and the status in ``details.causes[reason=ExitCode]``),
4 terminal resize. ``v5.channel.k8s.io`` adds channel 255: the message ``[255, N]``
closes channel N, so a client can end the process's stdin; ``v4.channel.k8s.io`` has no
way to end stdin but closing the connection. The client offers v5 then v4; the server
picks one (Kubernetes 1.29 and later v5; 1.20, which the tests run, v4).
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import websocket

from sandbox_sdk import errors

V5_PROTOCOL = "v5.channel.k8s.io"
V4_PROTOCOL = "v4.channel.k8s.io"
#: The protocols offered, most preferred first.
PROTOCOLS = (V5_PROTOCOL, V4_PROTOCOL)
STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3
#: v5's channel-close message type.
CLOSE = 255
#: Stdin goes out in messages of at most this size: servers cap one message (the
#: ``golang.org/x/net/websocket`` reader behind the 1.20 kubelet's stream server drops a
#: frame over 32 MiB), so a large input is never one huge message.
STDIN_MESSAGE_BYTES = 1 << 20
#: The most of stderr and of the error channel kept (the runner's report, one Status).
SIDE_CHANNEL_BYTES = 64 * 1024
#: Seconds allowed to open the connection (TCP, TLS and the upgrade).
CONNECT_SECONDS = 30.0


@dataclass
class ExecResult:
    """What one exec returned: stdout (cut at the cap), stderr, the error channel's
    Status (``None`` if none came), whether stdout was cut, whether the stream ended (a
    close frame) rather than the deadline passing or the connection breaking, and the
    protocol the server chose."""

    stdout: bytes = b""
    stderr: bytes = b""
    status: dict[str, Any] | None = None
    truncated: bool = False
    ended: bool = False
    broken: str | None = None
    protocol: str = ""
    _error: bytearray = field(default_factory=bytearray, repr=False)


def exec_url(host: str, namespace: str, pod: str, container: str, argv: list[str], stdin: bool) -> str:
    """The exec subresource's WebSocket URL (``wss://`` for ``https://``)."""
    query = [("container", container), ("stdout", "true"), ("stderr", "true"), ("stdin", str(stdin).lower())]
    query += [("command", arg) for arg in argv]
    scheme, sep, rest = host.partition("://")
    scheme = {"https": "wss", "http": "ws"}.get(scheme, scheme)
    return f"{scheme}{sep}{rest.rstrip('/')}/api/v1/namespaces/{namespace}/pods/{pod}/exec?{urlencode(query)}"


def _ssl_options(configuration: Any) -> dict[str, Any]:
    """TLS as the configuration says: its CA (or none if verification is off), its client
    certificate, its server name."""
    if not configuration.verify_ssl:
        options: dict[str, Any] = {"cert_reqs": ssl.CERT_NONE}
    else:
        options = {"cert_reqs": ssl.CERT_REQUIRED}
        if configuration.ssl_ca_cert:
            options["ca_certs"] = configuration.ssl_ca_cert
        if configuration.assert_hostname is not None:
            options["check_hostname"] = configuration.assert_hostname
    if configuration.cert_file:
        options["certfile"] = configuration.cert_file
    if configuration.key_file:
        options["keyfile"] = configuration.key_file
    if configuration.tls_server_name:
        options["server_hostname"] = configuration.tls_server_name
    return options


def connect(configuration: Any, url: str, protocols: tuple[str, ...] = PROTOCOLS) -> websocket.WebSocket:
    """Open the exec's connection, offering ``protocols``; the server's refusal is a typed
    error (404: no such pod; 400: the container is not running)."""
    # The configuration's own header credentials (a bearer token, refreshed by its hook),
    # as the REST client sends them.
    header = [
        f"{setting['key']}: {setting['value']}"
        for setting in configuration.auth_settings().values()
        if setting.get("in") == "header" and setting.get("value")
    ]
    sock = websocket.WebSocket(sslopt=_ssl_options(configuration), skip_utf8_validation=True)
    try:
        sock.connect(url, header=header, subprotocols=list(protocols), timeout=CONNECT_SECONDS)
    except websocket.WebSocketBadStatusException as exc:
        body = (exc.resp_body or b"").decode("utf-8", "replace") if isinstance(exc.resp_body, bytes) else ""
        raise _refused(exc.status_code, _message(body) or str(exc)) from exc
    except websocket.WebSocketTimeoutException as exc:
        raise errors.ProviderUnavailableError(f"pod exec: no answer from the API server: {exc}") from exc
    except (websocket.WebSocketException, OSError) as exc:
        raise errors.ProviderUnavailableError(f"pod exec: cannot reach the API server: {exc}") from exc
    return sock


def _message(body: str) -> str:
    try:
        return str(json.loads(body).get("message") or body)
    except (ValueError, AttributeError):
        return body


def _refused(status: int, message: str) -> errors.SandboxError:
    if status == 404:
        return errors.SandboxNotFoundError(f"pod exec: no such pod: {message}")
    if status == 400:
        return errors.SandboxNotFoundError(f"pod exec: the pod's container is not running: {message}")
    if status in (401, 403):
        return errors.AuthenticationError(f"pod exec refused ({status}): {message}")
    return errors.SandboxRuntimeError(f"pod exec failed ({status}): {message}")


def run(sock: websocket.WebSocket, stdin: bytes | None, deadline: float, max_output_bytes: int) -> ExecResult:
    """Send ``stdin`` (closing the channel on v5), then read every channel until the
    server closes the stream or ``deadline`` (a ``time.monotonic()`` value) passes. Stdout
    past ``max_output_bytes`` is read and dropped, so the process never blocks on it."""
    headers = sock.getheaders() or {}
    result = ExecResult(protocol=sock.getsubprotocol() or headers.get("sec-websocket-protocol") or "")
    out = bytearray()
    err = bytearray()
    try:
        if stdin is not None:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            for start in range(0, len(stdin), STDIN_MESSAGE_BYTES):
                sock.send_binary(bytes([STDIN]) + stdin[start : start + STDIN_MESSAGE_BYTES])
            if result.protocol == V5_PROTOCOL:
                sock.send_binary(bytes([CLOSE, STDIN]))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            opcode, frame = sock.recv_data_frame(True)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                result.ended = True
                break
            if opcode not in (websocket.ABNF.OPCODE_BINARY, websocket.ABNF.OPCODE_TEXT) or not frame.data:
                continue
            data = bytes(frame.data)
            channel, payload = data[0], data[1:]
            if channel == STDOUT:
                room = max_output_bytes - len(out)
                if len(payload) > room:
                    result.truncated = True
                out += payload[: max(room, 0)]
            elif channel == STDERR:
                err += payload[: max(SIDE_CHANNEL_BYTES - len(err), 0)]
            elif channel == ERROR:
                result._error += payload[: max(SIDE_CHANNEL_BYTES - len(result._error), 0)]
    except websocket.WebSocketTimeoutException:
        pass
    except (websocket.WebSocketException, OSError) as exc:
        result.broken = f"{type(exc).__name__}: {exc}"
    finally:
        # No closing handshake of ours: after the server's close frame the client has
        # answered it already (recv_data_frame does), and at a deadline or a broken stream
        # there is nothing to wait for.
        sock.shutdown()
    result.stdout, result.stderr = bytes(out), bytes(err)
    if result._error:
        try:
            result.status = json.loads(bytes(result._error))
        except ValueError:
            result.status = {"status": "Failure", "message": bytes(result._error).decode("utf-8", "replace")}
    return result


def status_exit_code(status: dict[str, Any]) -> int | None:
    """The exit status a Status of the error channel carries: 0 for ``Success``, the
    cause's number for ``NonZeroExitCode``; ``None`` for any other failure (the process
    could not start, the container went away: its ``message`` says which)."""
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
                return int(cause["message"])
    return None
