"""Every tool and the resources, through the SDK's own client in-process, against
real local and bwrap sandboxes: results, ``Error:`` texts, bad inputs, paging."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import MCPError, types
from mcp.server import MCPServer

from sandbox_sdk import BaseSandbox
from tests.integrations.mcp.kit import TOOLS, call, connect, ok, refused

PNG_START = b"\x89PNG\r\n\x1a\n\xff\x00"  # not UTF-8: served as a blob
#: Names a shell would expand or split, if a path ever reached one.
ODD_NAMES = ['it\'s "quoted".txt', "line\nbreak.txt", "$(touch pwned).txt", "`touch pwned`;x.txt"]


async def test_lists_every_tool_and_the_file_template(server: MCPServer[Any]) -> None:
    async with connect(server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        templates = (await client.list_resource_templates()).resource_templates
    assert set(tools) == TOOLS
    annotations = {name: tool.annotations for name, tool in tools.items()}
    hints = {
        name: (notes.read_only_hint, notes.destructive_hint)
        for name, notes in annotations.items()
        if notes is not None
    }
    assert set(hints) == TOOLS  # every tool is annotated
    assert {name for name, (read_only, _) in hints.items() if read_only} == {
        "ls",
        "read_file",
        "glob",
        "grep",
        "read_process_output",
    }
    assert {name for name, (_, destructive) in hints.items() if destructive} == {
        "execute",
        "write_file",
        "edit_file",
        "write_process_stdin",
        "kill_process",
    }
    assert all(hint is not None for pair in hints.values() for hint in pair)  # every tool says both
    assert "roots" not in tools["upload"].input_schema["properties"]  # filled by the server, not the model
    assert [template.uri_template for template in templates] == ["sandbox://{+path}"]


async def test_execute_returns_output_and_exit_status_with_progress(server: MCPServer[Any]) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with connect(server) as client:
        result = await client.call_tool(
            "execute", {"command": "echo out; echo err >&2; sleep 0.5; exit 3"}, progress_callback=on_progress
        )
    assert not result.is_error
    assert isinstance(text := result.content[0], types.TextContent)
    assert text.text == "out\nerr\n\n[Command failed with exit code 3]"
    assert reports[0] == (0, None, "started")
    assert any(message and message.startswith("running for") for _, _, message in reports[1:-1])
    done, total, message = reports[-1]
    assert (done, message) == (total, "finished")
    assert [done for done, _, _ in reports] == sorted(done for done, _, _ in reports)


async def test_a_command_past_its_timeout_is_killed_and_reported(server: MCPServer[Any]) -> None:
    started = time.monotonic()
    async with connect(server) as client:
        text = await refused(client, "execute", command="echo begun; sleep 30", timeout=1)
    assert time.monotonic() - started < 15
    assert text == (
        "begun\nError: Command timed out after 1 seconds and was killed.\n[Command failed with exit code 124]"
    )


async def test_write_read_and_edit(server: MCPServer[Any]) -> None:
    async with connect(server) as client:
        assert (
            await ok(client, "write_file", path="dir/a.txt", content="one\ntwo\n") == "Updated file dir/a.txt"
        )
        assert await ok(client, "read_file", path="dir/a.txt") == "     1\tone\n     2\ttwo"
        edited = await ok(client, "edit_file", path="dir/a.txt", old_string="two", new_string="2")
        assert edited == "Successfully replaced 1 instance(s) of the string in 'dir/a.txt'"
        assert await ok(client, "read_file", path="dir/a.txt", offset=1) == "     2\t2"
        await ok(client, "write_file", path="dir/a.txt", content="new\n", overwrite=True)
        assert await ok(client, "read_file", path="dir/a.txt") == "     1\tnew"
        await ok(client, "write_file", path="empty.txt", content="")
        assert (
            await ok(client, "read_file", path="empty.txt")
            == "System reminder: File exists but has empty contents"
        )


async def test_a_long_file_reads_page_by_page(server: MCPServer[Any]) -> None:
    lines = [f"line {number}" for number in range(1, 46)]
    seen: list[str] = []
    async with connect(server) as client:
        await ok(client, "write_file", path="long.txt", content="\n".join(lines) + "\n")
        offset: int | None = 0
        while offset is not None:
            page = (await ok(client, "read_file", path="long.txt", offset=offset, limit=20)).split("\n")
            offset = None
            if page[-1].startswith("[Lines"):
                assert page[-1].endswith(
                    f"of 45. To read more, call read_file with offset={len(seen) + 20}.]"
                )
                offset = len(seen) + 20
                page.pop()
            seen.extend(row.split("\t", 1)[1] for row in page)
    assert seen == lines


async def test_read_failures(server: MCPServer[Any]) -> None:
    async with connect(server) as client:
        assert (
            await refused(client, "read_file", path="missing.txt")
            == "Error: cannot read 'missing.txt': not found"
        )
        await ok(client, "execute", command="printf 'a\\xff\\xfe' > binary.dat; mkdir -p folder")
        not_text = await refused(client, "read_file", path="binary.dat")
        assert not_text == "Error: cannot read 'binary.dat': not a UTF-8 text file"
        assert (
            await refused(client, "read_file", path="folder") == "Error: cannot read 'folder': is a directory"
        )
        await ok(client, "write_file", path="three.txt", content="1\n2\n3\n")
        past_end = await refused(client, "read_file", path="three.txt", offset=7)
        assert past_end == "Error: File 'three.txt': Line offset 7 exceeds file length (3 lines)"


async def test_write_and_edit_refusals(server: MCPServer[Any]) -> None:
    async with connect(server) as client:
        await ok(client, "write_file", path="a.txt", content="x x\n")
        exists = await refused(client, "write_file", path="a.txt", content="y")
        assert exists == (
            "Error: cannot write 'a.txt': it already exists. "
            "Read it and then edit it, or write to a new path."
        )
        no_match = await refused(client, "edit_file", path="a.txt", old_string="zz", new_string="y")
        assert no_match == "Error: String not found in file 'a.txt': 'zz'"
        ambiguous = await refused(client, "edit_file", path="a.txt", old_string="x", new_string="y")
        assert ambiguous.startswith("Error: String 'x' appears multiple times (2) in 'a.txt'.")
        empty = await refused(client, "edit_file", path="a.txt", old_string="", new_string="y")
        assert empty == "Error: old_string cannot be empty. Provide the exact text to replace."
        missing = await refused(client, "edit_file", path="no.txt", old_string="a", new_string="b")
        assert missing == "Error: cannot edit 'no.txt': not found"
        replaced = await ok(
            client, "edit_file", path="a.txt", old_string="x", new_string="y", replace_all=True
        )
        assert replaced.startswith("Successfully replaced 2 instance(s)")


async def test_ls_glob_and_grep(server: MCPServer[Any]) -> None:
    async with connect(server) as client:
        await ok(client, "write_file", path="src/app.py", content="import os\nprint('hello')\n")
        await ok(client, "write_file", path="src/sub/util.py", content="HELLO = 1\n")
        await ok(client, "write_file", path="notes.md", content="hello notes\n")
        assert await ok(client, "ls", path="src") == "src/app.py\nsrc/sub/"
        assert await ok(client, "glob", pattern="**/*.py") == "src/app.py\nsrc/sub/util.py"
        assert await ok(client, "glob", pattern="*.rs") == "No files match '*.rs'"
        found = await ok(client, "grep", pattern="hello", path="src", ignore_case=True)
        assert found.split("\n") == ["src/app.py:2:print('hello')", "src/sub/util.py:1:HELLO = 1"]
        only_md = await ok(client, "grep", pattern="hel+o", glob="*.md", regex=True)
        assert only_md.endswith("notes.md:1:hello notes")
        assert await ok(client, "grep", pattern="absent") == "No matches for 'absent'"
        assert await refused(client, "ls", path="nowhere") == "Error: cannot list 'nowhere': not found"


async def test_odd_paths_are_names_never_shell(server: MCPServer[Any], sandbox: BaseSandbox) -> None:
    async with connect(server) as client:
        for name in ODD_NAMES:
            await ok(client, "write_file", path=f"odd/{name}", content="body\n")
            assert await ok(client, "read_file", path=f"odd/{name}") == "     1\tbody"
            await ok(client, "edit_file", path=f"odd/{name}", old_string="body", new_string="done")
        listed = await ok(client, "ls", path="odd")
        found = await ok(client, "grep", pattern="done", path="odd")
    assert sorted(entry.name for entry in sandbox.ls("odd")) == sorted(ODD_NAMES)
    assert listed.count("odd/") == len(ODD_NAMES)
    assert found.count(":1:done") == len(ODD_NAMES)
    assert not any(entry.name == "pwned" for entry in sandbox.ls(".") + sandbox.ls("odd"))


@pytest.mark.parametrize(
    ("tool", "arguments", "prefix"),
    [
        ("read_file", {"path": "a.txt", "offset": "x"}, "Error executing tool read_file: 1 validation error"),
        ("read_file", {"path": "a.txt", "limit": 0}, "Error executing tool read_file: 1 validation error"),
        ("execute", {"command": "true", "timeout": -1}, "Error executing tool execute: 1 validation error"),
        ("write_file", {"path": "a.txt"}, "Error executing tool write_file: 1 validation error"),
        ("no_such_tool", {}, "Unknown tool: no_such_tool"),
    ],
)
async def test_bad_arguments_are_error_results(
    server: MCPServer[Any], tool: str, arguments: Any, prefix: str
) -> None:
    """Checked by the MCP SDK before a tool runs: its own texts, as error results."""
    async with connect(server) as client:
        text, failed = await call(client, tool, **arguments)
    assert failed
    assert text.startswith(prefix)


async def test_files_are_resources(server: MCPServer[Any], sandbox: BaseSandbox) -> None:
    sandbox.write("page.html", "<p>hi</p>")
    sandbox.write("image.png", PNG_START)
    workspace = sandbox.execute("pwd").output.strip()
    async with connect(server) as client:
        (page,) = (await client.read_resource("sandbox://page.html")).contents
        (image,) = (await client.read_resource(f"sandbox://{workspace}/image.png")).contents
        with pytest.raises(MCPError, match=re.escape("Error: cannot read 'missing.txt': not found")):
            await client.read_resource("sandbox://missing.txt")
    assert isinstance(page, types.TextResourceContents)
    assert (page.text, page.mime_type) == ("<p>hi</p>", "text/html")
    assert isinstance(image, types.BlobResourceContents)
    assert (base64.b64decode(image.blob), image.mime_type) == (PNG_START, "image/png")


async def test_upload_and_download_inside_the_roots(server: MCPServer[Any], client_dir: Path) -> None:
    (client_dir / "in.bin").write_bytes(bytes(range(256)) * 10)
    async with connect(server, [client_dir]) as client:
        await ok(client, "upload", local_path=str(client_dir / "in.bin"), sandbox_path="up/in.bin")
        done = await ok(client, "download", sandbox_path="up/in.bin", local_path=str(client_dir / "out.bin"))
        assert done.endswith("(2560 bytes)")
        again = await refused(
            client, "download", sandbox_path="up/in.bin", local_path=str(client_dir / "out.bin")
        )
        assert again.startswith(f"Error: cannot write '{client_dir / 'out.bin'}': it already exists.")
        await ok(
            client,
            "download",
            sandbox_path="up/in.bin",
            local_path=str(client_dir / "out.bin"),
            overwrite=True,
        )
        missing = await refused(client, "download", sandbox_path="nope", local_path=str(client_dir / "n"))
        assert missing == "Error: cannot download 'nope': not found"
        no_source = await refused(client, "upload", local_path=str(client_dir / "none"), sandbox_path="x")
        assert no_source == f"Error: cannot read '{client_dir / 'none'}': No such file or directory"
    assert (client_dir / "out.bin").read_bytes() == (client_dir / "in.bin").read_bytes()


async def test_transfers_outside_the_roots_are_refused(
    server: MCPServer[Any], client_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (client_dir / "escape").symlink_to(outside)
    async with connect(server, [client_dir]) as client:
        for local in (
            outside / "secret.txt",
            client_dir / "escape" / "secret.txt",
            client_dir / ".." / "outside",
        ):
            text = await refused(client, "upload", local_path=str(local), sandbox_path="x")
            assert text == f"Error: the local path '{local}' is outside the client's roots ({client_dir})"
        await ok(client, "write_file", path="loot.txt", content="loot")
        for local in (outside / "loot.txt", client_dir / "escape" / "loot.txt"):
            await refused(client, "download", sandbox_path="loot.txt", local_path=str(local))
        relative = await refused(client, "upload", local_path="in.bin", sandbox_path="x")
        assert relative == "Error: invalid local path 'in.bin': it must be absolute, without NUL"
    async with connect(server) as client:  # declares no roots
        text = await refused(client, "upload", local_path=str(client_dir / "in.bin"), sandbox_path="x")
        assert "the client declared no roots" in text
    assert sorted(path.name for path in outside.iterdir()) == ["secret.txt"]


async def test_handshake_era_clients_are_served(server: MCPServer[Any], client_dir: Path) -> None:
    """A client of the 2025 protocol: roots come from a ``roots/list`` request mid-call."""
    (client_dir / "a.txt").write_text("from the client\n")
    reports: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append(message)

    async with connect(server, [client_dir], mode="legacy") as client:
        assert client.protocol_version < "2026"
        await ok(client, "upload", local_path=str(client_dir / "a.txt"), sandbox_path="a.txt")
        result = await client.call_tool("execute", {"command": "cat a.txt"}, progress_callback=on_progress)
    assert isinstance(text := result.content[0], types.TextContent)
    assert text.text.startswith("from the client\n")
    assert reports[0] == "started"
    assert reports[-1] == "finished"


async def test_an_upload_of_a_fifo_is_refused_without_blocking(
    server: MCPServer[Any], client_dir: Path
) -> None:
    """A FIFO under a root waits for a writer forever when opened to read:
    the server must refuse it, not stall (and with it every other tool).

    Were the server to block, it would block its own event loop, where no
    timeout of the test can fire: a watchdog thread then opens the FIFO for
    writing once the call has not come back in time (a bounded wait), so the
    blocked read ends, at end of file, and the test fails instead of hanging."""
    fifo = client_dir / "pipe"
    os.mkfifo(fifo)
    (client_dir / "link").symlink_to(fifo)
    answered = threading.Event()

    def unblock() -> None:
        if not answered.wait(30):
            with contextlib.suppress(OSError):  # ENXIO: nobody is reading it
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    watchdog = threading.Thread(target=unblock, daemon=True)
    watchdog.start()
    try:
        async with connect(server, [client_dir]) as client:
            for name in ("pipe", "link"):  # a link is resolved, then opened without following
                text = await refused(client, "upload", local_path=str(client_dir / name), sandbox_path="x")
                assert text == f"Error: cannot read '{client_dir / name}': not a regular file"
            await ok(client, "ls")  # the server still answers
    finally:
        answered.set()
        watchdog.join()


async def test_a_background_process_is_started_fed_read_and_killed(server: MCPServer[Any]) -> None:
    """A dev-server-like loop: started, given input, its output read from an
    offset on, then killed; the server says its version."""
    async with connect(server) as client:
        assert client.server_info is not None and client.server_info.version
        loop = "while read -r line; do echo got-$line; done"
        pid = int((await ok(client, "start_process", command=loop)).removeprefix("Started process "))
        await ok(client, "write_process_stdin", pid=pid, data="one\n")
        page = await until_output(client, pid, 0, "got-one")
        assert "still running" in page
        offset = int(re.findall(r"next_offset=(\d+)", page)[0])
        await ok(client, "write_process_stdin", pid=pid, data="two\n", close=True)
        page = await until_output(client, pid, offset, "exited with code 0")
        assert page.startswith("got-two\n") and "got-one" not in page
        sleeper = int(
            (await ok(client, "start_process", command="sleep 600")).removeprefix("Started process ")
        )
        assert (await ok(client, "kill_process", pid=sleeper)).endswith("exit code 143")
        assert "ended" in await refused(client, "write_process_stdin", pid=pid, data="late")


async def until_output(client: Any, pid: int, since: int, wanted: str) -> str:
    """``read_process_output`` from ``since`` until its text holds ``wanted`` (bounded)."""
    deadline = time.monotonic() + 60
    while wanted not in (page := await ok(client, "read_process_output", pid=pid, since=since)):
        assert time.monotonic() < deadline, page
        await anyio.sleep(0.1)
    return page
