"""The shell command of one operation (:func:`build_command`): the script's
interpreter line, the payload in a here-document, and for a served command
the request to the operation server first (:func:`server_request`).
"""

from __future__ import annotations

import binascii
import json
import secrets
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from sandbox_sdk.protocol.frame import FRAME_MARKER, NO_PYTHON_MARKER, ExitCode, encode_path
from sandbox_sdk.protocol.shipping import (
    BOOTSTRAP,
    INSTALL,
    MISSING,
    SHIPPED_ONLY,
    Shipped,
    module_of,
    scripts_dir_in,
    shipped,
)

PYTHON = "python3 -I -S"


def command_bytes(command: str) -> int:
    """The size of ``command`` in UTF-8, without encoding it when it is ASCII
    (a command of megabytes is not copied just to be measured)."""
    return len(command) if command.isascii() else len(command.encode("utf-8"))


#: Printed, with the nonce and why, by a served command that its operation
#: server did not run: :data:`NO_SERVER` (no port file, nothing listening,
#: or a listener that could not prove it is the server), :data:`DECLINED`
#: (the server, proved, said no) or :data:`STALLED` (nothing answered in
#: time: the client asks that server no more).
UNSERVED_MARKER = f"{FRAME_MARKER}_UNSERVED"

NO_SERVER, DECLINED, STALLED = "none", "declined", "stalled"

#: The modules whose commands never ask the operation server: those that run
#: the user's programs keep an interpreter of their own (the command's process
#: group, signals and limits are theirs), and the server's own.
UNSERVED = frozenset({"run", "proc", "server"})

#: How long bash waits for each of the server's answers: its proof, then
#: its yes or no (remote/server.py answers at once, from a worker forked
#: ahead). A server that misses it is stalled, and asked no more.
SERVER_HANDSHAKE_SECONDS = 5


def unserved_reason(output: str, nonce: str) -> str | None:
    """Why the served command with ``nonce`` was not served, if it said so."""
    at = output.find(f"{UNSERVED_MARKER} {nonce} ")
    if at < 0:
        return None
    start = at + len(UNSERVED_MARKER) + len(nonce) + 2
    return output[start : output.find("\n", start) % (len(output) + 1)].strip()


#: The descriptor on which a provider with an operation channel
#: (``BaseSandbox.operation_channel``) gives a command that asks for it
#: (:data:`CHANNEL_REQUEST`) a connection to the sandbox's operation server.
CHANNEL_FD = 9

#: The first line of a command that asks its provider for the operation
#: channel: a no-op for the shell, so a provider without one runs it as is.
CHANNEL_REQUEST = ": sbx-operation-channel"


def server_request(scripts_dir: str, script: Shipped, nonce: str, *, channel: bool = False) -> str:
    """Bash asking the operation server (remote/server.py) to run ``script``
    on this command's input and output, and exiting with its status if it
    does; else it goes on, and says why (:data:`UNSERVED_MARKER`). Bash
    alone: another shell has no ``/dev/tcp`` (nor ``read -t -u``).

    Over the provider's ``channel`` (fd :data:`CHANNEL_FD`) the other end is
    the server by construction: the provider connected it and vouched for
    it, so bash only reads the server's first line. Otherwise the port file
    is read only in the user's own scripts directory (not a symlink, owned:
    another user of a shared ``/tmp`` could make it, but then not own it),
    only if it is a regular file, opened read-write and read with a timeout
    (a FIFO put in its place cannot block). The server speaks first: it
    sends the proof the port file holds, and only a peer that sent it gets
    the token and the request. A listener on a stale port, in another
    sandbox sharing the loopback or of another user, learns nothing, and a
    silent one costs one handshake wait, once."""
    wait = SERVER_HANDSHAKE_SECONDS
    request = f"$BASHPID {script.name} {script.crc}"
    if channel:
        find, proved, connect = "", "", f"3<&{CHANNEL_FD}"
    else:
        before, _, after = scripts_dir.rpartition("%d")  # the user's own directory, as the bootstrap's
        find = (
            f' D={shlex.quote(before)}"$UID"{shlex.quote(after) if after else ""};'
            f' F="$D"/{shipped("server").name}.port;'
            ' [ ! -L "$D" ] && [ -O "$D" ] && [ -f "$F" ] && [ -O "$F" ]'
            ' && read -r -t 1 P T _ V _ 2>/dev/null <>"$F" &&'
        )
        proved, request = '[ "$R" = "$V" ] && ', f"$T {request}"
        connect = '3<>/dev/tcp/127.0.0.1/"$P"'
    return (
        f'if [ -n "${{BASH_VERSION-}}" ]; then S={NO_SERVER};{find} {{'
        f" if read -r -t {wait} -u 3 R; then {proved}S={STALLED}"
        f" && printf '%s\\n' \"{request}\" >&3"
        f" && read -r -t {wait} -u 3 R && S={DECLINED} && [ \"$R\" = + ] && printf '+\\n' >&3"
        f' && {{ read -r -u 3 R; exit "${{R:-{int(ExitCode.INTERNAL)}}}"; }};'
        f" elif [ $? -gt 128 ]; then S={STALLED}; fi; }}"
        f" 6>&2 2>/dev/null {connect} 4>&1 5<&0; echo {UNSERVED_MARKER} {nonce} $S; fi"
    )


def build_command(
    module: str,
    args: Mapping[str, Any],
    blobs: Sequence[bytes] = (),
    *,
    scripts_dir: str,
    omit_script: bool = False,
    served: bool = False,
    channel: bool = False,
    launch: float | None = None,
    installed: bool = True,
) -> tuple[str, str]:
    """The shell command for one operation and the nonce its frame must carry.

    ``scripts_dir`` (the provider's, never a caller's value) holds the
    installed scripts (see :data:`BOOTSTRAP`); with ``omit_script`` the
    command carries :data:`MISSING` instead of the script. A ``served``
    command asks the operation server first (:func:`server_request`), over
    the provider's ``channel`` if it has one (the command's first line asks
    for it: :data:`CHANNEL_REQUEST`); with ``launch`` (an idle timeout in
    seconds), it starts a server before. Without ``installed`` the command
    reads and writes nothing installed and asks no server: it runs the
    script it carries (:data:`SHIPPED_ONLY`)."""
    nonce = secrets.token_hex(16)
    header = json.dumps({**args, "nonce": nonce}, separators=(",", ":")).encode("utf-8")
    delimiter = f"SBX_{nonce}"
    check = f"command -v python3 >/dev/null 2>&1 || {{ echo {NO_PYTHON_MARKER} {nonce}; exit 127; }}"
    script = shipped(module)
    # ``exec``: a command with a redirection is forked by bash (never run in
    # its place, as a bare last command is); exec saves that fork.
    if installed:
        bootstrap = _bootstrap_args(scripts_dir, script, omit_script, nonce)
        python = f"exec {PYTHON} -c {shlex.quote(BOOTSTRAP)} {bootstrap}"
    else:
        python = f"exec {PYTHON} -c {shlex.quote(SHIPPED_ONLY)} {script.packed} {module}"
    if not served:
        lines = [f"{check}; {python} <<'{delimiter}'"]
    else:  # the server reads the same here-document through bash's descriptor 5
        request = server_request(scripts_dir, script, nonce, channel=channel)
        lines = [f"{{ {request}", f"{check}; {python}; }} <<'{delimiter}'"]
        if channel:
            lines.insert(0, CHANNEL_REQUEST)
        elif launch is not None:
            lines[:0] = _launch_lines(scripts_dir, launch)
    lines.append(_b64(header))
    lines.extend(_b64(blob) for blob in blobs)
    lines.extend([delimiter, ""])
    return "\n".join(lines), nonce  # one join: a blob of megabytes is copied into the command once


def _bootstrap_args(scripts_dir: str, script: Shipped, omit_script: bool, nonce: str) -> str:
    fallback = f"{shlex.quote(MISSING)} {nonce}" if omit_script else f"{shlex.quote(INSTALL)} {script.packed}"
    return f"{shlex.quote(scripts_dir)} {script.name} {script.crc} {fallback}"


def _launch_lines(scripts_dir: str, idle: float) -> list[str]:
    """A command's first lines that start an operation server
    (remote/server.py) and wait only for it to listen: the server script
    always travels in full, as its output, which would say it was
    missing, goes nowhere."""
    nonce = secrets.token_hex(16)
    script = shipped("server")
    args = {"op": "serve", "dir": encode_path(scripts_dir), "name": encode_path(script.name), "idle": idle}
    bootstrap = _bootstrap_args(scripts_dir, script, False, nonce)
    return [
        f"{PYTHON} -c {shlex.quote(BOOTSTRAP)} {bootstrap} >/dev/null 2>&1 <<'SBX_{nonce}'",
        _b64(json.dumps({**args, "nonce": nonce}, separators=(",", ":")).encode("utf-8")),
        f"SBX_{nonce}",
    ]


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def command_overhead(op: str, args: Mapping[str, Any], scratch_dir: str) -> int:
    """Bytes a command for operation ``op`` with ``args`` costs before any blob is
    added, in the largest form it may be sent in (carrying its script, and asking
    the operation server first, over a channel or not), so what is packed to it
    fits whichever form the session picks."""
    scripts_dir = scripts_dir_in(scratch_dir)
    forms = [
        build_command(
            module_of(op), {**args, "op": op}, scripts_dir=scripts_dir, served=served, channel=channel
        )[0]
        for served, channel in ((False, False), (True, False), (True, True))
    ]
    return max(len(command.encode("utf-8")) for command in forms) + 2  # the newline each blob adds, and slack
