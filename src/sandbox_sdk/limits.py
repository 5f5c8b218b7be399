"""A sandbox's :class:`Limits`, and the budget arithmetic written once.

A provider declares how large one ``execute`` command and its output may be
(its transport's caps), and a user may tune the rest: timeouts, the transfer
window, the polling of processes. Every operation sizes its commands and
replies by the methods here, never by arithmetic of its own, so "does it fit
one command?" has one answer for writes, edits, staged uploads, ``run``'s
stdin and program, and whether a stream may take a provider's native path.

A command's *overhead* (its bytes before any blob) is measured by building
it (:func:`sandbox_sdk.protocol.command_overhead`), so the methods that need
it take the operation, its arguments and the scratch directory the command
names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from sandbox_sdk import errors, protocol

#: Output bytes kept free for noise around a result frame (banners, warnings).
OUTPUT_HEADROOM = 8 * 1024
#: Bytes of the output's base64 budget kept for the frame's marker, nonce and value.
FRAME_SLACK = 1024
#: The smallest result budget file operations work with (pages, listings, chunks).
MIN_RESULT_BUDGET = 4096
#: The fewest bytes a command must leave for data, or it cannot carry any.
MIN_DATA_ROOM = 1024
#: Bytes of a command left for stdin (and slack) before a program is staged.
PROGRAM_ROOM = 4096
#: Raw chunk bytes a transfer keeps in flight at most beyond its first two
#: chunks (each costs a few copies on the client: base64 text, command or
#: output string), so client memory stays bounded by the limits, whatever
#: ``transfer_concurrency`` is and however large the file.
IN_FLIGHT_BYTES = 6 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """How much one round trip may carry and how long it may take.

    A provider declares its transport's caps as a class attribute,
    ``limits = Limits(max_command_bytes=...)``, or sets ``self.limits`` in
    ``__init__`` when they depend on its arguments (``dataclasses.replace``
    changes one field). Values are checked when made: a wrong type or a
    value out of range raises :class:`~sandbox_sdk.errors.InvalidArgumentError`;
    caps too small for file operations are refused by the operation that
    needs more (``execute`` alone works with any)."""

    #: Largest command ``execute`` accepts. 96 KiB keeps under Linux's 128 KiB
    #: cap on one ``bash -c`` argument; providers with other caps declare theirs.
    max_command_bytes: int = 96 * 1024
    #: Largest output ``execute`` returns before truncating.
    max_output_bytes: int = 1024 * 1024
    #: Timeout in seconds for each round trip of a file operation.
    operation_timeout: float = 120.0
    #: Round trips a chunked transfer keeps in flight at once (sync and async).
    #: Eight hide a cloud round trip behind the next seven (the throughput
    #: under a small command cap: docs/benchmarks.md); bounded in bytes by
    #: ``IN_FLIGHT_BYTES`` whatever its value. A provider whose ``execute``
    #: is not thread-safe declares 1.
    transfer_concurrency: int = 8
    #: Longest a poll of a background process waits in the sandbox for output
    #: or the exit (docs/processes.md): a quiet process costs one round trip
    #: per this many seconds.
    process_poll_wait: float = 2.0
    #: How long a poll that found output lingers to gather more: it starts at
    #: the minimum and doubles while output keeps coming, up to the maximum.
    process_linger_min: float = 0.02
    process_linger_max: float = 0.5

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if type(field.default) is int:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise errors.InvalidArgumentError(f"{field.name} must be an int >= 1, not {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise errors.InvalidArgumentError(f"{field.name} must be seconds > 0, not {value!r}")
        if self.process_linger_max < self.process_linger_min:
            raise errors.InvalidArgumentError(
                f"process_linger_max={self.process_linger_max} is below "
                f"process_linger_min={self.process_linger_min}"
            )

    @property
    def result_budget(self) -> int:
        """Raw bytes a script may put in its result frame: what one output
        carries in base64, less the headroom and the frame's own bytes."""
        budget = base64_capacity(self.max_output_bytes - OUTPUT_HEADROOM) - FRAME_SLACK
        if budget < MIN_RESULT_BUDGET:
            raise errors.SandboxRuntimeError(
                f"max_output_bytes={self.max_output_bytes} is too small for file operations (need 16 KiB)"
            )
        return budget

    def room(self, op: str, args: Mapping[str, Any], scratch_dir: str) -> int:
        """Bytes one command running ``op`` with ``args`` has left for its blobs."""
        return self.max_command_bytes - protocol.command_overhead(op, args, scratch_dir)

    def blob_capacity(self, op: str, args: Mapping[str, Any], scratch_dir: str) -> int:
        """Raw bytes one blob may hold in a command running ``op`` with ``args``."""
        room = self.room(op, args, scratch_dir)
        if room < MIN_DATA_ROOM:
            raise errors.SandboxRuntimeError(
                f"max_command_bytes={self.max_command_bytes} leaves no room for data (the "
                f"{protocol.module_of(op)} script alone needs {self.max_command_bytes - room} bytes)"
            )
        return base64_capacity(room)

    def fits(self, size: int, op: str, args: Mapping[str, Any], scratch_dir: str) -> bool:
        """Whether a blob of ``size`` bytes goes in one command with ``op`` and
        ``args``; otherwise it is staged first."""
        return size <= self.blob_capacity(op, args, scratch_dir)

    def fits_program(self, op: str, args: Mapping[str, Any], scratch_dir: str) -> bool:
        """Whether a command running ``op`` with ``args`` (a program among
        them) leaves ``PROGRAM_ROOM``: the one rule for "a program too large
        for one command", which is staged and never streamed natively."""
        return self.room(op, args, scratch_dir) >= PROGRAM_ROOM

    def window(self, chunk_bytes: int) -> int:
        """Chunks of ``chunk_bytes`` to keep in flight: ``transfer_concurrency``,
        fewer if that many would hold more than ``IN_FLIGHT_BYTES``, but two in
        any case (the sandbox works on one while the client takes in the
        other), or one if ``transfer_concurrency`` is 1."""
        return min(self.transfer_concurrency, max(2, IN_FLIGHT_BYTES // max(chunk_bytes, 1)))


def base64_capacity(budget: int) -> int:
    """The largest raw blob whose base64 form fits in ``budget`` bytes."""
    return max(0, budget // 4 * 3)


__all__ = ["IN_FLIGHT_BYTES", "OUTPUT_HEADROOM", "PROGRAM_ROOM", "Limits", "base64_capacity"]
