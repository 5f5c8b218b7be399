"""Issue 13's permission findings as root: the local provider runs commands as
the host user, here root, whom the kernel lets write any file."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import BaseSandbox, errors
from sandbox_sdk.providers.local import LocalProvider, LocalSandbox
from sandbox_sdk.testing import provided_sandbox


@pytest.fixture(scope="module")
def sandbox(module_provider: LocalProvider) -> Iterator[BaseSandbox]:
    yield from provided_sandbox(module_provider, "hardening")


@pytest.mark.skipif(os.geteuid() != 0, reason="root's permission bypass")
def test_root_replaces_a_read_only_file_as_the_kernel_lets_it(sandbox: BaseSandbox, tmp_path: Path) -> None:
    target = tmp_path / "ro"
    target.write_text("old")
    target.chmod(0o444)
    sandbox.write(str(target), "new", overwrite=True)
    assert (target.read_text(), target.stat().st_mode & 0o777) == ("new", 0o444)


@pytest.fixture(scope="module")
def tree(sandbox: BaseSandbox) -> str:
    """Names a glob's classes and trailing slashes can trip on."""
    for name in ["x].py", "].py", "a.py", "b.py", "x[.py", "sub/c.py", "sub/deep/d.py", "other/e.py"]:
        sandbox.write(f"globs/{name}", name)
    return "globs"


def matched(sandbox: BaseSandbox, pattern: str, root: str) -> set[str]:
    return {os.path.relpath(m.path, root) for m in sandbox.glob(pattern, root).matches}


@pytest.mark.parametrize(
    "pattern",
    ["x[]].py", "[]].py", "[!]]*.py", "[]a].py", "x[.py", "[a-b].py", "[!a-b].py", "*/*.py", "**/*.py"],
)
def test_glob_classes_match_as_python_does(sandbox: BaseSandbox, tree: str, pattern: str) -> None:
    assert isinstance(sandbox, LocalSandbox)
    expected = set(glob.glob(pattern, root_dir=sandbox.root_dir / tree, recursive=True))
    assert matched(sandbox, pattern, tree) == expected


def test_grep_filters_by_a_class_with_a_bracket(sandbox: BaseSandbox, tree: str) -> None:
    found = sandbox.grep("x", tree, glob="x[]].py").matches
    assert [os.path.relpath(m.path, tree) for m in found] == ["x].py"]


def test_a_trailing_slash_matches_directories_only(sandbox: BaseSandbox, tree: str) -> None:
    assert matched(sandbox, "*/", tree) == {"sub", "other"}
    assert matched(sandbox, "**/", tree) == {"sub", "sub/deep", "other"}
    assert matched(sandbox, "a.py/", tree) == set()
    assert matched(sandbox, "sub/", tree) == {"sub"}


def test_a_reversed_range_is_an_invalid_argument(sandbox: BaseSandbox, tree: str) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="glob pattern"):
        sandbox.glob("[z-a].py", tree)
