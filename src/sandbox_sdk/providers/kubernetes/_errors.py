"""Translate the ``kubernetes`` client's exceptions into :mod:`sandbox_sdk.errors`.

The API server reports failures as an ``ApiException`` carrying the HTTP status: 404
(no such pod), 409 (a name in use), 400 and 422 (a request it refuses), 401/403, 410 (a
list's continue token expired), 5xx. A server that does not answer is a ``urllib3``
error (an ``OSError`` underneath for a refused connection).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from sandbox_sdk import errors


class NameTakenError(errors.SandboxRuntimeError):
    """Creating a pod under a name another pod holds (HTTP 409 AlreadyExists)."""


def _reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def typed_error(exc: BaseException, what: str) -> errors.SandboxError:
    """The typed error for an exception the client raised while doing ``what``."""
    if isinstance(exc, errors.SandboxError):
        return exc
    if isinstance(exc, ApiException):
        message = f"{what}: {_reason(exc)} (HTTP {exc.status})"
        if exc.status == 404:
            return errors.SandboxNotFoundError(message)
        if exc.status == 409:
            return NameTakenError(message)
        if exc.status in (401, 403):
            return errors.AuthenticationError(message)
        if exc.status in (400, 410, 422):
            return errors.InvalidArgumentError(message)
        if exc.status == 0:  # the client's own wrapper of a connection failure
            return errors.ProviderUnavailableError(f"{what}: cannot reach the API server: {exc.reason}")
        return errors.SandboxRuntimeError(message)
    if isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError):
        return errors.SandboxTimeoutError(f"{what}: the API server did not answer in time: {exc}")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return errors.ProviderUnavailableError(f"{what}: cannot reach the API server: {exc}")
    if isinstance(exc, ConfigException):
        return errors.ProviderUnavailableError(f"{what}: no usable cluster configuration: {exc}")
    return errors.SandboxRuntimeError(f"{what}: {type(exc).__name__}: {exc}")


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Raise what the client raises inside the block as its typed error, ``from`` the original."""
    try:
        yield
    except errors.SandboxError:
        raise
    except (ApiException, urllib3.exceptions.HTTPError, OSError, ConfigException) as exc:
        raise typed_error(exc, what) from exc
