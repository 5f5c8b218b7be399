"""What goes wrong between the client and a runner, as :mod:`sandbox_sdk.errors`.

- A response's error names its class; classes of :mod:`sandbox_sdk.errors`
  come back as themselves, anything else as ``SandboxRuntimeError``.
- A closed connection says why in its close code: a refused token is an
  ``AuthenticationError``; everything else (runner gone, frame too large,
  coordinator without that runner) a ``ProviderUnavailableError``.
- A runner that breaks the protocol (a body over this client's bounds, a
  frame it cannot parse) is a ``ProviderUnavailableError``; the client
  closes the connection (1002).
- A connection that cannot be made (refused, TLS, timeout) is a
  ``ProviderUnavailableError``; a 401/403 at the handshake an ``AuthenticationError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.frames import Close

from sandbox_sdk import errors, wire
from sandbox_sdk.wire import CloseCode

_CLOSE_MEANINGS: dict[int, str] = {
    CloseCode.UNAUTHORIZED: "the runner refused the token",
    CloseCode.MESSAGE_TOO_BIG: f"a frame was larger than {wire.MAX_FRAME_BYTES} bytes",
    CloseCode.RUNNER_OFFLINE: "the runner is not connected to the coordinator",
    CloseCode.TRY_AGAIN_LATER: "the runner did not answer the coordinator",
    CloseCode.PROTOCOL_ERROR: "protocol error",
}


def from_response(error: Mapping[str, Any], what: str) -> errors.SandboxError:
    """The typed error a runner's response carries."""
    kind = getattr(errors, str(error.get("type")), None)
    if not (isinstance(kind, type) and issubclass(kind, errors.SandboxError)):
        kind = errors.SandboxRuntimeError
    path = error.get("path")
    return kind(f"{what}: {error.get('message')}", path=path if isinstance(path, str) else None)


def closed(close: Close | None, what: str) -> errors.SandboxError:
    """The typed error for a connection closed with ``close`` (``None``: no close frame)."""
    if close is None:
        return errors.ProviderUnavailableError(f"{what}: the connection to the runner was lost")
    meaning = _CLOSE_MEANINGS.get(close.code, "the connection to the runner was closed")
    detail = f"{meaning} (code {close.code}{': ' + close.reason if close.reason else ''})"
    if close.code == CloseCode.UNAUTHORIZED:
        return errors.AuthenticationError(f"{what}: {detail}")
    return errors.ProviderUnavailableError(f"{what}: {detail}")


def broken(problem: wire.ProtocolError, what: str) -> errors.ProviderUnavailableError:
    """The typed error for a runner that broke the protocol (this side then closed the connection)."""
    return errors.ProviderUnavailableError(f"{what}: the runner broke the protocol ({problem}); disconnected")


def typed_error(exc: BaseException, what: str) -> errors.SandboxError:
    """The typed error for an exception the transport raised while doing ``what``."""
    if isinstance(exc, errors.SandboxError):
        return exc
    if isinstance(exc, ConnectionClosed):
        return closed(exc.rcvd, what)
    if isinstance(exc, InvalidStatus) and exc.response.status_code in (401, 403):
        return errors.AuthenticationError(f"{what}: {exc}")
    if isinstance(exc, OSError | TimeoutError | WebSocketException | wire.ProtocolError):
        return errors.ProviderUnavailableError(f"{what}: {type(exc).__name__}: {exc}")
    return errors.SandboxRuntimeError(f"{what}: {type(exc).__name__}: {exc}")


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Raise what the transport raises inside the block as its typed error, ``from`` the original."""
    try:
        yield
    except (OSError, TimeoutError, WebSocketException, wire.ProtocolError) as exc:
        raise typed_error(exc, what) from exc
