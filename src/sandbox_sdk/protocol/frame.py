"""The result of a script: the framed line it prints, the exit codes of
:class:`ExitCode` (the one table, ``remote/_runtime.EXIT`` as an enum), and
the one place that maps a code to its typed exception (:func:`error_from`).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal, overload

from sandbox_sdk import errors
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.remote import _runtime

#: Starts the result line; the runtime prints it, so it is the runtime's.
FRAME_MARKER = _runtime.FRAME_MARKER

#: Printed (with the nonce) by the command itself when ``python3`` is missing.
NO_PYTHON_MARKER = f"{FRAME_MARKER}_NO_PYTHON3"

#: A blob of a result frame: ``bytes``, or a ``bytearray`` when decoded piece by piece.
Blob = bytes | bytearray


class ExitCode(IntEnum):
    """Exit codes of the in-sandbox scripts: ``remote/_runtime.EXIT`` as an
    enum (tests/test_protocol.py keeps the two equal)."""

    OK = 0
    INVALID_ARGUMENT = 80
    NOT_FOUND = 81
    IS_DIRECTORY = 82
    NOT_DIRECTORY = 83
    PERMISSION_DENIED = 84
    ALREADY_EXISTS = 85
    INVALID_PATH = 86
    NOT_TEXT = 87
    EDIT_NO_MATCH = 88
    EDIT_AMBIGUOUS = 89
    OUTPUT_LIMIT = 90
    INTEGRITY = 91
    NOT_EMPTY = 92
    OS_ERROR = 93
    NO_PROCESS = 94
    NO_STDIN = 95
    INTERNAL = 99


ERROR_TYPES: dict[ExitCode, type[errors.SandboxError]] = {
    ExitCode.INVALID_ARGUMENT: errors.InvalidArgumentError,
    ExitCode.NOT_FOUND: errors.SandboxFileNotFoundError,
    ExitCode.IS_DIRECTORY: errors.SandboxIsADirectoryError,
    ExitCode.NOT_DIRECTORY: errors.SandboxNotADirectoryError,
    ExitCode.PERMISSION_DENIED: errors.SandboxPermissionError,
    ExitCode.ALREADY_EXISTS: errors.SandboxFileExistsError,
    ExitCode.INVALID_PATH: errors.InvalidPathError,
    ExitCode.NOT_TEXT: errors.NotTextFileError,
    ExitCode.EDIT_NO_MATCH: errors.EditNoMatchError,
    ExitCode.EDIT_AMBIGUOUS: errors.EditAmbiguousError,
    ExitCode.OUTPUT_LIMIT: errors.OutputLimitExceededError,
    ExitCode.INTEGRITY: errors.IntegrityError,
    ExitCode.NOT_EMPTY: errors.DirectoryNotEmptyError,
    ExitCode.OS_ERROR: errors.SandboxError,
    ExitCode.NO_PROCESS: errors.ProcessNotFoundError,
    ExitCode.NO_STDIN: errors.StdinClosedError,
    ExitCode.INTERNAL: errors.SandboxRuntimeError,
}


def encode_path(path: str | bytes | os.PathLike[str]) -> str:
    """A path for the payload: its raw bytes (``os.fsencode``), base64."""
    return base64.b64encode(os.fsencode(path)).decode("ascii")


def decode_path(text: str) -> str:
    """A path from a result, as ``os.fsdecode`` would give it."""
    return os.fsdecode(base64.b64decode(text))


def has_frame(output: str, nonce: str) -> bool:
    """Whether ``output`` holds a whole result frame with ``nonce``."""
    return _find_frame(output, nonce) is not None


@overload
def parse_result(
    response: ExecuteResponse, nonce: str, what: str, *, lazy_blobs: Literal[False] = False
) -> tuple[Any, list[Blob]]: ...


@overload
def parse_result(
    response: ExecuteResponse, nonce: str, what: str, *, lazy_blobs: Literal[True]
) -> tuple[Any, list[LazyBlob]]: ...


def parse_result(
    response: ExecuteResponse, nonce: str, what: str, *, lazy_blobs: bool = False
) -> tuple[Any, list[Blob]] | tuple[Any, list[LazyBlob]]:
    """Turn a script's output and exit code into its value and blobs, or raise.

    Blobs are ``bytes`` (a large one a ``bytearray``), or with ``lazy_blobs``
    :class:`LazyBlob` s, decoded when the caller is ready for them."""
    if response.timed_out:
        raise errors.SandboxTimeoutError(f"{what} timed out")
    frame = _find_frame(response.output, nonce)
    if frame is None:
        raise _no_frame_error(response, nonce, what)
    body, spans = frame
    if body.get("ok") is True and response.exit_code == ExitCode.OK:
        if lazy_blobs:
            return body.get("value"), [LazyBlob(response.output, *span, what=what) for span in spans]
        try:
            return body.get("value"), [_decode_field(response.output, *span) for span in spans]
        except (ValueError, binascii.Error):
            raise _no_frame_error(response, nonce, what) from None
    error = body.get("error")
    if not isinstance(error, dict) or error.get("code") != response.exit_code:
        raise errors.SandboxRuntimeError(
            f"{what}: result frame and exit code {response.exit_code} disagree (was the script killed?)"
        )
    raise error_from(error, what)


@dataclass(frozen=True)
class LazyBlob:
    """A blob of a result frame, still base64 in the output: decoding a chunk
    of megabytes can wait until the next round trip is under way."""

    output: str
    start: int
    stop: int
    what: str

    def decode(self) -> Blob:
        """The blob's bytes, decoded from the output now."""
        try:
            return _decode_field(self.output, self.start, self.stop)
        except (ValueError, binascii.Error):
            raise errors.SandboxRuntimeError(f"{self.what}: a result blob does not decode") from None


def _python_missing(response: ExecuteResponse, nonce: str) -> bool:
    return response.exit_code == 127 and f"{NO_PYTHON_MARKER} {nonce}" in response.output


def error_from(error: dict[str, Any], what: str) -> errors.SandboxError:
    """The typed exception for an error reported by a script; one that does
    not read as a script's error is a :class:`~sandbox_sdk.errors.SandboxRuntimeError`."""
    try:
        code = ExitCode(error["code"])
        kind = ERROR_TYPES[code]  # OK (0) is no error's code
        path = decode_path(error["path"]) if isinstance(error.get("path"), str) else None
        count = int(error.get("count", 0))
    except (KeyError, ValueError, TypeError):  # binascii.Error is a ValueError
        return errors.SandboxRuntimeError(f"{what}: malformed error from the sandbox: {str(error)[:200]}")
    message = str(error.get("message", code.name))
    text = f"{message}: {path!r}" if path is not None else message
    if code is ExitCode.EDIT_AMBIGUOUS:
        return errors.EditAmbiguousError(text, path=path, count=count)
    return kind(text, path=path)


def _find_frame(output: str, nonce: str) -> tuple[dict[str, Any], list[tuple[int, int]]] | None:
    """The frame's decoded JSON body and where its blobs' base64 lies in ``output``."""
    prefix = f"{FRAME_MARKER} {nonce} "
    start = output.rfind(prefix)
    if start < 0 or (start > 0 and output[start - 1] != "\n"):
        return None
    end = output.find("\n", start)
    if end < 0:  # no closing newline: the frame was cut (and a cut can still decode)
        return None
    spans: list[tuple[int, int]] = []
    at = start + len(prefix)
    while at <= end:
        space = output.find(" ", at, end)
        stop = end if space < 0 else space
        spans.append((at, stop))
        at = stop + 1
    try:
        body = json.loads(_decode_field(output, *spans[0]))
    except (ValueError, binascii.Error):
        return None
    return (body, spans[1:]) if isinstance(body, dict) else None


#: Fields longer than this are decoded piece by piece, straight from the output.
DECODE_PIECE_CHARS = 1 << 20


def _decode_field(output: str, start: int, stop: int) -> Blob:
    """The base64 field ``output[start:stop]``, strictly decoded.

    A long field (a chunk of a download) is decoded a piece at a time into
    one buffer, so it costs its decoded size on top of the output, not a
    copy of the output's text as well; it comes back as a ``bytearray``."""
    if stop - start <= DECODE_PIECE_CHARS:
        return binascii.a2b_base64(output[start:stop], strict_mode=True)
    if (stop - start) % 4:
        raise binascii.Error("truncated base64 field")
    decoded = bytearray((stop - start) // 4 * 3)
    filled = 0
    for at in range(start, stop, DECODE_PIECE_CHARS):  # whole quanta: padding only in the last
        piece = binascii.a2b_base64(output[at : min(at + DECODE_PIECE_CHARS, stop)], strict_mode=True)
        decoded[filled : filled + len(piece)] = piece
        filled += len(piece)
    del decoded[filled:]  # what the padding did not fill
    return decoded


def _no_frame_error(response: ExecuteResponse, nonce: str, what: str) -> errors.SandboxError:
    tail = response.output[-500:].strip()
    if _python_missing(response, nonce):
        return errors.SandboxRuntimeError(
            f"{what} needs python3, and python3 is not available in the sandbox: {tail}"
        )
    if response.truncated:
        return errors.SandboxRuntimeError(
            f"{what}: the provider cut the output before the result frame (max_output_bytes is too small)"
        )
    return errors.SandboxRuntimeError(
        f"{what} produced no result (exit code {response.exit_code}); output ends with: {tail!r}"
    )
