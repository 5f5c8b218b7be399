"""Translate the ``docker`` package's exceptions into :mod:`sandbox_sdk.errors`.

The Docker Engine API reports most failures as an ``APIError`` carrying the
HTTP status: 404 (no such container or image), 409 (a name in use, a
container not running). An engine that does not answer is a ``requests``
connection error (or the ``DockerException`` docker-py raises when it cannot
even make a client), an ``OSError`` underneath.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import docker.errors
import requests.exceptions

from sandbox_sdk import errors


class NameTakenError(errors.SandboxRuntimeError):
    """Creating a container under a name another container holds (HTTP 409 on create;
    podman answers 500 when the clash shows only in its storage layer)."""


def typed_error(exc: BaseException, what: str) -> errors.SandboxError:
    """The typed error for an exception the client raised while doing ``what``."""
    if isinstance(exc, errors.SandboxError):
        return exc
    message = f"{what}: {exc}"
    if isinstance(exc, docker.errors.ImageNotFound):
        return errors.InvalidArgumentError(
            f"{what}: no such image in the engine (build or load it first; this provider never pulls): {exc}"
        )
    if isinstance(exc, docker.errors.NotFound):
        return errors.SandboxNotFoundError(message)
    if isinstance(exc, docker.errors.APIError):
        if "is already in use" in str(exc):  # 409; podman says 500 when its storage layer notices
            return NameTakenError(message)
        if exc.status_code == 409:
            return errors.SandboxNotFoundError(f"{what}: the container is not running: {exc}")
        if exc.status_code in (401, 403):
            return errors.AuthenticationError(message)
        if exc.status_code == 400:
            return errors.InvalidArgumentError(message)
        return errors.SandboxRuntimeError(message)
    if isinstance(exc, requests.exceptions.Timeout | TimeoutError):
        return errors.SandboxTimeoutError(message)
    if isinstance(exc, requests.exceptions.ConnectionError | OSError | docker.errors.DockerException):
        return errors.ProviderUnavailableError(f"{what}: cannot reach the container engine: {exc}")
    return errors.SandboxRuntimeError(f"{what}: {type(exc).__name__}: {exc}")


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Raise what the client raises inside the block as its typed error, ``from`` the original."""
    try:
        yield
    except errors.SandboxError:
        raise
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise typed_error(exc, what) from exc
