"""``KubernetesSandbox``: a :class:`~sandbox_sdk.BaseSandbox` on one pod, through pod exec."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import TIMEOUT_EXIT_CODE, ExecuteResponse
from sandbox_sdk.provider_kit import LARGE_COMMAND_BYTES, KeepAlive, command_seconds
from sandbox_sdk.provider_kit.exec_runner import reported_status, runner_call
from sandbox_sdk.providers.kubernetes import _exec

logger = logging.getLogger(__name__)

#: Default timeout of one ``execute`` in seconds.
DEFAULT_TIMEOUT = 120.0
#: Default output cap of one ``execute``: twice a command, so whatever one command wrote,
#: one ``read`` returns.
DEFAULT_MAX_OUTPUT_BYTES = 2 * LARGE_COMMAND_BYTES
#: Seconds past a command's timeout after which the client stops waiting for the
#: in-pod timer (a frozen pod, a pids limit that left no room for the timer) and reports
#: the command timed out.
BACKSTOP_SECONDS = 15.0
#: The longest command sent as an argument of the exec: arguments travel in the exec
#: URL's query (percent-encoded, up to three times as long), which the API server and the
#: kubelet read as part of the request's header (1 MiB at most). A longer one goes over
#: stdin.
ARGV_COMMAND_BYTES = 32 * 1024
#: The container of a sandbox's pod that commands run in.
CONTAINER = "sandbox"


class KubernetesSandbox(BaseSandbox):
    """One pod; each ``execute`` is one exec (``bash -c`` of the shared runner) in its
    ``sandbox`` container, as the pod's user, in ``/workspace``."""

    #: A command up to :data:`ARGV_COMMAND_BYTES` is an argument of the exec; a longer one,
    #: up to 4 MiB, goes over the exec's stdin in 1 MiB messages.
    limits = Limits(max_command_bytes=LARGE_COMMAND_BYTES)

    def __init__(
        self,
        configuration: Any,
        namespace: str,
        pod: str,
        *,
        sandbox_id: str,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        mark_used: Callable[[], None] | None = None,
        keep_alive_seconds: float = 30.0,
        protocols: tuple[str, ...] = _exec.PROTOCOLS,
    ) -> None:
        self.configuration = configuration
        self.namespace = namespace
        self.pod = pod
        self._id = sandbox_id
        self.timeout = timeout
        self.limits = replace(self.limits, max_output_bytes=max_output_bytes)
        self.protocols = protocols
        self._mark_used = mark_used
        self._keep_alive = KeepAlive(keep_alive_seconds)
        #: The channel protocol the server chose for the last exec.
        self.protocol = ""

    @property
    def id(self) -> str:
        return self._id

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        seconds = command_seconds(timeout, self.timeout)
        started = time.monotonic()
        call = runner_call(command, seconds, argv_bytes=ARGV_COMMAND_BYTES)
        if self._mark_used is not None and self._keep_alive.due():
            self._mark_used()
        url = _exec.exec_url(
            self.configuration.host, self.namespace, self.pod, CONTAINER, call.argv, call.stdin is not None
        )
        sock = _exec.connect(self.configuration, url, self.protocols)
        result = _exec.run(
            sock, call.stdin, started + seconds + BACKSTOP_SECONDS, self.limits.max_output_bytes
        )
        self.protocol = result.protocol
        text = result.stdout.decode("utf-8", "replace")
        exit_code = self._exit_code(result, call.nonce)
        elapsed = time.monotonic() - started
        if exit_code is None or (exit_code == TIMEOUT_EXIT_CODE and elapsed >= seconds):
            return ExecuteResponse(
                output=text, exit_code=TIMEOUT_EXIT_CODE, truncated=result.truncated, timed_out=True
            )
        return ExecuteResponse(output=text, exit_code=exit_code, truncated=result.truncated)

    def _exit_code(self, result: _exec.ExecResult, nonce: str) -> int | None:
        """The command's exit status: the error channel's, cross-checked with the runner's
        report; ``None`` if the deadline passed first. Either alone is enough (the status
        channel can be empty or lost: kubernetes-client/python #2156, #2328, #1840); when
        they differ the runner's report wins (it is the command's own status; the runner
        exits with it unless killed after reporting). A stream that broke before either
        came, or a failure that is not an exit status, is an error."""
        reported = reported_status(result.stderr, nonce)
        channel = None if result.status is None else _exec.status_exit_code(result.status)
        if reported is not None:
            if channel is not None and channel != reported:
                logger.warning(
                    "pod %s: the exec status channel says %s, the runner reported %s: using the report",
                    self.pod,
                    channel,
                    reported,
                )
            return reported
        if channel is not None:
            return channel
        if result.status is not None:
            message = str(result.status.get("message") or result.status)
            if "not found" in message or "not running" in message:
                raise errors.SandboxNotFoundError(f"pod {self.pod}: {message}")
            raise errors.SandboxRuntimeError(f"pod {self.pod}: exec failed: {message}")
        if result.broken is not None or result.ended:
            raise errors.SandboxRuntimeError(
                f"pod {self.pod}: the exec stream ended before the command's exit status came"
                f" ({result.broken or 'closed by the server'}); the command may have run"
            )
        return None

    def __repr__(self) -> str:
        return f"KubernetesSandbox(pod={self.pod!r}, namespace={self.namespace!r})"
