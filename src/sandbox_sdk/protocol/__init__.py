"""The client half of the in-sandbox script protocol.

An operation is one shell command::

    exec python3 -I -S -c '<bootstrap>' <scratch_dir> <name> <crc> '<install>' <packed script> <<'SBX_<nonce>'
    <base64 JSON arguments>
    <base64 blob>...
    SBX_<nonce>

Nothing the caller passes is ever part of the command text: arguments, paths
and contents travel only inside the base64 payload, whose alphabet cannot
contain the heredoc delimiter. The bootstrap runs the script installed in
the sandbox by an earlier command (its bytecode cached by CPython), else the
packed one, which it installs. The script answers with one framed line and an
exit code from :class:`ExitCode`; :func:`parse_result` turns that into a value
or into the one typed exception that code maps to. docs/protocol.md has the
full description.

The package is split by concern: :mod:`~sandbox_sdk.protocol.frame` (the
result frame, exit codes and the exceptions they map to),
:mod:`~sandbox_sdk.protocol.shipping` (scripts packed for a command, the
bootstrap) and :mod:`~sandbox_sdk.protocol.command` (the command builder and
the operation server's request). Every public name is here too.
"""

from __future__ import annotations

from sandbox_sdk.protocol.command import (
    CHANNEL_FD,
    CHANNEL_REQUEST,
    DECLINED,
    NO_SERVER,
    PYTHON,
    SERVER_HANDSHAKE_SECONDS,
    STALLED,
    UNSERVED,
    UNSERVED_MARKER,
    build_command,
    command_bytes,
    command_overhead,
    server_request,
    unserved_reason,
)
from sandbox_sdk.protocol.frame import (
    DECODE_PIECE_CHARS,
    ERROR_TYPES,
    FRAME_MARKER,
    NO_PYTHON_MARKER,
    Blob,
    ExitCode,
    LazyBlob,
    decode_path,
    encode_path,
    error_from,
    has_frame,
    parse_result,
)
from sandbox_sdk.protocol.shipping import (
    BOOTSTRAP,
    INSTALL,
    MISSING,
    NO_SCRIPT_MARKER,
    RUNTIME_MODULE,
    SCRIPTS_DIR,
    SHIPPED_ONLY,
    Shipped,
    module_of,
    modules_by_op,
    scripts_dir_in,
    shipped,
    shipped_source,
)

__all__ = [
    "BOOTSTRAP",
    "CHANNEL_FD",
    "CHANNEL_REQUEST",
    "DECLINED",
    "DECODE_PIECE_CHARS",
    "ERROR_TYPES",
    "FRAME_MARKER",
    "INSTALL",
    "MISSING",
    "NO_PYTHON_MARKER",
    "NO_SCRIPT_MARKER",
    "NO_SERVER",
    "PYTHON",
    "RUNTIME_MODULE",
    "SCRIPTS_DIR",
    "SERVER_HANDSHAKE_SECONDS",
    "SHIPPED_ONLY",
    "STALLED",
    "UNSERVED",
    "UNSERVED_MARKER",
    "Blob",
    "ExitCode",
    "LazyBlob",
    "Shipped",
    "build_command",
    "command_bytes",
    "command_overhead",
    "decode_path",
    "encode_path",
    "error_from",
    "has_frame",
    "module_of",
    "modules_by_op",
    "parse_result",
    "scripts_dir_in",
    "server_request",
    "shipped",
    "shipped_source",
    "unserved_reason",
]
