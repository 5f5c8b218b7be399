"""Typed calls: the operation's name picks the script, each decoding mode its class,
and ``yield from`` hands the decoded reply back to the operation."""

from __future__ import annotations

import gc
import importlib
import os
import pickle
import random
import stat
import sys
import threading
import zlib
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sandbox_sdk import _calls, _kernel, errors, protocol
from sandbox_sdk._calls import GREP, LS, READ_CHUNK, RUN, Call, Script, ShellGrepCall, walk_key, walk_keys
from sandbox_sdk._session import Session
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import ExecuteResponse, FileInfo, GrepResult
from sandbox_sdk.remote import _runtime
from sandbox_sdk.remote.grep import walk_files

SCRIPTS = {name: value for name, value in vars(_calls).items() if isinstance(value, Script)}
#: Limits under which no call's command is too large.
ROOMY = Limits(max_command_bytes=10**6)


def frame(nonce: str, value: object, *blobs: bytes) -> ExecuteResponse:
    """The output a script prints for a successful call."""
    body = _runtime.b64(_runtime.json_dumps({"ok": True, "value": value}).encode())
    fields = [_runtime.FRAME_MARKER, nonce, body, *(_runtime.b64(blob) for blob in blobs)]
    return ExecuteResponse(output="noise\n" + " ".join(fields) + "\n", exit_code=0)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_declared_operation_is_run_by_the_module_that_defines_it(name: str) -> None:
    op = SCRIPTS[name].op
    module = importlib.import_module(f"sandbox_sdk.remote.{protocol.module_of(op)}")
    assert op in module.OPS


def test_operation_names_are_unique_and_every_one_is_found() -> None:
    table = protocol.modules_by_op()
    assert table["stat"] == "ls"
    assert table["abort"] == "write"
    assert table["run"] == "run"
    assert table["follow"] == "proc"
    # ``serve`` is not a call: a command that launches the operation server carries it (protocol/command.py)
    assert {SCRIPTS[name].op for name in SCRIPTS} == set(table) - {"serve"}


def test_an_unknown_operation_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="no in-sandbox script"):
        Script("no_such_op")


def test_a_script_call_names_its_operation_once() -> None:
    call = LS({"path": "Lg=="}, what="ls")
    command, nonce = call.command(ROOMY, Session("/tmp"))
    assert call.payload == {"op": "ls", "path": "Lg=="}
    assert protocol.shipped("ls").name in command
    assert nonce in command


def test_yield_from_a_call_returns_its_decoded_reply() -> None:
    def operation() -> Generator[Call[Any], Any, tuple[int | None, int]]:
        value, blobs = yield from LS({"path": "Lg=="}, what="ls")
        return value["next"], len(blobs)

    nonces: list[str] = []

    def perform(call: Call[Any]) -> Any:
        _, nonce = call.command(ROOMY, Session("/tmp"))
        nonces.append(nonce)
        return call.decode(frame(nonce, {"next": 7}, b"x"), nonce)

    assert _kernel.run(operation(), perform) == (7, 1)
    assert len(nonces) == 1


def test_a_lazy_call_leaves_its_blobs_encoded_until_asked() -> None:
    call = READ_CHUNK.lazy({"path": "Lg==", "offset": 0, "length": 4}, what="read")
    (value, (blob,)) = call.decode(frame("n", {"size": 4}, b"data"), "n")
    assert value == {"size": 4}
    assert isinstance(blob, protocol.LazyBlob)
    assert blob.decode() == b"data"


def test_a_script_call_decodes_errors_into_typed_exceptions() -> None:
    body = _runtime.b64(_runtime.json_dumps({"ok": False, "error": {"code": 81, "message": "gone"}}).encode())
    response = ExecuteResponse(output=f"{_runtime.FRAME_MARKER} n {body}\n", exit_code=81)
    with pytest.raises(errors.SandboxFileNotFoundError):
        LS({}, what="ls").decode(response, "n")


def test_user_commands_keep_their_own_timeout_and_script_calls_get_the_operation_timeout() -> None:
    assert RUN.command({}, what="run", timeout=None).timeout_or(120.0) is None
    assert RUN.command({}, what="run", timeout=5).timeout_or(120.0) == 5
    assert LS({}, what="ls").timeout_or(120.0) == 120.0
    assert LS({}, what="ls", timeout=3).timeout_or(120.0) == 3


def test_a_command_call_cut_by_the_provider_timeout_is_none() -> None:
    """A user's command the provider killed at its timeout has no frame to
    report; ``run`` turns the ``None`` into a timed-out result."""
    response = ExecuteResponse(output="partial", exit_code=124, timed_out=True)
    assert RUN.command({}, what="run", timeout=1).decode(response, "n") is None


def test_an_oversized_script_command_is_refused_before_it_is_sent() -> None:
    with pytest.raises(errors.SandboxRuntimeError, match="exceeds max_command_bytes"):
        LS({"path": "Lg=="}, [b"x" * 10_000], what="ls").command(
            Limits(max_command_bytes=5_000), Session("/tmp")
        )


def test_the_client_reads_the_frame_marker_from_the_runtime() -> None:
    assert protocol.FRAME_MARKER is _runtime.FRAME_MARKER
    assert protocol.NO_PYTHON_MARKER.startswith(_runtime.FRAME_MARKER)


@pytest.mark.parametrize("module", sorted(set(protocol.modules_by_op().values())))
def test_reply_declarations_are_not_shipped(module: str) -> None:
    assert "TypedDict" not in protocol.shipped_source(module)


def listed(paths: list[bytes]) -> list[FileInfo]:
    """The script's listing of ``paths`` decoded by the client."""
    return _calls.listing(_runtime.listing([(path, os.lstat(path)) for path in paths]))


def validated(path: bytes) -> FileInfo:
    st = os.lstat(path)
    kind = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink"}.get(
        stat.S_IFMT(st.st_mode), "other"
    )
    text = os.fsdecode(path)
    return FileInfo.model_validate(
        {"path": text, "name": os.path.basename(text), "type": kind, "size": st.st_size, "mtime": st.st_mtime,
         "mode": stat.S_IMODE(st.st_mode)}
    )  # fmt: skip


def test_a_listing_decodes_to_entries_that_behave_as_validated_ones(tmp_path: Path) -> None:
    """Entries decoded from a listing: every behaviour of the model
    (equality, hash, repr, dump, fields set, copy, pickle) is that of one
    made from the same values."""
    root = bytes(tmp_path)
    paths = [os.path.join(root, name) for name in (b"f.txt", b"bad-\xff", b"dir", b"link", b"fifo")]
    Path(os.fsdecode(paths[0])).write_bytes(b"12345")
    Path(os.fsdecode(paths[1])).write_bytes(b"")
    os.mkdir(paths[2], 0o751)
    os.symlink(b"f.txt", paths[3])
    os.mkfifo(paths[4])
    for fast, slow in zip(listed(paths), [validated(p) for p in paths], strict=True):
        assert (fast, hash(fast), repr(fast), fast.model_dump()) == (
            slow,
            hash(slow),
            repr(slow),
            slow.model_dump(),
        )
        assert fast.model_fields_set == slow.model_fields_set
        assert pickle.loads(pickle.dumps(fast)) == slow
        assert fast.model_copy(update={"size": 7}) == slow.model_copy(update={"size": 7})
        assert FileInfo.model_validate(fast.model_dump()) == fast
        with pytest.raises(ValidationError):
            fast.size = 1  # frozen, as a validated one
    assert listed([]) == []


@pytest.mark.parametrize("collecting", [True, False])
def test_no_collection_runs_while_a_listing_is_built(tmp_path: Path, collecting: bool) -> None:
    """10,000 entries are built with the garbage collector paused (so none
    is promoted to its oldest generation); its state is restored after."""
    if sys.gettrace() is not None:
        pytest.skip(
            "a tracer (scripts/test's coverage) makes a frame object per call: collections the "
            "code does not cause (tests/test_fast_lane.py runs this test untraced)"
        )
    path = bytes(tmp_path)
    packed = _runtime.listing([(path, os.lstat(path))] * 10_000)
    collections: list[str] = []
    here = threading.get_ident()

    def count(phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() == here:  # not one another thread (pytest-xdist's, say) caused
            collections.append(phase)

    was = gc.isenabled()
    gc.callbacks.append(count)
    try:
        (gc.enable if collecting else gc.disable)()
        entries = _calls.listing(packed)
        assert gc.isenabled() is collecting
    finally:
        gc.callbacks.remove(count)
        (gc.enable if was else gc.disable)()
    assert len(entries) == 10_000 and collections == []


def test_a_listing_carries_mtime_exactly(tmp_path: Path) -> None:
    """``st_mtime_ns`` travels; the client computes ``st_mtime`` from it as
    CPython does, to the last bit, before and after the epoch."""
    path = bytes(tmp_path / "f")
    Path(os.fsdecode(path)).touch()
    rng = random.Random(3)
    for ns in [
        0,
        1,
        -1,
        10**9 - 1,
        -(10**9) + 1,
        *(rng.randrange(-(4 * 10**18), 4 * 10**18) for _ in range(200)),
    ]:
        os.utime(path, ns=(ns, ns))
        assert listed([path])[0].mtime == os.lstat(path).st_mtime


@pytest.mark.parametrize(
    "packed",
    [
        b"not zlib",
        zlib.compress(b'{"sizes":[1],"mtimes":[1],"modes":[1]}'),  # no paths line
        zlib.compress(b'{"sizes":[1,2],"mtimes":[1,2],"modes":[1,2]}\na'),  # fewer paths than sizes
        zlib.compress(b'{"sizes":["1"],"mtimes":[1],"modes":[1]}\na'),
        zlib.compress(b'{"sizes":[1.5],"mtimes":[1],"modes":[1]}\na'),
        zlib.compress(b'{"sizes":[true],"mtimes":[1],"modes":[1]}\na'),
        zlib.compress(b'{"sizes":[1],"mtimes":[null],"modes":[1]}\na'),
        zlib.compress(b'{"sizes":[1],"mtimes":[1]}\na'),
        zlib.compress(b"[1]\na"),
        zlib.compress(b'{"sizes":1,"mtimes":[1],"modes":[1]}\na'),
    ],
)
def test_a_malformed_listing_is_a_runtime_error(packed: bytes) -> None:
    with pytest.raises(errors.SandboxRuntimeError, match="malformed listing"):
        _calls.listing(packed)


def test_walk_key_sorts_as_the_script_walks(tmp_path: Path) -> None:
    """GNU grep's records are put in walk order by ``walk_key`` alone: names
    that begin others, bytes 0x01 and 0xff, files beside directories."""
    names = [b"a", b"ab", b"a b", b"b", b"\x01", b"\xff", b"a\xff", b"\xffa", b"z.txt", b"abc"]
    made: list[bytes] = []

    def fill(rel: bytes, depth: int) -> None:
        dirs = names[depth % 2 :: 2]
        for name in names[1 - depth % 2 :: 2] + [d + b"-" for d in dirs]:
            made.append(os.path.join(rel, name))
            (tmp_path / os.fsdecode(made[-1])).touch()
        for name in dirs if depth < 2 else []:
            (tmp_path / os.fsdecode(os.path.join(rel, name))).mkdir()
            fill(os.path.join(rel, name), depth + 1)

    fill(b"", 0)
    walked = [rel for _, rel in walk_files(os.fsencode(tmp_path), frozenset()) if rel is not None]
    assert sorted(walked) == sorted(made)
    assert sorted(walked, key=walk_key) == walked


def test_walk_keys_are_walk_key_for_one_directory_at_once() -> None:
    """The translation of many names at once gives each name's own key,
    with the bytes that part them (0xf5, 0xff after translation) in names."""
    rng = random.Random(5)
    alphabet = [b"a", b"b", b"\x01", b"\x0b", b"\xf5", b"\xff", b"\xfe", b".", b" "]
    for _ in range(200):
        names = [b"".join(rng.choices(alphabet, k=rng.randint(1, 4))) for _ in range(rng.randint(1, 8))]
        assert walk_keys(names) == [walk_key(name) for name in names]
    nested = [b"a/b", b"a", b"b/c/d"]
    assert walk_keys(nested) == [walk_key(name) for name in nested] and walk_keys([]) == []


def shell_grep(root: bytes, max_matches: int = 1000, budget: int = 10**6) -> ShellGrepCall:
    args = {"pattern": "bg==", "path": "", "glob": None, "max_matches": max_matches,
            "max_line_bytes": 1000, "budget": budget}  # fmt: skip
    return ShellGrepCall(GREP(args, what="grep"), "grep", b"n", root, None)


@pytest.mark.parametrize("cap", [1000, 2])
def test_a_result_from_grep_records_behaves_as_a_validated_one(cap: int) -> None:
    """GNU grep's records become a result, cut at the cap or not: in walk
    order, names joined as the script joins them, and every behaviour of a
    result made from the same values."""
    records = b"d/b\x001:n one\nd/b\x003:n \xff\nd/a/x\x002:an\nd/c\x007:n\n"  # grep cuts "d//" to "d/"
    result = shell_grep(b"d//", max_matches=cap)._search(records)
    assert result is not None
    validated = GrepResult.model_validate(result.model_dump())
    assert (result, repr(result), result.model_dump()) == (validated, repr(validated), validated.model_dump())
    assert [hash(m) for m in result.matches] == [hash(m) for m in validated.matches]
    assert result.model_fields_set == validated.model_fields_set
    assert pickle.loads(pickle.dumps(result)) == validated
    expected = [("d//c", 7), ("d//b", 1), ("d//b", 3), ("d//a/x", 2)][:cap]
    assert [(m.path, m.line_number) for m in result.matches] == expected
    assert [m.line for m in result.matches] == ["n", "n one", "n \ufffd", "an"][:cap]
    assert result.truncated == (cap == 2)


@pytest.mark.parametrize(
    "records",
    [
        b"d/a\x001:n\n" + b"grep: d/z: binary file matches\n",  # a message after the records
        b"grep: d/z: binary file matches\n" + b"d/a\x001:n\n",  # before: it joins a name
        b"d/a\x001:n\nd/a\nb\x002:n\n",  # a name with a newline
        b"d/a\x001:n",  # cut
        b"e/a\x001:n\n",  # not below the root
        b"d/\x001:n\n",  # the root's own name, a directory
        b"d/a\x00x:n\n",  # no line number
        b"d/a\x001:n\x00\n",  # a NUL in a line
        b"d/a\x001:li" + b"grep: d/z: binary file matches\n" + b"ne\n",  # a message inside a record
    ],
)
def test_what_is_not_grep_records_is_not_taken(records: bytes) -> None:
    assert shell_grep(b"d")._search(records) is None


def test_a_server_launch_that_would_not_fit_is_left_to_a_command_with_room() -> None:
    """The operation server's launch (docs/protocol.md) rides on a command
    only where it fits under the budget; else a later command takes it."""
    server = protocol.shipped("server")
    launch = f" {server.name} {server.crc} "  # the bootstrap's arguments in a launch's first line
    call = LS({"path": "Lg==", "start": 0}, [b"x" * 10_000], what="ls")
    plain, _ = call.command(ROOMY, Session("/tmp"))
    session = Session("/tmp")
    session.server_wanted = True
    tight, _ = call.command(Limits(max_command_bytes=len(plain) + 100), session)
    assert launch not in tight and session.server_wanted and not session.launches
    roomy, nonce = call.command(ROOMY, session)
    assert launch in roomy and not session.server_wanted and session.launches == {nonce}
