"""Results larger than the output cap are paged or flagged, never cut mid-frame."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalSandbox

SMALL_OUTPUT = 16 * 1024
LONG_NAME = "n" * 200


def random_names(count: int) -> list[str]:
    """Long names that do not compress: listings travel compressed."""
    return sorted(secrets.token_hex(100) for _ in range(count))


@pytest.fixture
def small(tmp_path: Path) -> LocalSandbox:
    return LocalSandbox(tmp_path, max_output_bytes=SMALL_OUTPUT)


def test_ls_pages_a_directory_larger_than_one_output(small: LocalSandbox, tmp_path: Path) -> None:
    names = random_names(300)
    for name in names:
        (tmp_path / name).touch()
    assert [e.name for e in small.ls(".")] == names


def test_grep_flags_truncation_instead_of_failing(small: LocalSandbox, tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / f"{LONG_NAME}{i:02d}.txt").write_text(("hit " + "x" * 500 + "\n") * 5)
    result = small.grep("hit")
    assert result.truncated
    assert 0 < len(result.matches) < 200
    assert all(m.line.startswith("hit ") for m in result.matches)


def test_glob_flags_truncation_instead_of_failing(small: LocalSandbox, tmp_path: Path) -> None:
    for name in random_names(300):
        (tmp_path / name).touch()
    result = small.glob("*")
    assert result.truncated
    assert 0 < len(result.matches) < 300


def test_read_pages_a_file_larger_than_one_output(small: LocalSandbox, tmp_path: Path) -> None:
    lines = [f"{i:05d} " + "y" * 100 + "\n" for i in range(1000)]
    (tmp_path / "big.txt").write_text("".join(lines))
    offset, pages, text = 0, 0, ""
    while True:
        page = small.read("big.txt", offset=offset)
        text += page.content
        pages += 1
        if not page.has_more:
            break
        offset = page.end_line
    assert text == "".join(lines)
    assert pages > 1


def test_one_line_larger_than_one_output_is_cut_and_flagged(small: LocalSandbox, tmp_path: Path) -> None:
    (tmp_path / "wide.txt").write_text("é" * SMALL_OUTPUT + "\nnext\n")
    page = small.read("wide.txt")
    assert page.truncated
    assert page.has_more
    assert set(page.content) == {"é"}
