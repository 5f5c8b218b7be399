"""A provider with a native ``aexecute``: every async operation uses it, and a worker
thread only to decode a reply too large to decode on the event loop."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from sandbox_sdk import _core
from sandbox_sdk._calls import Call
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse


class AsyncOnlySandbox(BaseSandbox):
    """Runs commands with asyncio subprocesses; its sync ``execute`` refuses."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def id(self) -> str:
        return "async-only"

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        raise AssertionError("the sync path must not be used")

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            proc = await asyncio.create_subprocess_exec(
                "bash", "-c", command, cwd=self.root,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                env={"PATH": "/usr/bin:/bin"},
            )  # fmt: skip
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
            return ExecuteResponse(output=out.decode("utf-8", "replace"), exit_code=proc.returncode)
        finally:
            self.in_flight -= 1


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    async def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker thread was used")

    monkeypatch.setattr(anyio.to_thread, "run_sync", refuse)
    yield


async def test_async_operations_use_native_aexecute(tmp_path: Path, no_threads: None) -> None:
    sandbox = AsyncOnlySandbox(tmp_path)
    await sandbox.awrite("a/f.txt", "one\ntwo\n")
    await sandbox.aedit("a/f.txt", "two", "three")
    assert (await sandbox.aread("a/f.txt")).content == "one\nthree\n"
    assert [e.name for e in await sandbox.als("a")] == ["f.txt"]
    assert len((await sandbox.agrep("three")).matches) == 1
    uploads = await sandbox.aupload_files([("b/1", b"x"), ("b/2", b"y")])
    assert [u.error for u in uploads] == [None, None]
    downloads = await sandbox.adownload_files(["b/1", "b/2", "b/missing"])
    assert [d.content for d in downloads] == [b"x", b"y", None]
    assert (await sandbox.arun("cat", stdin=b"piped")).output == "piped"
    assert sandbox.calls == 8  # one round trip per operation


async def test_async_chunked_transfer_runs_chunks_concurrently(tmp_path: Path, no_threads: None) -> None:
    sandbox = AsyncOnlySandbox(tmp_path)
    sandbox.limits = replace(sandbox.limits, max_output_bytes=64 * 1024)
    data = os.urandom(1024 * 1024)  # 1 MiB that does not compress: many chunks each way
    await sandbox.awrite("big.bin", data)
    assert sandbox.max_in_flight > 1
    sandbox.max_in_flight = 0
    assert await sandbox.aread_bytes("big.bin") == data
    assert sandbox.max_in_flight > 1
    assert (tmp_path / "big.bin").read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.bin"]


async def test_a_large_reply_is_decoded_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded_on: list[tuple[int, bool]] = []

    def recording(decode: object) -> object:
        def wrapper(self: Call[Any], response: ExecuteResponse, nonce: str) -> object:
            decoded_on.append((len(response.output), threading.current_thread() is threading.main_thread()))
            return decode(self, response, nonce)  # type: ignore[operator]

        return wrapper

    for call_type in _all_call_types():
        monkeypatch.setattr(call_type, "decode", recording(call_type.decode))
    sandbox = AsyncOnlySandbox(tmp_path)
    data = os.urandom(600 * 1024)  # one chunk, whose reply is over LOOP_DECODE_LIMIT as base64
    (tmp_path / "big.bin").write_bytes(data)
    (tmp_path / "small.txt").write_text("small")
    assert await sandbox.aread_bytes("big.bin") == data
    assert (await sandbox.aread("small.txt")).content == "small"
    large = [on_loop for size, on_loop in decoded_on if size > _core.LOOP_DECODE_LIMIT]
    small = [on_loop for size, on_loop in decoded_on if size <= _core.LOOP_DECODE_LIMIT]
    assert large and not any(large)  # the 600 KiB chunk's reply: on a worker thread
    assert small and all(small)


def _all_call_types() -> list[type[Call[Any]]]:
    """Every call class with a ``decode`` of its own."""
    found: list[type[Call[Any]]] = []
    pending: list[type[Call[Any]]] = list(Call.__subclasses__())
    while pending:
        call_type = pending.pop()
        pending.extend(call_type.__subclasses__())
        if "decode" in vars(call_type):
            found.append(call_type)
    return found
