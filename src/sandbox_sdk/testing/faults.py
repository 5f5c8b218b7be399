"""Test providers that make a sandbox's transport hostile on purpose.

``LimitedSandbox`` wraps any :class:`~sandbox_sdk.BaseSandbox` and enforces a
command-size limit and an output cap for real, as remote providers do: a
command over ``max_command_bytes`` fails the way ``exec`` does ("Argument
list too long"), and output past ``max_output_bytes`` is cut and flagged.
``FaultySandbox`` adds one injected failure on the N-th ``execute()``.

Both count their round trips (``executed``) and the most that ran at once
(``max_in_flight``), so tests can check how an operation used the transport.
"""

from __future__ import annotations

import enum
import errno
import threading
from dataclasses import replace

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse


class LimitedSandbox(BaseSandbox):
    """``inner`` with a hard command-size limit and a hard output cap. It
    keeps its scratch files, scripts and operation channel where ``inner``
    does (a host's ``/tmp`` is no place for a test's scratch files)."""

    def __init__(self, inner: BaseSandbox, *, max_command_bytes: int, max_output_bytes: int) -> None:
        self.inner = inner
        self.scratch_dir = inner.scratch_dir
        self.installed_scripts = inner.installed_scripts
        self.operation_channel = inner.operation_channel
        self.limits = replace(
            inner.limits, max_command_bytes=max_command_bytes, max_output_bytes=max_output_bytes
        )
        self.executed = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return f"limited-{self.inner.id}"

    def _count(self) -> int:
        """Number this call (1-based); safe when async transfers run calls in threads."""
        with self._lock:
            self.executed += 1
            return self.executed

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        self._count()
        return self._run(command, timeout)

    def _run(self, command: str, timeout: float | None) -> ExecuteResponse:
        size = len(command.encode("utf-8"))
        if size > self.limits.max_command_bytes:
            raise OSError(
                errno.E2BIG,
                f"Argument list too long: {size} bytes > max_command_bytes={self.limits.max_command_bytes}",
            )
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return self.cap(self.inner.execute(command, timeout=timeout))
        finally:
            with self._lock:
                self.in_flight -= 1

    def cap(self, response: ExecuteResponse) -> ExecuteResponse:
        """Cut the output at ``max_output_bytes`` (on a UTF-8 boundary) and flag it."""
        raw = response.output.encode("utf-8", "surrogateescape")
        if len(raw) <= self.limits.max_output_bytes:
            return response
        kept = raw[: self.limits.max_output_bytes].decode("utf-8", "ignore")
        return response.model_copy(update={"output": kept, "truncated": True})


class Fault(enum.Enum):
    """How the chosen ``execute()`` goes wrong."""

    #: The provider raises before the command runs (a dropped connection).
    RAISE = "raise"
    #: The provider gives up at its timeout before the command had any effect.
    TIMEOUT = "timeout"
    #: The command never runs; the reply is noise with exit code 0.
    GARBAGE = "garbage"
    #: The command runs to completion, then the reply is lost (the provider raises).
    LOST_REPLY = "lost_reply"
    #: The command runs; one base64 character of its reply is changed (a corrupted
    #: transport): a blob still decodes, to different bytes.
    CORRUPT = "corrupt"


#: Faults after which the command had no effect inside the sandbox.
FAULTS_BEFORE_RUNNING = (Fault.RAISE, Fault.TIMEOUT, Fault.GARBAGE)


class InjectedFault(ConnectionError):
    """What a ``FaultySandbox`` raises for ``Fault.RAISE`` and ``Fault.LOST_REPLY``."""


class FaultySandbox(LimitedSandbox):
    """A ``LimitedSandbox`` whose ``fail_at``-th ``execute()`` (1-based) suffers ``fault``.

    ``fail_at=None`` injects nothing, which lets a test count the round trips
    of a clean run first and then fail each of them in turn."""

    def __init__(
        self,
        inner: BaseSandbox,
        *,
        fault: Fault,
        fail_at: int | None,
        max_command_bytes: int,
        max_output_bytes: int,
    ) -> None:
        super().__init__(inner, max_command_bytes=max_command_bytes, max_output_bytes=max_output_bytes)
        self.fault = fault
        self.fail_at = fail_at
        self.injected = False

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        if self._count() != self.fail_at:
            return self._run(command, timeout)
        self.injected = True
        if self.fault is Fault.RAISE:
            raise InjectedFault(f"injected fault: connection dropped on call {self.fail_at}")
        if self.fault is Fault.TIMEOUT:
            return ExecuteResponse(output="", exit_code=None, timed_out=True)
        if self.fault is Fault.GARBAGE:
            return ExecuteResponse(output="\x00garbage \ufffd@@SANDBOX_SDK nonsense\n", exit_code=0)
        response = self._run(command, timeout)
        if self.fault is Fault.LOST_REPLY:
            raise InjectedFault(f"injected fault: reply to call {self.fail_at} lost after it ran")
        return response.model_copy(update={"output": corrupt(response.output)})


def corrupt(output: str) -> str:
    """``output`` with the first character of its last space-separated field
    flipped between ``A`` and ``B`` (both valid base64, different bytes)."""
    line_start = output.rfind("@@SANDBOX_SDK")
    if line_start < 0:
        return output + "\ncorrupted"
    at = output.rfind(" ", line_start) + 1
    flipped = "B" if output[at] != "B" else "A"
    return output[:at] + flipped + output[at + 1 :]
