"""What each request does on the backend provider (blocking; run in a
worker process, see :mod:`~sandbox_sdk.runner.workers`).

The backend's state directory is the runner's workspace root: every request
names a sandbox by id, which the backend checks against its own id pattern
before touching a path, and none carries a host path, so a request reaches
nothing outside the root. Bubblewrap jails each command in its sandbox's
directory; with the unisolated local backend a command can leave it, so
there the root is advisory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox_sdk import errors
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.provider_kit.host_state import HostStateProvider

#: ``create`` options a client may pass; the rest (``network``, ``limits``)
#: are the runner owner's to set.
CLIENT_OPTIONS = frozenset({"ttl", "idle_timeout", "setup"})


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _ExecuteArgs(_Args):
    sandbox: str
    timeout: float | None = Field(default=None, ge=0)


class _SandboxArgs(_Args):
    sandbox: str


class _CreateArgs(_Args):
    labels: dict[str, str] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)


class _NoArgs(_Args):
    pass


class _ListArgs(_Args):
    labels: dict[str, str] | None = None
    cursor: str | None = None
    limit: int = 100


class Operations:
    """The requests a runner serves, on ``backend``; a command whose request
    names no timeout gets ``default_timeout``."""

    def __init__(self, backend: SandboxProvider[Any], default_timeout: float) -> None:
        self.backend = backend
        self.default_timeout = default_timeout

    def perform(self, op: str, args: Mapping[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        """A request's result and response body."""
        try:
            if op == "execute":
                return self._execute(_ExecuteArgs.model_validate(args), body)
            if op == "create":
                return self._create(_CreateArgs.model_validate(args)), b""
            if op == "get":
                return {"id": self.backend.get(_SandboxArgs.model_validate(args).sandbox).id}, b""
            if op == "list":
                query = _ListArgs.model_validate(args)
                page = self.backend.list(labels=query.labels, cursor=query.cursor, limit=query.limit)
                return page.model_dump(mode="json"), b""
            if op == "delete":
                self.backend.delete(sandbox_id=_SandboxArgs.model_validate(args).sandbox)
                return {}, b""
            if op == "reap":
                _NoArgs.model_validate(args)
                return {"reaped": self._reap()}, b""
        except ValidationError as exc:
            raise errors.InvalidArgumentError(f"{op}: invalid arguments: {exc}") from None
        raise errors.InvalidArgumentError(f"unknown operation {op!r}")

    def _execute(self, args: _ExecuteArgs, command: bytes) -> tuple[dict[str, Any], bytes]:
        sandbox = self.backend.get(args.sandbox)
        timeout = self.default_timeout if args.timeout is None else args.timeout
        response = sandbox.execute(command.decode("utf-8", "surrogateescape"), timeout=timeout)
        result = response.model_dump(exclude={"output"})
        return result, response.output.encode("utf-8")

    def _reap(self) -> list[str]:
        """Delete the backend's expired sandboxes (its ``reap``); their ids. The
        runner's backends keep sandboxes on its machine, which nothing else expires."""
        if not isinstance(self.backend, HostStateProvider):
            raise errors.InvalidArgumentError(
                f"this runner's backend ({self.backend.name}) has nothing to reap"
            )
        return self.backend.reap()

    def _create(self, args: _CreateArgs) -> dict[str, Any]:
        refused = sorted(set(args.options) - CLIENT_OPTIONS)
        if refused:
            raise errors.InvalidArgumentError(
                f"option(s) {', '.join(refused)} are the runner owner's to set, not a client's"
            )
        return {"id": self.backend._create(labels=args.labels, **args.options).id}
