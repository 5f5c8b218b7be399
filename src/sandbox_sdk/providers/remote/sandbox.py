"""The remote sandbox; see the package docstring."""

from __future__ import annotations

from dataclasses import replace

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.provider_kit import check_timeout
from sandbox_sdk.providers.remote._link import Link, Reply, Request

#: Seconds past a command's own timeout the client waits for the runner's
#: answer (starting the command, a jail, the network) before giving up.
REPLY_GRACE_SECONDS = 30.0


class RemoteSandbox(BaseSandbox):
    """A sandbox of a runner: each ``execute`` is one request over the
    provider's WebSocket, so every derived operation works unchanged. Its
    limits are the runner's, learnt when the connection opened."""

    def __init__(self, link: Link, sandbox_id: str) -> None:
        self._link = link
        self._id = sandbox_id
        announced = link.limits
        self.limits = replace(
            self.limits,
            max_command_bytes=announced.max_command_bytes,
            max_output_bytes=announced.max_output_bytes,
        )
        self.default_timeout = announced.default_timeout

    @property
    def id(self) -> str:
        return self._id

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return _response(self._link.call(self._request(command, timeout)))

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return _response(await self._link.acall(self._request(command, timeout)))

    def _request(self, command: str, timeout: float | None) -> Request:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        body = command.encode("utf-8", "surrogateescape")
        if len(body) > self.limits.max_command_bytes:
            raise errors.InvalidArgumentError(
                f"a command of {len(body)} bytes is over the runner's "
                f"max_command_bytes={self.limits.max_command_bytes}"
            )
        given = check_timeout(timeout)
        seconds = self.default_timeout if given is None else given
        args = {"sandbox": self._id, "timeout": given}
        return Request("execute", args, body, timeout=seconds + REPLY_GRACE_SECONDS)

    def __repr__(self) -> str:
        return f"RemoteSandbox(id={self._id!r})"


def _response(reply: Reply) -> ExecuteResponse:
    return ExecuteResponse.model_validate({**reply.result, "output": reply.body.decode("utf-8", "replace")})
