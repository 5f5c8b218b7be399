"""The server as a client starts it: ``python -m sandbox_sdk.integrations.mcp``
in a real subprocess, over stdio and once over streamable HTTP on loopback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.to_thread
import pytest

pytest.importorskip("mcp")

from mcp import StdioServerParameters, types

from sandbox_sdk import get_provider
from sandbox_sdk.integrations.mcp import main
from tests.integrations.mcp.kit import TOOLS, connect, ok, refused

#: Longest wait for one line from the server process.
LINE_TIMEOUT = 30.0
#: A 2025 client's first messages, written by hand: initialize, then one tool call.
HANDSHAKE_AND_ONE_CALL: list[dict[str, Any]] = [
    {
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    },
    {"method": "notifications/initialized"},
    {"id": 2, "method": "tools/call", "params": {"name": "execute", "arguments": {"command": "echo hi"}}},
]


def server_args(provider: str, state_dir: Path, *extra: str) -> list[str]:
    return [
        "-m",
        "sandbox_sdk.integrations.mcp",
        "--provider",
        provider,
        "--state-dir",
        str(state_dir),
        *extra,
    ]


def sandboxes(provider: str, state_dir: Path) -> list[str]:
    return [info.id for info in get_provider(provider, state_dir=state_dir).iter_sandboxes()]


async def read_line(stream: IO[bytes]) -> bytes:
    """A line, or a failure after :data:`LINE_TIMEOUT` (the thread is abandoned)."""
    with anyio.fail_after(LINE_TIMEOUT):
        return await anyio.to_thread.run_sync(stream.readline, abandon_on_cancel=True)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Server processes a test starts; any still running at its end are killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


@pytest.mark.parametrize("provider", ["local", "bwrap"])
async def test_over_stdio(provider: str, tmp_path: Path, client_dir: Path) -> None:
    state = tmp_path / "state"
    (client_dir / "data.csv").write_text("a,b\n1,2\n")
    params = StdioServerParameters(command=sys.executable, args=server_args(provider, state))
    async with connect(params, [client_dir]) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        await ok(client, "upload", local_path=str(client_dir / "data.csv"), sandbox_path="data.csv")
        summed = await ok(client, "execute", command="awk -F, 'END { print $1 + $2 }' data.csv")
        assert summed.startswith("3\n")
        await refused(client, "upload", local_path="/etc/hostname", sandbox_path="x")
        await ok(client, "edit_file", path="data.csv", old_string="1,2", new_string="3,4")
        (resource,) = (await client.read_resource("sandbox://data.csv")).contents
        assert isinstance(resource, types.TextResourceContents)
        assert resource.text == "a,b\n3,4\n"
        timed_out = await refused(client, "execute", command="sleep 30", timeout=1)
        assert "Error: Command timed out after 1 seconds and was killed." in timed_out
        assert len(sandboxes(provider, state)) == 1
    assert sandboxes(provider, state) == []


async def test_a_signal_deletes_the_session_sandbox(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Killed while the client still holds stdin open."""
    state = tmp_path / "state"
    server = subprocess.Popen(
        [sys.executable, *server_args("local", state)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    processes.append(server)
    assert server.stdin is not None and server.stdout is not None
    for message in HANDSHAKE_AND_ONE_CALL:
        server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    server.stdin.flush()
    assert json.loads(await read_line(server.stdout))["id"] == 1
    reply = json.loads(await read_line(server.stdout))
    assert reply["result"]["content"][0]["text"].startswith("hi\n")
    assert len(sandboxes("local", state)) == 1
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=LINE_TIMEOUT) == -signal.SIGTERM
    assert sandboxes("local", state) == []


async def test_over_streamable_http(tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    state = tmp_path / "state"
    server = subprocess.Popen(
        [sys.executable, *server_args("local", state, "--transport", "streamable-http", "--port", "0")],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    processes.append(server)
    assert server.stderr is not None
    line = (await read_line(server.stderr)).decode()
    assert line.startswith("sandbox-sdk mcp: serving http://127.0.0.1:"), line
    async with connect(line.split()[-1]) as client:
        assert await ok(client, "execute", command="echo over http") == (
            "over http\n\n[Command succeeded with exit code 0]"
        )
        assert len(sandboxes("local", state)) == 1
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=LINE_TIMEOUT) == -signal.SIGTERM
    assert sandboxes("local", state) == []


def test_a_provider_that_cannot_be_used_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--provider", "no-such-provider"]) == 1
    assert "no sandbox provider named 'no-such-provider'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "environment", "chosen"),
    [
        ([], {"SANDBOX_SDK_PROVIDER": "general"}, "general"),
        ([], {"SANDBOX_SDK_PROVIDER": "general", "SANDBOX_SDK_MCP_PROVIDER": "mcp-own"}, "mcp-own"),
        ([], {"SANDBOX_SDK_PROVIDER": "general", "SANDBOX_SDK_MCP_PROVIDER": ""}, "general"),
        (
            ["--provider", "flag"],
            {"SANDBOX_SDK_PROVIDER": "general", "SANDBOX_SDK_MCP_PROVIDER": "mcp-own"},
            "flag",
        ),
    ],
)
def test_the_provider_is_the_flag_else_the_servers_variable_else_the_sdks(
    argv: list[str],
    environment: dict[str, str],
    chosen: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each name is one no provider has, so the server says which one it tried."""
    for name in ("SANDBOX_SDK_PROVIDER", "SANDBOX_SDK_MCP_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 1
    assert f"no sandbox provider named {chosen!r}" in capsys.readouterr().err


def test_labels_must_be_key_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--label", "nokey"])
    assert "expected KEY=VALUE" in capsys.readouterr().err
