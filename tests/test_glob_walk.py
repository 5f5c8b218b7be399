"""The glob walk (remote/glob.py) against a brute-force oracle on a hostile
tree: every path of the tree is matched against each pattern segment by
segment with ``compile_glob``, as docs/protocol.md ("Glob patterns")
describes the rules. Random patterns, each with and without hidden names;
the limit's ``truncated`` is exact. In-process: hundreds of patterns in a
second."""

from __future__ import annotations

import functools
import itertools
import os
import random
from pathlib import Path

import pytest

from sandbox_sdk.remote import _runtime
from sandbox_sdk.remote.glob import Walker

#: Names that trip a matcher: hidden ones, brackets, stars and braces in the
#: name itself, bytes that are not UTF-8, a name like a class.
NAMES = [b"a.py", b"b.txt", b".hid.py", b"x].py", b"[ab]", b"*star", b"{a,b}", b"\xff\xfe.py", b"ab", b"ba"]
DIRS = [b"sub", b".git", b"deep", b"a.py.d"]
SEGMENTS = [
    b"**", b"**", b"*", b"*.py", b".*", b"?", b"a*", b"*a*b*", b"*b", b"[ab]*", b"[!a]*", b"[^.]*",
    b"x[]].py", b"sub", b".git", b"deep", b"a.py", b"{a,b}*", b"*.{py,txt}", b"\xff*", b"*\xfe*",
    b"[[]ab]", b"\\*star", b"?*?",
]  # fmt: skip


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("walk")
    for top in DIRS:
        for middle in [b"", *DIRS[:2]]:
            folder = os.path.join(bytes(root), top, middle)
            os.makedirs(folder, exist_ok=True)
            for name in NAMES:
                Path(os.fsdecode(os.path.join(folder, name))).write_bytes(b"x")
    for name in NAMES:
        Path(os.fsdecode(os.path.join(bytes(root), name))).write_bytes(b"x")
    os.symlink(b"a.py", os.path.join(bytes(root), b"link.py"))
    os.symlink(b"missing", os.path.join(bytes(root), b"dangling.py"))
    os.mkfifo(os.path.join(bytes(root), b"fifo.py"))
    return bytes(root)


@functools.cache
def every_path(root: bytes) -> dict[bytes, bool]:
    """Each path below ``root`` and whether it is a directory (no directory
    here is a symlink, so a walk not following links sees all of them)."""
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(top, name)
            found[os.path.relpath(full, root)] = name in dirs
    return found


def oracle(root: bytes, pattern: bytes, include_hidden: bool) -> set[bytes]:
    """Paths matching ``pattern``, one path at a time: ``**`` takes zero or
    more visible directories (at least one entry when it ends the pattern),
    a wildcard segment a name its regex matches (hidden only with
    ``include_hidden`` or a segment starting with a dot), a plain one itself."""
    paths = every_path(root)
    found = set()
    for variant in _runtime.expand_braces(pattern):
        segments = [s for s in variant.split(b"/") if s and s != b"."]
        for path, is_dir in paths.items():
            if variant.endswith(b"/") and not is_dir:
                continue
            if matches(path.split(b"/"), segments, include_hidden):
                found.add(path)
    return found


def matches(parts: list[bytes], segments: list[bytes], include_hidden: bool) -> bool:
    def visible(name: bytes, segment: bytes = b"") -> bool:
        return include_hidden or not name.startswith(b".") or segment.startswith(b".")

    if not segments:
        return not parts
    segment, rest = segments[0], segments[1:]
    if segment == b"**":
        if not rest:
            return bool(parts) and all(visible(p) for p in parts)
        return any(
            all(visible(p) for p in parts[:taken]) and matches(parts[taken:], rest, include_hidden)
            for taken in range(len(parts))  # the last part is not a directory ``**`` descends into
        )
    if not parts:
        return False
    name = parts[0]
    if any(ch in b"*?[{" for ch in segment):
        hit = _runtime.compile_glob(segment).match(name) is not None and visible(name, segment)
    else:
        hit = name == segment
    return hit and matches(parts[1:], rest, include_hidden)


def walked(root: bytes, pattern: bytes, include_hidden: bool, limit: int = 10_000) -> Walker:
    walker = Walker(root, include_hidden, limit)
    for variant in _runtime.expand_braces(pattern):
        walker.dirs_only = variant.endswith(b"/")
        walker.match(b"", [s for s in variant.split(b"/") if s and s != b"."])
    return walker


def random_patterns(count: int) -> list[bytes]:
    rng = random.Random(17)
    patterns = [
        b"/".join(rng.choices(SEGMENTS, k=rng.randint(1, 4))) + rng.choice([b"", b"", b"/"])
        for _ in range(count)
    ]
    return patterns + [b"/".join(pair) for pair in itertools.product(SEGMENTS, repeat=2)]


def test_the_walk_finds_what_the_oracle_finds(tree: bytes) -> None:
    compared = 0
    for pattern in random_patterns(300):
        for include_hidden in (False, True):
            walker = walked(tree, pattern, include_hidden)
            assert walker.found == oracle(tree, pattern, include_hidden), (pattern, include_hidden)
            assert not walker.truncated and not walker.unreadable
            compared += bool(walker.found)
    assert compared > 300  # most patterns match something


@pytest.mark.parametrize("pattern", [b"**/*.py", b"**", b"sub/**", b"*", b"{a,b}*", b"**/", b"*/*.py"])
def test_the_limit_keeps_that_many_and_truncated_is_exact(tree: bytes, pattern: bytes) -> None:
    everything = oracle(tree, pattern, False)
    assert len(everything) > 2
    for limit in (1, 2, len(everything) - 1, len(everything), len(everything) + 1):
        walker = walked(tree, pattern, False, limit)
        assert len(walker.found) == min(limit, len(everything))
        assert walker.found <= everything
        assert walker.truncated == (limit < len(everything)), limit
