"""The wire protocol's pieces and the token checks, without a connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from websockets.frames import Close

from sandbox_sdk import errors, wire
from sandbox_sdk.providers.remote._errors import closed, from_response
from sandbox_sdk.runner.cli import read_tokens
from sandbox_sdk.wire import security


def test_frames_carry_the_version_and_refuse_others() -> None:
    frame = wire.decode(wire.encode("cancel", id=7))
    assert frame == {"v": wire.VERSION, "type": "cancel", "id": 7}
    assert wire.field(frame, "id", int) == 7
    for bad in ('{"v": 2, "type": "hello"}', "[1, 2]", "not json", b"binary", '{"v": 1}'):
        with pytest.raises(wire.ProtocolError):
            wire.decode(bad)
    with pytest.raises(wire.ProtocolError, match="id must be int"):
        wire.field({"type": "cancel", "id": True}, "id", int)


def test_bodies_are_reassembled_from_interleaved_chunks() -> None:
    bodies = wire.Bodies()
    first, second = bytes(range(256)) * 5000, b"x" * (wire.CHUNK_BYTES + 1)
    bodies.expect(1, len(first))
    bodies.expect(2, len(second))
    chunks = list(zip(wire.chunks(1, first), wire.chunks(2, second), strict=False))
    assert bodies.feed(chunks[0][0]) is None
    assert bodies.feed(chunks[0][1]) is None
    assert bodies.feed(chunks[1][1]) == (2, bytearray(second))
    assert 2 not in bodies
    for chunk in list(wire.chunks(1, first))[1:-1]:
        assert bodies.feed(chunk) is None
    assert bodies.feed(list(wire.chunks(1, first))[-1]) == (1, bytearray(first))


def test_bodies_refuse_what_was_not_announced_and_drop_refused_ones() -> None:
    bodies = wire.Bodies()
    with pytest.raises(wire.ProtocolError, match="no body expected"):
        bodies.feed(next(wire.chunks(5, b"abc")))
    bodies.expect(5, 2)
    with pytest.raises(wire.ProtocolError, match="more body than announced"):
        bodies.feed(next(wire.chunks(5, b"abc")))
    with pytest.raises(wire.ProtocolError, match="already"):
        bodies.expect(5, 2)
    bodies.expect(6, 3, keep=False)
    assert bodies.feed(next(wire.chunks(6, b"abc"))) == (6, None)
    with pytest.raises(wire.ProtocolError, match="at least one byte"):
        bodies.feed(b"\0\0\0\6")


def test_errors_travel_by_class_name() -> None:
    fields = wire.error_fields(errors.SandboxNotFoundError("no sandbox x"))
    assert fields == {"type": "SandboxNotFoundError", "message": "no sandbox x", "path": None}
    error = from_response(fields, "get")
    assert type(error) is errors.SandboxNotFoundError
    assert str(error) == "get: no sandbox x"
    assert wire.error_fields(KeyError("k"))["type"] == "SandboxRuntimeError"
    assert type(from_response({"type": "SystemExit", "message": "no"}, "get")) is errors.SandboxRuntimeError


def test_close_codes_become_typed_errors() -> None:
    assert isinstance(
        closed(Close(wire.CloseCode.UNAUTHORIZED, "unauthorized"), "x"), errors.AuthenticationError
    )
    too_big = closed(Close(wire.CloseCode.MESSAGE_TOO_BIG, ""), "x")
    assert isinstance(too_big, errors.ProviderUnavailableError)
    assert "larger than" in str(too_big)
    assert "lost" in str(closed(None, "x"))


def test_tokens_are_compared_by_digest() -> None:
    digest = security.token_digest("a" * 20)
    assert security.token_matches("a" * 20, digest)
    for presented in ("a" * 19, "b" * 20, None, 12, "a" * 20 + "\ud800"):
        assert not security.token_matches(presented, digest)
    with pytest.raises(errors.InvalidArgumentError, match="at least 16"):
        security.token_digest("short")
    assert security.is_loopback("127.0.0.2") and security.is_loopback("[::1]")
    assert not security.is_loopback("example.com") and not security.is_loopback("10.0.0.1")


def test_bodies_grow_as_they_come_and_hold_a_bounded_amount() -> None:
    bodies = wire.Bodies(max_open=2, max_buffered=wire.CHUNK_BYTES + 10)
    bodies.expect(1, 4 * 1024 * 1024)  # announced, not allocated
    assert bodies.buffered == 0
    assert bodies.feed(next(wire.chunks(1, bytes(wire.CHUNK_BYTES)))) is None
    assert bodies.buffered == wire.CHUNK_BYTES
    bodies.expect(2, 20)
    with pytest.raises(wire.ProtocolError, match="bodies under way"):
        bodies.expect(3, 5)
    with pytest.raises(wire.ProtocolError, match=f"more than {wire.CHUNK_BYTES + 10} bytes"):
        bodies.feed(next(wire.chunks(2, bytes(20))))
    bodies.drop(1)  # cancelled: what it held is freed, the rest of it counted and dropped
    assert bodies.buffered == 0
    assert bodies.feed(next(wire.chunks(2, bytes(20)))) == (2, bytearray(20))
    rest = 4 * 1024 * 1024 - wire.CHUNK_BYTES
    for chunk in wire.chunks(1, bytes(rest)):
        done = bodies.feed(chunk)
    assert done == (1, None)
    assert bodies.buffered == 0 and 1 not in bodies


def test_a_body_less_response_needs_no_id_prefix() -> None:
    assert list(wire.chunks(2**40, b"")) == []


def test_a_runner_and_its_clients_have_separate_tokens(tmp_path: Path) -> None:
    runner, client = "r" * 20, "c" * 20
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"# runner-id runner-token client-token\nlaptop {runner} {client}\n")
    assert read_tokens(tokens) == {"laptop": security.RunnerTokens(runner, client)}
    tokens.write_text(f"laptop {runner}\n")  # one token for both: refused, saying why
    with pytest.raises(errors.InvalidArgumentError, match="separate tokens"):
        read_tokens(tokens)
    with pytest.raises(errors.InvalidArgumentError, match="must differ"):
        security.RunnerTokens(runner, runner).check()
