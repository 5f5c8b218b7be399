"""Unit tests of the in-sandbox scripts' pure helpers, imported directly."""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import posixpath
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandbox_sdk.remote import _runtime, grep, proc, read


@pytest.mark.parametrize(
    ("pattern", "expanded"),
    [
        (b"a{b,c}d", [b"abd", b"acd"]),
        (b"{a,b}{1,2}", [b"a1", b"a2", b"b1", b"b2"]),
        (b"x{a,{b,c}}", [b"xa", b"xb", b"xc"]),
        (b"no-braces", [b"no-braces"]),
        (b"{single}", [b"{single}"]),
    ],
)
def test_expand_braces(pattern: bytes, expanded: list[bytes]) -> None:
    assert _runtime.expand_braces(pattern) == expanded


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        (b"*.py", [b"a.py", b".py"], [b"a/b.py", b"a.pyc"]),
        (b"?.txt", [b"a.txt"], [b"ab.txt", b"/.txt"]),
        (b"[!a]*", [b"b", b"bz"], [b"a", b"ab"]),
        (b"[a-c]", [b"b"], [b"d"]),
        (b"**/*.py", [b"a.py", b"x/y/a.py"], [b"x/a.pyc"]),
        (b"src/**", [b"src/a", b"src/a/b"], [b"src", b"other/a"]),
        (b"[unclosed", [b"[unclosed"], [b"u"]),
    ],
)
def test_glob_translation(pattern: bytes, matching: list[bytes], not_matching: list[bytes]) -> None:
    regex = _runtime.compile_glob(pattern)
    assert all(regex.match(m) for m in matching)
    assert not any(regex.match(m) for m in not_matching)


def test_a_segment_is_matched_as_its_regex_matches_it() -> None:
    """``name_matcher`` matches a star-only segment without ``re``; on every
    segment of up to five of ``a``, ``b`` and ``*`` and every name of up to
    five letters (and a few odd bytes) it answers as ``compile_glob`` does."""

    def words(letters: list[bytes], longest: int) -> list[bytes]:
        return [b"".join(w) for n in range(longest + 1) for w in itertools.product(letters, repeat=n)]

    names = [*words([b"a", b"b"], 5), b".a", b"a\xff", b"{a}", b"\\a", b"*", b"a*b"]
    segments = [*words([b"a", b"b", b"*"], 5)[1:], b".*", b"*\xff", b"{a}*", b"\\*", b"?a*", b"[ab]*"]
    for segment in segments:
        regex, matcher = _runtime.compile_glob(segment), _runtime.name_matcher(segment)
        assert [bool(matcher(n)) for n in names] == [bool(regex.match(n)) for n in names], segment


@pytest.mark.parametrize("pattern", [b"*.py", b"*.{txt,md}", b"{a,b*}", b"?.txt", b"[ab]*", b"**", b"x"])
def test_grep_matches_a_name_glob_as_its_regexes_do(pattern: bytes) -> None:
    """A glob without ``/`` selects the files whose name one of its brace
    alternatives matches, as each alternative's ``compile_glob`` regex says."""
    regexes = [_runtime.compile_glob(v) for v in _runtime.expand_braces(pattern)]
    selected = grep.file_filter(pattern)
    for rel in [b"a.py", b"d/a.py", b"a.txt", b"d/e/b.md", b"a", b"b", b"bz", b"x", b"d/x", b".py", b"a.pyc"]:
        name = rel.rsplit(b"/", 1)[-1]
        assert selected(rel) == any(r.match(name) for r in regexes), (pattern, rel)


def test_cut_utf8_never_splits_a_character() -> None:
    line = "aé€🙂".encode()
    for size in range(len(line) + 1):
        cut = read.cut_utf8(line, size)
        assert line.startswith(cut)
        cut.decode("utf-8")
        assert len(cut) >= size - 3


@pytest.mark.parametrize("data", [b"", b"a", b"ab", b"abc", bytes(range(256))])
def test_unb64_round_trips(data: bytes) -> None:
    text = base64.b64encode(data).decode()
    assert _runtime.unb64(text) == data
    assert _runtime.unb64(text.encode()) == data


@pytest.mark.parametrize("text", ["YQ", "YQ=", "Y*==", "YQ==YQ==", "Y=Q=", "YWJj\n", "YW Jj", "é==="])
def test_unb64_is_strict(text: str) -> None:
    """Even where ``binascii`` would skip stray characters (before Python 3.11)."""
    with pytest.raises(ValueError):
        _runtime.unb64(text)


JSON_VALUES: list[object] = [
    {"ok": True, "value": {"path": "L3RtcA==", "size": 12, "mtime": 1732312345.123456, "mode": 420}},
    {"ok": False, "error": {"code": 99, "message": 'é ☃ \\ " \n \t \x00 \udcff 🙂'}},
    [[], {}, [1, [2, [3]]], None, True, False, 0, -1, 10**30, 0.1, -2.5e-300, 1e300],
    "plain",
]


@pytest.mark.parametrize("value", JSON_VALUES)
def test_the_json_codec_matches_json(value: object) -> None:
    loads, dumps = _runtime.json_codec()
    assert dumps(value) == json.dumps(value, separators=(",", ":"))
    assert loads(dumps(value)) == value
    assert loads(dumps(value).encode()) == value


def test_the_json_codec_uses_the_accelerator_here() -> None:
    loads, _ = _runtime.json_codec()
    assert loads is not json.loads


@pytest.mark.parametrize("text", ["", "{", '{"a":1}x', "{'a':1}", "[1,]", "nul"])
def test_the_json_codec_refuses_what_json_refuses(text: str) -> None:
    loads, _ = _runtime.json_codec()
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads(text)


def test_the_json_codec_falls_back_to_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_json", None)  # as on an implementation without it
    loads, dumps = _runtime.json_codec()
    assert loads is json.loads
    assert dumps(JSON_VALUES[0]) == json.dumps(JSON_VALUES[0], separators=(",", ":"))


#: Paths for the ``os.path`` stand-ins: empty, relative, absolute, repeated
#: and trailing slashes, dots, and bytes that are not UTF-8.
PATHS = [
    b"", b"a", b"a/b", b"a/b/", b"/", b"//", b"///a", b"/a", b"/a/b//", b"a//b", b".", b"..", b"./a",
    b"a/./b/../c", b"\xff/\xfe", b"/\xff",
]  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_path_helpers_are_os_path_on_posix(path: bytes) -> None:
    assert _runtime.dirname(path) == posixpath.dirname(path)
    assert _runtime.basename(path) == posixpath.basename(path)
    for name in PATHS:
        assert _runtime.join(path, name) == posixpath.join(path, name), (path, name)


def test_path_predicates_are_os_path_on_posix(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "dir").mkdir()
    for name, target in [("link-file", "file"), ("link-dir", "dir"), ("dangling", "missing")]:
        (tmp_path / name).symlink_to(target)
    names = ["file", "dir", "link-file", "link-dir", "dangling", "missing", "file/under-a-file", "nul\0"]
    for name in names:
        path = os.fsencode(tmp_path / name)
        assert _runtime.is_dir(path) == os.path.isdir(path), name
        assert _runtime.is_file(path) == os.path.isfile(path), name
        assert _runtime.is_link(path) == os.path.islink(path), name
        assert _runtime.lexists(path) == os.path.lexists(path), name


@pytest.mark.parametrize("name", ["plain", "caf\u00e9", "undecodable-\udcff", "\udcfe\udcff"])
def test_fs_encoding_is_os_fsencode(name: str) -> None:
    assert _runtime.fsencode(name) == os.fsencode(name)
    assert _runtime.fsdecode(os.fsencode(name)) == os.fsdecode(os.fsencode(name)) == name


@pytest.mark.parametrize("path", [b"", b"a", b"ab", b"abc", b"dir/\xff name.txt"])
@pytest.mark.parametrize("number", [1, 99, 1234567])
@pytest.mark.parametrize("line", [b"", b"x" * 7, 'caf\u00e9 "quoted"'.encode()])
@pytest.mark.parametrize("cut", [True, False])
def test_a_matchs_reply_size_is_its_json_size(path: bytes, number: int, line: bytes, cut: bool) -> None:
    """What ``Search`` counts against the budget is what the reply takes."""
    encoded = [_runtime.b64(path), number, _runtime.b64(line), cut]
    assert grep.reply_size((path, number, line, cut)) == len(_runtime.json_dumps(encoded)) + 1


#: Lines where case folding is more than ASCII's (the Kelvin sign is a K to
#: ``re``, the long s an s, the dotless i an i), and lines that are not UTF-8.
FOLDING_LINES = [
    b"needle",
    b"NEEDLE in CAPS",
    b"nEeDlE",
    b"no match",
    "\u212aelvin".encode(),
    "\u017fubject".encode(),
    "d\u0131rty".encode(),
    "\u00c9t\u00e9".encode(),
    b"\xff\xfe needle",
    b"",
]
FOLDING_PATTERNS = [b"needle", b"KELVIN", b"SUBJECT", b"dirty", b"\xc3\xa9t\xc3\xa9", b"\xff", b"a b", b""]


@pytest.mark.parametrize("pattern", FOLDING_PATTERNS)
@pytest.mark.parametrize("fixed_strings", [True, False])
@pytest.mark.parametrize("ignore_case", [True, False])
def test_a_literal_pattern_matches_as_re_does(pattern: bytes, fixed_strings: bool, ignore_case: bool) -> None:
    """A fixed string, or a regex with no regex syntax, is matched without
    ``re`` where that gives ``re``'s answer (an ASCII pattern in an ASCII
    line regardless of case): every line answers as ``re`` would."""
    import re

    text = pattern.decode("utf-8", "surrogateescape")
    regex = re.compile(re.escape(text), re.IGNORECASE if ignore_case else 0)
    matches = grep.line_matcher(pattern, fixed_strings, ignore_case)
    for line in FOLDING_LINES:
        expected = regex.search(line.decode("utf-8", "surrogateescape")) is not None
        assert matches(line) == expected, line


@pytest.mark.parametrize(("pattern", "literal"), [(b"needle", True), (b"a-b: c,d", True), (b"ne+dle", False)])
def test_a_regex_without_regex_syntax_is_literal(pattern: bytes, literal: bool) -> None:
    assert grep.is_literal(pattern, False) is literal
    assert all(not grep.is_literal(bytes([c]), False) for c in grep.REGEX_SYNTAX)


@pytest.mark.parametrize("number", [signal.SIGKILL, signal.SIGTERM])
def test_a_kill_returns_the_exit_its_supervisor_records(tmp_path: Path, number: int) -> None:
    """A kill waits (up to ``settle``) for the supervisor to record the exit,
    so ``kill`` then ``poll`` reads it: SIGKILL as well as SIGTERM (a
    SIGKILL returned at once, and a loaded sandbox's next poll found the
    process running). Here a "supervisor" (this process, the sleeper's
    parent, with the record's lock) records the exit 0.3 s late."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    handle = "5a" * 16
    args = {
        "scratch": base64.b64encode(os.fsencode(tmp_path)).decode(),
        "owner": "tester",
        "pid": sleeper.pid,
        "handle": handle,
        "signal": int(number),
        "grace": 3.0 if number == signal.SIGTERM else 0.0,
        "settle": 5.0,
    }
    path = os.path.join(proc.records(args), handle.encode())
    os.mkdir(path, 0o700)
    lock = os.open(os.path.join(path, b"lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # held: the process is supervised
    meta = {
        "pid": sleeper.pid,
        "start": proc.start_time(sleeper.pid),
        "supervisor": os.getpid(),
        "supervisor_start": proc.start_time(os.getpid()),
    }
    proc.write_atomically(path, b"meta", json.dumps(meta).encode())

    def supervise() -> None:
        code = 128 - sleeper.wait()  # Popen: -N for death by signal N
        time.sleep(0.3)
        proc.write_atomically(path, b"status", b'{"exit_code": %d, "timed_out": false}' % code)

    supervisor = threading.Thread(target=supervise, daemon=True)
    supervisor.start()
    try:
        value, _ = proc.send_signal(args, [])
    finally:
        sleeper.kill()
        supervisor.join()
        os.close(lock)
    assert value == {"exit_code": 128 + number}
