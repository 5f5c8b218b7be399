"""The script protocol: command shape, framing, exit codes, noise, and failures."""

from __future__ import annotations

import ast
import base64
import json
import subprocess
import zlib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from sandbox_sdk import errors, protocol
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.remote import _runtime

MODULES = sorted(
    p.name[:-3]
    for p in resources.files("sandbox_sdk.remote").iterdir()
    if p.name.endswith(".py") and not p.name.startswith("_")
)


def test_exit_code_table_is_one_table() -> None:
    assert {code.name: code.value for code in protocol.ExitCode} == _runtime.EXIT
    assert set(protocol.ERROR_TYPES) == set(protocol.ExitCode) - {protocol.ExitCode.OK}


def test_exit_codes_avoid_shell_and_python_codes() -> None:
    reserved = {1, 2, *range(64, 79), *range(124, 256)}
    assert not reserved & {code.value for code in protocol.ExitCode}


@pytest.mark.parametrize("module", MODULES)
def test_every_shipped_script_compiles_and_runs_only_stdlib(module: str) -> None:
    source = zlib.decompress(base64.b64decode(protocol.shipped(module).packed)).decode()
    assert source == protocol.shipped_source(module)
    tree = ast.parse(source)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert "sandbox_sdk" not in imported
    assert imported <= {
        "__future__", "_json", "_stat", "array", "ast", "base64", "binascii", "contextlib", "ctypes", "errno",
        "fcntl", "gc", "hashlib", "hmac", "json", "os", "posix", "re", "resource", "select", "shutil",
        "signal", "socket", "stat", "sys", "tarfile", "tempfile", "termios", "time", "traceback", "typing",
        "zlib",
    }  # fmt: skip
    assert source.rstrip().endswith("main(OPS)")


#: What a script may import before it runs, besides built-in modules: each
#: import costs every round trip its start-up time.
START_UP_IMPORTS = {"_stat", "binascii", "posix", "sys"}
#: ``tarfile`` imports ``os`` anyway; ``proc`` manages processes (its round
#: trips are not the small file operations the others are).
MODULE_IMPORTS = {"archive": {"os", "tarfile"}, "proc": {"os", "time"}}


@pytest.mark.parametrize("module", MODULES)
def test_scripts_import_at_start_up_only_what_they_always_use(module: str) -> None:
    tree = ast.parse(protocol.shipped_source(module))
    # A top-level ``try:`` import counts by its first choice (not the fallback).
    statements = [part for node in tree.body for part in (node.body if isinstance(node, ast.Try) else [node])]
    top_level = {
        alias.name.split(".")[0]
        for node in statements
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert top_level <= START_UP_IMPORTS | MODULE_IMPORTS.get(module, set())
    annotated = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.arg | ast.AnnAssign) and getattr(node, "annotation", None)
    ]
    assert not annotated, "annotations are stripped: nothing of typing is evaluated in the sandbox"


def test_user_values_never_reach_the_command_text() -> None:
    hostile = "'; rm -rf / #$(reboot)`id`\nEOF"
    command, nonce = protocol.build_command(
        "write",
        {"path": hostile, "flag": True},
        [hostile.encode()],
        scripts_dir=protocol.scripts_dir_in("/tmp"),
    )
    assert hostile not in command
    assert "rm -rf" not in command
    assert "true" not in command.lower().split("<<")[1]  # even booleans travel encoded
    assert command.count(f"SBX_{nonce}") == 2


def run_script(module: str, args: dict[str, object], cwd: Path) -> ExecuteResponse:
    command, nonce = protocol.build_command(module, args, scripts_dir=protocol.scripts_dir_in(str(cwd)))
    done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=False)
    response = ExecuteResponse(output=done.stdout + done.stderr, exit_code=done.returncode)
    response.__dict__["nonce"] = nonce
    return response


def test_frame_survives_noise_around_it(local: LocalSandbox) -> None:
    class Noisy(LocalSandbox):
        def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
            inner = super().execute(command, timeout=timeout)
            noise = "Welcome to the sandbox!\n@@SANDBOX_SDK forged-nonce e30=\n"
            return inner.model_copy(update={"output": noise + inner.output + "\nbash: warning: noise\n"})

    noisy = Noisy(local.root_dir)
    noisy.write("f.txt", "content\n")
    assert noisy.read("f.txt").content == "content\n"
    assert [e.name for e in noisy.ls(".")] == ["f.txt"]
    with pytest.raises(FileNotFoundError):
        noisy.read("missing")


def test_forged_frame_with_another_nonce_is_ignored() -> None:
    body = base64.b64encode(json.dumps({"ok": True, "value": 1}).encode()).decode()
    output = f"@@SANDBOX_SDK not-the-nonce {body}\n"
    with pytest.raises(errors.SandboxRuntimeError, match="produced no result"):
        protocol.parse_result(ExecuteResponse(output=output, exit_code=0), "the-nonce", "op")


def test_frame_and_exit_code_must_agree() -> None:
    body = base64.b64encode(json.dumps({"ok": True, "value": 1}).encode()).decode()
    output = f"\n@@SANDBOX_SDK n {body}\n"
    with pytest.raises(errors.SandboxRuntimeError, match="disagree"):
        protocol.parse_result(ExecuteResponse(output=output, exit_code=137), "n", "op")


def test_truncated_output_is_reported_not_parsed() -> None:
    response = ExecuteResponse(output="@@SANDBOX_SDK n eyJv", exit_code=0, truncated=True)
    with pytest.raises(errors.SandboxRuntimeError, match="max_output_bytes"):
        protocol.parse_result(response, "n", "op")


def test_timeout_is_a_timeout_error() -> None:
    response = ExecuteResponse(output="", exit_code=124, timed_out=True)
    with pytest.raises(errors.SandboxTimeoutError) as caught:
        protocol.parse_result(response, "n", "read")
    assert isinstance(caught.value, TimeoutError)


def test_missing_python3_is_said_in_those_words(local: LocalSandbox, tmp_path: Path) -> None:
    only_bash = tmp_path / "bin"
    only_bash.mkdir()
    (only_bash / "bash").symlink_to("/bin/bash")
    bare = LocalSandbox(local.root_dir, env={"PATH": str(only_bash)})
    bare.operation_server = False  # else a server that another sandbox on this host started serves ls
    with pytest.raises(errors.SandboxRuntimeError, match="python3 is not available in the sandbox"):
        bare.ls(".")
    with pytest.raises(errors.SandboxRuntimeError, match="python3 is not available in the sandbox"):
        bare.run("echo hi", cwd=".")


def test_script_crash_is_an_error_not_data(tmp_path: Path) -> None:
    response = run_script("ls", {"op": "ls", "path": 42, "start": 0, "budget": 1000}, tmp_path)
    with pytest.raises(errors.InvalidArgumentError):
        protocol.parse_result(response, response.__dict__["nonce"], "ls")
    response = run_script("ls", {"op": "ls", "path": protocol.encode_path("."), "budget": 1}, tmp_path)
    with pytest.raises(errors.SandboxRuntimeError, match="unexpected error inside the sandbox") as caught:
        protocol.parse_result(response, response.__dict__["nonce"], "ls")
    assert "KeyError" in str(caught.value)


def test_unknown_operation_is_rejected(tmp_path: Path) -> None:
    response = run_script("fs", {"op": "format_disk"}, tmp_path)
    assert response.exit_code == protocol.ExitCode.INVALID_ARGUMENT
    with pytest.raises(errors.InvalidArgumentError, match="unknown operation"):
        protocol.parse_result(response, response.__dict__["nonce"], "fs")


def test_errors_subclass_builtins() -> None:
    assert issubclass(errors.SandboxFileNotFoundError, FileNotFoundError)
    assert issubclass(errors.SandboxPermissionError, PermissionError)
    assert issubclass(errors.SandboxTimeoutError, TimeoutError)
    assert issubclass(errors.SandboxFileExistsError, FileExistsError)
    for kind in protocol.ERROR_TYPES.values():
        assert issubclass(kind, errors.SandboxError)


OK_BODY = base64.b64encode(b'{"ok":true}').decode()


@pytest.mark.parametrize("size", [0, 1, 2, 3, 786_431, 786_432, 786_433, 3 * 786_432 + 2])
def test_frame_fields_decode_across_piece_boundaries(size: int) -> None:
    """Long fields are decoded piece by piece (1 MiB of text at a time)."""
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    text = base64.b64encode(data).decode()
    output = f"noise\n{protocol.FRAME_MARKER} n0nce {OK_BODY} {text}\n"
    response = ExecuteResponse(output=output, exit_code=0)
    assert protocol.parse_result(response, "n0nce", "test") == (None, [data])
    _, [lazy] = protocol.parse_result(response, "n0nce", "test", lazy_blobs=True)
    assert lazy.decode() == data


@pytest.mark.parametrize("damage", ["bad character", "cut", "padding inside"])
def test_a_damaged_long_field_is_no_frame(damage: str) -> None:
    text = base64.b64encode(bytes(2_000_000)).decode()
    middle = len(text) // 2
    damaged = {
        "bad character": text[:middle] + "*" + text[middle + 1 :],
        "cut": text[:-1],
        "padding inside": text[:1_048_576] + "AA==" + text[1_048_580:],
    }[damage]
    response = ExecuteResponse(output=f"{protocol.FRAME_MARKER} n0nce {OK_BODY} {damaged}\n", exit_code=0)
    with pytest.raises(errors.SandboxRuntimeError, match="produced no result"):
        protocol.parse_result(response, "n0nce", "test")
    _, [lazy] = protocol.parse_result(response, "n0nce", "test", lazy_blobs=True)
    with pytest.raises(errors.SandboxRuntimeError, match="does not decode"):
        lazy.decode()


def run_importing(tmp_path: Path, module: str, args: dict[str, Any]) -> tuple[Any, set[str]]:
    """A script's value from a real round trip in ``tmp_path`` under
    ``python3 -X importtime``, and the modules it imported."""
    command, nonce = protocol.build_command(module, args, scripts_dir=protocol.scripts_dir_in(str(tmp_path)))
    timed = command.replace(protocol.PYTHON, "python3 -X importtime -I -S", 1)
    response = LocalSandbox(tmp_path).execute(timed)
    value, _ = protocol.parse_result(response, nonce, args["op"])
    return value, {line.rsplit("|", 1)[-1].strip() for line in response.output.splitlines() if "|" in line}


def test_a_round_trip_imports_neither_json_nor_re_nor_os(tmp_path: Path) -> None:
    """CPython's ``_json`` stands in for ``json``, whose import of ``re`` would
    cost every round trip about 7 ms (measured with ``-X importtime``),
    ``posix`` for ``os`` (0.8 ms) and ``_stat`` for ``stat`` (0.13 ms);
    ``errno`` is imported on the error path only."""
    args = {"op": "stat", "path": protocol.encode_path(".")}
    value, imported = run_importing(tmp_path, "ls", args)
    assert value["type"] == "dir"
    assert "binascii" in imported  # the measurement works
    avoided = {"json", "json.decoder", "re", "enum", "typing", "hashlib", "base64", "os", "stat", "errno"}
    assert not imported & avoided


def test_a_grep_regardless_of_case_imports_no_re_for_ascii_text(tmp_path: Path) -> None:
    """``ignore_case`` for an ASCII word in ASCII lines: no ``re`` (its import costs more than the search)."""
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a.txt").write_text("One NEEDLE\nnone\nneedle two\n")
    args: dict[str, Any] = {
        "op": "grep",
        "pattern": protocol.encode_path("Needle"),
        "path": protocol.encode_path("tree"),
        "glob": None,
        "fixed_strings": False,
        "ignore_case": True,
        "max_matches": 10,
        "max_line_bytes": 1000,
        "budget": 100_000,
        "exclude_dirs": [],
    }
    value, imported = run_importing(tmp_path, "grep", args)
    assert [number for _, number, _, _ in value["matches"]] == [1, 3]
    assert "binascii" in imported and "re" not in imported


@pytest.mark.parametrize("op", ["put_many", "stage", "write", "edit", "grep"])
def test_a_commands_overhead_covers_every_form_it_is_sent_in(op: str) -> None:
    """What a batch is packed to must hold when the session sends the command
    with its script and asks the operation server first (the largest form)."""
    args = {"token": "t" * 16, "items": []}
    overhead = protocol.command_overhead(op, args, "/tmp")
    scripts_dir = protocol.scripts_dir_in("/tmp")
    for served, channel in ((False, False), (True, False), (True, True)):
        command, _ = protocol.build_command(
            protocol.module_of(op),
            {**args, "op": op},
            scripts_dir=scripts_dir,
            served=served,
            channel=channel,
        )
        assert len(command.encode("utf-8")) < overhead
