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
"""

from __future__ import annotations

import ast
import base64
import binascii
import hashlib
import importlib
import json
import os
import pkgutil
import secrets
import shlex
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from importlib import resources
from typing import Any, Literal, overload

from sandbox_sdk import errors, remote
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.remote import _runtime

#: Starts the result line; the runtime prints it, so it is the runtime's.
FRAME_MARKER = _runtime.FRAME_MARKER
#: Printed (with the nonce) by the command itself when ``python3`` is missing.
NO_PYTHON_MARKER = f"{FRAME_MARKER}_NO_PYTHON3"
RUNTIME_MODULE = "sandbox_sdk.remote._runtime"
#: A blob of a result frame: ``bytes``, or a ``bytearray`` when decoded piece by piece.
Blob = bytes | bytearray
PYTHON = "python3 -I -S"


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
    ExitCode.INTERNAL: errors.SandboxRuntimeError,
}


def command_bytes(command: str) -> int:
    """The size of ``command`` in UTF-8, without encoding it when it is ASCII
    (a command of megabytes is not copied just to be measured)."""
    return len(command) if command.isascii() else len(command.encode("utf-8"))


def encode_path(path: str | bytes | os.PathLike[str]) -> str:
    """A path for the payload: its raw bytes (``os.fsencode``), base64."""
    return base64.b64encode(os.fsencode(path)).decode("ascii")


def decode_path(text: str) -> str:
    """A path from a result, as ``os.fsdecode`` would give it."""
    return os.fsdecode(base64.b64decode(text))


@cache
def modules_by_op() -> dict[str, str]:
    """The ``remote/<module>.py`` that runs each operation, from the modules'
    own ``OPS`` tables (an operation name is unique across them)."""
    table: dict[str, str] = {}
    for info in pkgutil.iter_modules(remote.__path__):
        if info.name.startswith("_"):
            continue
        ops: Mapping[str, object] = importlib.import_module(f"{remote.__name__}.{info.name}").OPS
        for op in ops:
            if op in table:
                raise RuntimeError(f"operation {op!r} is defined by both {table[op]} and {info.name}")
            table[op] = info.name
    return table


def module_of(op: str) -> str:
    """The in-sandbox module whose ``OPS`` has ``op``."""
    try:
        return modules_by_op()[op]
    except KeyError:
        raise ValueError(f"no in-sandbox script has an operation {op!r}") from None


def shipped_source(module: str) -> str:
    """The program run for ``sandbox_sdk/remote/<module>.py``: the shared
    runtime, the module and a call of ``main(OPS)``, trimmed by :class:`_Shippable`."""
    package = resources.files("sandbox_sdk.remote")
    runtime = package.joinpath("_runtime.py").read_text("utf-8")
    body = package.joinpath(f"{module}.py").read_text("utf-8")
    tree = _Shippable().visit(ast.parse("\n".join([runtime, body, "main(OPS)", ""])))
    return ast.unparse(ast.fix_missing_locations(_without_unused_definitions(tree))) + "\n"


#: Directory of the installed scripts in ``scratch_dir``, one per user
#: (``%d`` is the uid, as the runtime's ``LOCK_DIR``).
SCRIPTS_DIR = ".sbx-scripts-%d"
#: The bootstrap (``python3 -c``): run the installed script, loaded from its
#: file by CPython's own source loader (which caches its bytecode in
#: ``__pycache__``), if its CRC-32 is the one in the command and its
#: directory is the user's own, writable by no one else; otherwise run
#: :data:`INSTALL`, compiled only then. The directory is never put on
#: ``sys.path``: what the script imports comes from the standard library
#: only, never from a module planted beside it. Arguments: scratch_dir,
#: module name, CRC-32, :data:`INSTALL`, packed source.
BOOTSTRAP = f"""\
import sys,posix
r,n,c=sys.argv[1:4]
d=r+"/{SCRIPTS_DIR}"%posix.getuid()
p=d+"/"+n+".py"
def own():
 try:s=posix.lstat(d)
 except OSError:return False
 return s.st_mode&0o170022==0o40000 and s.st_uid==posix.getuid()
def run():
 try:
  with open(p,"rb") as f:s=f.read()
 except OSError:return
 import binascii
 if binascii.crc32(s)!=int(c):return
 try:from _frozen_importlib_external import SourceFileLoader as L
 except ImportError:from importlib.machinery import SourceFileLoader as L
 try:k=L(n,p).get_code(n)
 except OSError:return
 exec(k,dict(__name__="__main__"))
if own():run()
exec(sys.argv[4])
"""
#: Run by :data:`BOOTSTRAP` when there is no usable installed copy: unpack
#: the source, install it (a temporary file renamed into place: a racing
#: reader sees all of it or none) and import it; if that cannot be done (a
#: read-only scratch directory, say), run the unpacked source.
INSTALL = """\
import binascii,zlib
s=zlib.decompress(binascii.a2b_base64(sys.argv[5]))
t=p+"."+posix.urandom(8).hex()
try:
 try:posix.mkdir(d,0o700)
 except FileExistsError:pass
 if not own():raise PermissionError
 with open(t,"xb") as f:f.write(s)
 posix.replace(t,p)
except OSError:
 try:posix.unlink(t)
 except OSError:pass
else:run()
exec(compile(s,"sandbox_sdk/remote/"+n[4:n.rindex("_")]+".py","exec"),dict(__name__="__main__"))
"""


@dataclass(frozen=True)
class Shipped:
    """A script as a command carries it: the name it is installed under in the
    sandbox (``sbx_<module>_<digest of its source>``, so each version of the
    SDK has its own), the source's CRC-32, and the source zlib-compressed and
    base64-encoded for the command line."""

    name: str
    crc: int
    packed: str


@cache
def shipped(module: str) -> Shipped:
    """:func:`shipped_source` of ``module``, named and packed for a command."""
    source = shipped_source(module).encode("utf-8")
    return Shipped(
        name=f"sbx_{module}_{hashlib.sha256(source).hexdigest()[:16]}",
        crc=binascii.crc32(source),
        packed=base64.b64encode(zlib.compress(source, 9)).decode("ascii"),
    )


class _Shippable(ast.NodeTransformer):
    """What the sandbox does not need to run a script: docstrings, ``if
    TYPE_CHECKING:`` blocks, annotations (so nothing of ``typing`` is ever
    evaluated), ``__future__`` imports and the import of the runtime (shipped
    in front)."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        if getattr(node, "body", None) == []:
            node.body = [ast.Pass()]  # type: ignore[attr-defined]
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        is_docstring = isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        return None if is_docstring else node

    def visit_If(self, node: ast.If) -> ast.AST | None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return None
        return self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return None if node.module in ("__future__", RUNTIME_MODULE) else node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        return self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        return ast.copy_location(
            ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno), node
        )


def _without_unused_definitions(tree: ast.Module) -> ast.Module:
    """``tree`` without the top-level functions and classes that nothing it
    runs can reach: each script ships only the part of the runtime it uses,
    and the sandbox compiles less on every round trip."""
    definitions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    reachable: set[str] = set()
    pending = [node for node in tree.body if not isinstance(node, ast.FunctionDef | ast.ClassDef)]
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, ast.Name) and node.id in definitions and node.id not in reachable:
                reachable.add(node.id)
                pending.append(definitions[node.id])
    tree.body = [
        node
        for node in tree.body
        if not isinstance(node, ast.FunctionDef | ast.ClassDef) or node.name in reachable
    ]
    return tree


#: Printed, with the nonce, by :data:`MISSING`.
NO_SCRIPT_MARKER = f"{FRAME_MARKER}_NO_SCRIPT"
#: Run by :data:`BOOTSTRAP` in place of :data:`INSTALL` in a command that left
#: the script out (``_session.Session``) when there is no usable installed copy:
#: it says so, before the script has started, so the command may be sent again
#: in full. Its argument: the nonce.
MISSING = f'print("{NO_SCRIPT_MARKER}",sys.argv[5])'


#: Runs a command's packed script with nothing installed read or written:
#: the command of a sandbox that reuses no state (``reuse_sandbox_state``).
#: Arguments: the packed source, the module's name.
SHIPPED_ONLY = """\
import sys,binascii,zlib
exec(compile(zlib.decompress(binascii.a2b_base64(sys.argv[1])),"sandbox_sdk/remote/"+sys.argv[2]+".py","exec"),dict(__name__="__main__"))
"""


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


def has_frame(output: str, nonce: str) -> bool:
    """Whether ``output`` holds a whole result frame with ``nonce``."""
    return _find_frame(output, nonce) is not None


def server_request(scratch_dir: str, script: Shipped, nonce: str) -> str:
    """Bash asking the operation server (remote/server.py) to run ``script``
    on this command's input and output, and exiting with its status if it
    does; else it goes on, and says why (:data:`UNSERVED_MARKER`). Bash
    alone: another shell has no ``/dev/tcp`` (nor ``read -t -u``).

    The port file is read only in the user's own scripts directory (not a
    symlink, owned: another user of a shared ``/tmp`` could make it, but
    then not own it), only if it is a regular file, opened read-write and
    read with a timeout (a FIFO put in its place cannot block). The server
    speaks first: it sends the proof the port file holds, and only a peer
    that sent it gets the token and the request. A listener on a stale
    port, in another sandbox sharing the loopback or of another user,
    learns nothing, and a silent one costs one handshake wait, once."""
    before, _, after = SCRIPTS_DIR.partition("%d")  # the user's own directory, as the bootstrap's
    directory = f'{shlex.quote(scratch_dir)}/{before}"$UID"{after}'
    wait = SERVER_HANDSHAKE_SECONDS
    return (
        f'if [ -n "${{BASH_VERSION-}}" ]; then S={NO_SERVER}; D={directory};'
        f' F="$D"/{shipped("server").name}.port; [ ! -L "$D" ] && [ -O "$D" ] && [ -f "$F" ] && [ -O "$F" ]'
        f' && read -r -t 1 P T _ V _ 2>/dev/null <>"$F" && {{'
        f' if read -r -t {wait} -u 3 R; then [ "$R" = "$V" ] && S={STALLED}'
        f" && printf '%s %s {script.name} {script.crc}\\n' \"$T\" $BASHPID >&3"
        f" && read -r -t {wait} -u 3 R && S={DECLINED} && [ \"$R\" = + ] && printf '+\\n' >&3"
        f' && {{ read -r -u 3 R; exit "${{R:-{int(ExitCode.INTERNAL)}}}"; }};'
        f" elif [ $? -gt 128 ]; then S={STALLED}; fi; }}"
        f' 6>&2 2>/dev/null 3<>/dev/tcp/127.0.0.1/"$P" 4>&1 5<&0; echo {UNSERVED_MARKER} {nonce} $S; fi'
    )


def build_command(
    module: str,
    args: Mapping[str, Any],
    blobs: Sequence[bytes] = (),
    *,
    scratch_dir: str,
    omit_script: bool = False,
    served: bool = False,
    launch: float | None = None,
    installed: bool = True,
) -> tuple[str, str]:
    """The shell command for one operation and the nonce its frame must carry.

    ``scratch_dir`` (the provider's, never a caller's value) holds the
    installed scripts (see :data:`BOOTSTRAP`); with ``omit_script`` the
    command carries :data:`MISSING` instead of the script. A ``served``
    command asks the operation server first (:func:`server_request`); with
    ``launch`` (an idle timeout in seconds), it starts a server before.
    Without ``installed`` the command reads and writes nothing installed
    and asks no server: it runs the script it carries (:data:`SHIPPED_ONLY`)."""
    nonce = secrets.token_hex(16)
    header = json.dumps({**args, "nonce": nonce}, separators=(",", ":")).encode("utf-8")
    delimiter = f"SBX_{nonce}"
    check = f"command -v python3 >/dev/null 2>&1 || {{ echo {NO_PYTHON_MARKER} {nonce}; exit 127; }}"
    script = shipped(module)
    # ``exec``: a command with a redirection is forked by bash (never run in
    # its place, as a bare last command is); exec saves that fork.
    if installed:
        bootstrap = _bootstrap_args(scratch_dir, script, omit_script, nonce)
        python = f"exec {PYTHON} -c {shlex.quote(BOOTSTRAP)} {bootstrap}"
    else:
        python = f"exec {PYTHON} -c {shlex.quote(SHIPPED_ONLY)} {script.packed} {module}"
    if not served:
        lines = [f"{check}; {python} <<'{delimiter}'"]
    else:  # the server reads the same here-document through bash's descriptor 5
        lines = [f"{{ {server_request(scratch_dir, script, nonce)}", f"{check}; {python}; }} <<'{delimiter}'"]
        if launch is not None:
            lines[:0] = _launch_lines(scratch_dir, launch)
    lines.append(_b64(header))
    lines.extend(_b64(blob) for blob in blobs)
    lines.extend([delimiter, ""])
    return "\n".join(lines), nonce  # one join: a blob of megabytes is copied into the command once


def _bootstrap_args(scratch_dir: str, script: Shipped, omit_script: bool, nonce: str) -> str:
    fallback = f"{shlex.quote(MISSING)} {nonce}" if omit_script else f"{shlex.quote(INSTALL)} {script.packed}"
    return f"{shlex.quote(scratch_dir)} {script.name} {script.crc} {fallback}"


def _launch_lines(scratch_dir: str, idle: float) -> list[str]:
    """A command's first lines that start an operation server
    (remote/server.py) and wait only for it to listen: the server script
    always travels in full, as its output, which would say it was
    missing, goes nowhere."""
    nonce = secrets.token_hex(16)
    script = shipped("server")
    args = {
        "op": "serve",
        "scratch": encode_path(scratch_dir),
        "dir": SCRIPTS_DIR,
        "name": encode_path(script.name),
        "idle": idle,
        "nonce": nonce,
    }
    bootstrap = _bootstrap_args(scratch_dir, script, False, nonce)
    return [
        f"{PYTHON} -c {shlex.quote(BOOTSTRAP)} {bootstrap} >/dev/null 2>&1 <<'SBX_{nonce}'",
        _b64(json.dumps(args, separators=(",", ":")).encode("utf-8")),
        f"SBX_{nonce}",
    ]


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def command_overhead(op: str, args: Mapping[str, Any], scratch_dir: str) -> int:
    """Bytes a command for operation ``op`` with ``args`` costs before any blob is added."""
    command, _ = build_command(module_of(op), {**args, "op": op}, scratch_dir=scratch_dir)
    return len(command.encode("utf-8")) + 2  # the newline that each blob adds, and slack


def blob_capacity(budget: int) -> int:
    """The largest raw blob whose base64 form fits in ``budget`` bytes."""
    return max(0, budget // 4 * 3)


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
