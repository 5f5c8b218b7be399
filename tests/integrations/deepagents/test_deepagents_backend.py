"""DeepAgentsBackend beyond the standard suite: the semantics of the installed
deepagents protocol (0.6 or 0.7) where the two differ, and how our typed errors
reach the model. Each test asserts the behaviour of whichever version is installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("deepagents")

from deepagents.backends.sandbox import MAX_OUTPUT_BYTES, TRUNCATION_MSG
from deepagents.backends.sandbox import BaseSandbox as ReferenceSandbox

from sandbox_sdk.integrations.deepagents import PROTOCOL_0_7, DeepAgentsBackend
from sandbox_sdk.providers.local import LocalSandbox


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path)


@pytest.fixture
def backend(root: str) -> Iterator[DeepAgentsBackend]:
    yield DeepAgentsBackend(LocalSandbox(root))


@pytest.fixture
def tree(backend: DeepAgentsBackend, root: str) -> str:
    for name in ("top.py", "src/app/main.py", ".github/ci.py", ".hidden.py", "notes.txt"):
        assert backend.write(f"{root}/{name}", "x = 1\n").error is None
    backend.sandbox.mkdir(f"{root}/dir.py")
    return root


def test_write_to_an_existing_file_follows_the_installed_protocol(
    backend: DeepAgentsBackend, root: str
) -> None:
    path = f"{root}/f.txt"
    assert backend.write(path, "first").error is None
    result = backend.write(path, "second")
    if PROTOCOL_0_7:
        assert result.error is None
        assert result.path == path
        assert backend.sandbox.read_bytes(path) == b"second"
    else:
        assert result.error is not None
        assert "already exists" in result.error
        assert backend.sandbox.read_bytes(path) == b"first"


def test_glob_follows_the_installed_protocol(backend: DeepAgentsBackend, tree: str) -> None:
    def paths(pattern: str) -> list[str]:
        result = backend.glob(pattern, path=tree)
        assert result.error is None
        assert result.matches is not None
        return sorted(match["path"] for match in result.matches)

    if PROTOCOL_0_7:
        # Names at any depth (under hidden directories too), regular files only,
        # absolute paths; hidden names only when the pattern asks for them.
        assert paths("*.py") == [f"{tree}/.github/ci.py", f"{tree}/src/app/main.py", f"{tree}/top.py"]
        assert paths(".*.py") == [f"{tree}/.hidden.py"]
        # A pattern with a slash matches paths; ``**`` skips hidden directories.
        assert paths("**/*.py") == [f"{tree}/src/app/main.py", f"{tree}/top.py"]
        # A leading slash anchors the pattern to the search root.
        assert paths("/*.py") == [f"{tree}/top.py"]
        result = backend.glob("../*.py", path=f"{tree}/src")
        assert result.matches is None
        assert result.error is not None
    else:
        # Python's glob: relative to the root, one level, directories included.
        assert paths("*.py") == ["dir.py", "top.py"]
        assert paths("**/*.py") == ["dir.py", "src/app/main.py", "top.py"]
        infos = backend.glob("*.py", path=tree).matches
        assert infos is not None
        assert {info["path"]: info["is_dir"] for info in infos} == {"dir.py": True, "top.py": False}


def test_delete_follows_the_installed_protocol(backend: DeepAgentsBackend, tree: str) -> None:
    if not PROTOCOL_0_7:
        with pytest.raises(NotImplementedError):
            backend.delete(f"{tree}/src")
        return
    assert backend.delete(f"{tree}/src").error is None
    assert not Path(tree, "src").exists()
    missing = backend.delete(f"{tree}/src")
    assert missing.error is not None
    assert "not found" in missing.error
    assert backend.delete("/").error is not None


def fields(result: object, *names: str) -> tuple[object, ...]:
    """Fields only one protocol version has (reading them type-checks under both)."""
    return tuple(vars(result)[name] for name in names)


async def test_grep_max_count_caps_and_flags_the_result(backend: DeepAgentsBackend, root: str) -> None:
    backend.write(f"{root}/a.txt", "hit\nhit\nmiss\nhit\n")
    result = await backend.agrep("hit", path=root, max_count=2)
    assert result.error is None
    assert result.matches is not None
    assert [match["line"] for match in result.matches] == [1, 2]
    if PROTOCOL_0_7:
        assert fields(result, "truncated") == (True,)
        assert fields(await backend.agrep("hit", path=root, max_count=3), "truncated") == (False,)
    else:
        assert "truncated" not in vars(result)


def test_read_reports_pagination_under_0_7(backend: DeepAgentsBackend, root: str) -> None:
    backend.write(f"{root}/lines.txt", "".join(f"line {i}\n" for i in range(10)))
    page = backend.read(f"{root}/lines.txt", offset=2, limit=3)
    assert page.error is None
    assert page.file_data == {"content": "line 2\nline 3\nline 4", "encoding": "utf-8"}
    if PROTOCOL_0_7:
        window = ("start_line", "end_line", "total_lines", "next_offset")
        assert fields(page, *window) == (3, 5, 10, 5)
        last = backend.read(f"{root}/lines.txt", offset=8, limit=5)
        assert fields(last, "end_line", "next_offset") == (10, None)
        nothing = backend.read(f"{root}/lines.txt", limit=0)
        assert fields(nothing, "no_lines_requested", "file_data") == (
            True,
            {"content": "", "encoding": "utf-8"},
        )
    else:
        assert "next_offset" not in vars(page)


def test_read_shows_crlf_files_with_lf_and_edit_keeps_their_endings(
    backend: DeepAgentsBackend, root: str
) -> None:
    path = f"{root}/dos.txt"
    backend.sandbox.write(path, b"one\r\ntwo\r\nthree\r\n")
    read = backend.read(path)
    assert read.file_data is not None
    assert read.file_data["content"] == "one\ntwo\nthree"
    edit = backend.edit(path, "one\ntwo", "uno\ndos")
    assert edit.error is None
    assert edit.occurrences == 1
    assert backend.sandbox.read_bytes(path) == b"uno\r\ndos\r\nthree\r\n"


def test_files_deepagents_treats_as_media_are_returned_whole_in_base64(
    backend: DeepAgentsBackend, root: str
) -> None:
    backend.upload_files([(f"{root}/pixel.png", b"PNG but plain ASCII")])
    result = backend.read(f"{root}/pixel.png", offset=5, limit=1)
    assert result.file_data == {"content": "UE5HIGJ1dCBwbGFpbiBBU0NJSQ==", "encoding": "base64"}


def test_errors_reach_the_model_as_text(backend: DeepAgentsBackend, root: str) -> None:
    Path(root, "adir").mkdir()
    assert "is a directory" in (backend.read(f"{root}/adir").error or "")
    assert "not found" in (backend.ls(f"{root}/missing").error or "")
    assert "must be absolute" in (backend.read("relative.txt").error or "")
    assert "must be absolute" in (backend.write("relative.txt", "x").error or "")
    assert "empty" in (backend.edit(f"{root}/adir", "", "x").error or "")
    backend.write(f"{root}/same.txt", "a a")
    assert "multiple times" in (backend.edit(f"{root}/same.txt", "a", "b").error or "")
    assert "not a directory" in (backend.ls(f"{root}/same.txt").error or "")
    assert backend.sandbox.read_bytes(f"{root}/same.txt") == b"a a"


def test_uploads_refuse_relative_paths_and_non_bytes_one_by_one(
    backend: DeepAgentsBackend, root: str
) -> None:
    responses = backend.upload_files(
        [(f"{root}/ok.bin", b"\x00\xff"), ("rel.bin", b"x"), (f"{root}/str.bin", "a path?")]  # type: ignore[list-item]
    )
    assert [(r.path, r.error) for r in responses] == [
        (f"{root}/ok.bin", None),
        ("rel.bin", "invalid_path"),
        (f"{root}/str.bin", "content must be bytes"),
    ]
    assert not Path(root, "str.bin").exists()
    downloads = backend.download_files([f"{root}/ok.bin", f"{root}/none.bin", "rel.bin"])
    assert [(d.content, d.error) for d in downloads] == [
        (b"\x00\xff", None),
        (None, "file_not_found"),
        (None, "invalid_path"),
    ]


async def test_execute_reports_a_timeout_and_kills_the_command(backend: DeepAgentsBackend, root: str) -> None:
    response = await backend.aexecute(f"echo started; sleep 30; touch {root}/late", timeout=1)
    assert response.exit_code == 124
    assert response.output.startswith("started\n")
    assert "timed out after 1 seconds" in response.output
    assert not Path(root, "late").exists()
    assert backend.execute("exit 70").exit_code == 70


async def test_execute_timeout_zero_means_the_sandbox_default(backend: DeepAgentsBackend) -> None:
    """deepagents' 0 ("no timeout") is the sandbox's default, as in ``run``: never "expire at once"."""
    assert (await backend.aexecute("sleep 0.2; echo done", timeout=0)).output == "done\n"
    assert backend.execute("sleep 0.2; echo done", timeout=0).output == "done\n"


def test_read_pages_stay_within_deepagents_output_cap(backend: DeepAgentsBackend, root: str) -> None:
    backend.write(f"{root}/wide.txt", "x" * 600_000 + "\nafter\n")
    first = backend.read(f"{root}/wide.txt")
    assert first.file_data is not None
    content = first.file_data["content"]
    assert content.endswith(TRUNCATION_MSG)
    assert content.startswith("x" * 1000)
    assert len(content.encode()) <= MAX_OUTPUT_BYTES
    if PROTOCOL_0_7:
        assert fields(first, "end_line", "next_offset") == (1, 1)
    rest = backend.read(f"{root}/wide.txt", offset=1)
    assert rest.file_data == {"content": "after", "encoding": "utf-8"}


def test_read_pages_through_a_small_output_limit(root: str) -> None:
    """A provider with a small output limit returns shorter pages, marked as
    such, and paging by the returned window still covers the whole file."""
    backend = DeepAgentsBackend(LocalSandbox(root, max_output_bytes=64 * 1024))
    lines = [f"{i:04d} " + "y" * 200 for i in range(1000)]
    backend.write(f"{root}/long.txt", "\n".join(lines))
    first = backend.read(f"{root}/long.txt", limit=1000)
    assert first.file_data is not None
    assert first.file_data["content"].endswith(TRUNCATION_MSG)
    shown = first.file_data["content"].removesuffix(TRUNCATION_MSG).split("\n")
    assert 100 < len(shown) < 1000
    assert shown == lines[: len(shown)]
    if PROTOCOL_0_7:
        offset: object = 0
        seen: list[str] = []
        while offset is not None:
            assert isinstance(offset, int)
            page = backend.read(f"{root}/long.txt", offset=offset, limit=1000)
            assert page.file_data is not None
            seen += page.file_data["content"].removesuffix(TRUNCATION_MSG).split("\n")
            (offset,) = fields(page, "next_offset")
        assert seen == lines


async def test_grep_skips_git_directories_as_deepagents_does(backend: DeepAgentsBackend, root: str) -> None:
    """``.git`` directories at any depth are skipped, not a file named
    ``.git`` nor a search rooted at one; ``grep_exclude_dirs`` changes the
    names (deepagents 0.7's own ``BaseSandbox`` attribute, where it has it)."""
    for name in (".git/config", "a/.git/HEAD", "a/b.txt", "c/.git", "node_modules/m.js"):
        assert backend.write(f"{root}/{name}", "hit\n").error is None

    async def found(path: str = root) -> list[str]:
        sync, unsync = backend.grep("hit", path=path), await backend.agrep("hit", path=path)
        assert sync.error is None and sync.matches is not None and unsync.matches == sync.matches
        return sorted(match["path"].removeprefix(f"{root}/") for match in sync.matches)

    assert await found() == ["a/b.txt", "c/.git", "node_modules/m.js"]
    assert await found(f"{root}/a/.git") == ["a/.git/HEAD"]
    reference = getattr(ReferenceSandbox, "grep_exclude_dirs", None)
    assert reference in (None, DeepAgentsBackend.grep_exclude_dirs)
    backend.grep_exclude_dirs = ("node_modules",)
    assert await found() == [".git/config", "a/.git/HEAD", "a/b.txt", "c/.git"]
