"""A reply whose frame is sound but whose value is not of its script's shape
(a sandbox answering for the script: it holds the command, nonce included):
every transfer reports it as a typed error, per item where the contract says
so, never an ``AttributeError`` or ``KeyError``."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox_sdk import errors, protocol
from sandbox_sdk.models import ExecuteResponse, FileUploadResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import LimitedSandbox

from .transfer_helpers import SMALL_COMMAND_BYTES, SMALL_OUTPUT_BYTES, leftovers, scratch_entries

#: Values a reply is given instead of its own: wrong types at the top, and
#: batches' items of the wrong type, count or error.
GARBLED: list[Any] = [
    "x",
    None,
    [],
    {},
    {"items": "x"},
    {"items": ["x"]},
    {"items": []},
    {"items": [{"error": "x"}] * 3},
    {"items": [{"error": {"code": 0}}] * 3},
    {"items": [{"blob": 7, "sha256": "0"}] * 3},
    {"size": "x", "landed": "x"},
]
#: Packed into one ``put_many`` / ``get_many``, then one staged or chunked.
SMALL, LARGE = b"small file\n", os.urandom(40_000)


class Garbling(LimitedSandbox):
    """Runs each command for real, then replaces the value of its successful
    result frame with ``value`` (on every call, or only on call ``only``,
    1-based), leaving the frame well-formed."""

    def __init__(self, inner: LocalSandbox, value: Any, only: int | None = None) -> None:
        super().__init__(inner, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES)
        scratch = inner.root_dir.parent / "scratch"  # checked for leftovers too
        scratch.mkdir(exist_ok=True)
        self.scratch_dir = str(scratch)
        self.value = value
        self.only = only
        self.garbled = 0

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        number = self._count()
        response = self._run(command, timeout)
        if self.only not in (None, number):
            return response
        output = response.output
        start = output.rfind(f"{protocol.FRAME_MARKER} ")
        end = output.find("\n", start)
        if start < 0 or end < 0:  # not a script's reply (a chunk appended by the shell)
            return response
        fields = output[start:end].split(" ")
        body = json.loads(base64.b64decode(fields[2]))
        if body.get("ok") is not True:
            return response
        body["value"] = self.value
        fields[2] = base64.b64encode(json.dumps(body).encode()).decode()
        self.garbled += 1
        return response.model_copy(update={"output": output[:start] + " ".join(fields) + output[end:]})


def upload_items() -> list[tuple[str, Any]]:
    return [("a.txt", SMALL), ("b.txt", io.BytesIO(SMALL)), ("big.bin", LARGE)]


def check_uploads(results: list[FileUploadResponse], root: Path) -> None:
    """One response per item, in order, each a success that landed whole (a
    reply the client need not read, such as the staged commit's) or a failure
    saying the reply was malformed; nothing staged left behind."""
    assert [result.path for result in results] == ["a.txt", "b.txt", "big.bin"]
    for result in results:
        if result.error is None:
            assert (root / result.path).read_bytes() == (LARGE if result.path == "big.bin" else SMALL)
        else:
            assert "malformed" in result.error
    assert results[0].error is not None  # the put_many reply is always read
    assert leftovers(root) == []
    assert scratch_entries(root.parent / "scratch") == []  # no upload link either


@pytest.mark.parametrize("value", GARBLED, ids=repr)
def test_upload_files_reports_a_malformed_reply_per_item(local: LocalSandbox, root: Path, value: Any) -> None:
    sandbox = Garbling(local, value)
    check_uploads(sandbox.upload_files(upload_items()), root)
    assert sandbox.garbled


@pytest.mark.parametrize("value", ["x", None, {"items": ["x"]}], ids=repr)
def test_async_upload_files_reports_a_malformed_reply_per_item(
    local: LocalSandbox, root: Path, value: Any
) -> None:
    check_uploads(anyio.run(Garbling(local, value).aupload_files, upload_items()), root)


def test_a_malformed_put_many_reply_is_settled_like_a_lost_one(local: LocalSandbox, root: Path) -> None:
    """Only the ``put_many`` reply garbled: the files landed, and asking says so."""
    sandbox = Garbling(local, {"items": ["x"]}, only=1)  # the settle_many that follows is true
    results = sandbox.upload_files([("a.txt", SMALL), ("b.txt", SMALL)])
    assert sandbox.garbled == 1
    assert [result.error for result in results] == [None, None]
    assert (root / "a.txt").read_bytes() == (root / "b.txt").read_bytes() == SMALL
    assert leftovers(root) == []
    assert scratch_entries(root.parent / "scratch") == []  # no upload link either


@pytest.mark.parametrize("value", GARBLED, ids=repr)
def test_download_files_reports_a_malformed_reply_per_item(
    local: LocalSandbox, root: Path, value: Any
) -> None:
    (root / "a.txt").write_bytes(SMALL)
    (root / "big.bin").write_bytes(LARGE)
    sandbox = Garbling(local, value)
    results = sandbox.download_files(["a.txt", "big.bin"])
    assert [result.path for result in results] == ["a.txt", "big.bin"]
    for result in results:
        assert result.content is None
        assert result.error is not None and "malformed" in result.error


@pytest.mark.parametrize("value", ["x", None, {}, {"size": "x"}, {"size": -1}], ids=repr)
def test_download_file_raises_a_malformed_reply_as_a_typed_error(
    local: LocalSandbox, root: Path, tmp_path: Path, value: Any
) -> None:
    (root / "big.bin").write_bytes(LARGE)
    with pytest.raises(errors.SandboxRuntimeError, match="malformed"):
        Garbling(local, value).download_file("big.bin", tmp_path / "out.bin")
    assert not (tmp_path / "out.bin").exists()
    assert list(tmp_path.glob("*.part")) == []


@pytest.mark.parametrize(
    "error",
    [{"code": 0}, {"code": "x"}, {"code": 81, "path": "not base64!"}, {"code": 89, "count": "x"}, {}],
    ids=repr,
)
def test_a_malformed_script_error_is_a_runtime_error(error: dict[str, Any]) -> None:
    assert isinstance(protocol.error_from(error, "upload"), errors.SandboxRuntimeError)
