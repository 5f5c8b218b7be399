"""Every code block in README.md and docs/ is checked or declared a fragment.

A Python block runs as a script in a fresh interpreter (its own working and
state directories, the embedded default provider), and a ``print`` whose line
ends in a comment ``# → TEXT`` must print ``TEXT`` (what the comment says is
what the reader would see, checked); a JSON, TOML or YAML block must parse.
Anything else (shell sessions, output, a Python excerpt that needs
credentials or a larger program) is marked with an HTML comment
``<!-- fragment: why -->`` on the line before its fence, which neither
GitHub nor the site shows. ``mkdocs build --strict`` in scripts/test checks
the links.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
FRAGMENT = re.compile(r"<!--\s*fragment:\s*\S.*-->\s*\n\s*\Z")
PARSERS = {"json": json.loads, "toml": tomllib.loads, "yaml": yaml.safe_load}
#: Seconds one Python block may take (it may create a sandbox and run commands).
BLOCK_TIMEOUT = 120
#: A line whose comment says what it prints: ``print(x)  # → 42``.
SAYS_IT_PRINTS = re.compile(r"\bprint\(.*#\s*→\s?(?P<text>.*?)\s*$")
#: Runs a block read from stdin as ``<block>``, recording what each of its lines
#: printed (its text less the newlines it ends in) to the JSON file ``$DOC_PRINTS``.
RECORDING_RUNNER = """
import atexit, builtins, io, json, os, sys
printed, real_print = [], builtins.print
def recording_print(*args, sep=" ", end="\\n", file=None, flush=False):
    frame = sys._getframe(1)
    if file is None and frame.f_code.co_filename == "<block>":
        text = io.StringIO()
        real_print(*args, sep=sep, end=end, file=text)
        printed.append((frame.f_lineno, text.getvalue().rstrip("\\n")))
    real_print(*args, sep=sep, end=end, file=file, flush=flush)
def save():
    with open(os.environ["DOC_PRINTS"], "w") as out:
        json.dump(printed, out)
atexit.register(save)
builtins.print = recording_print
exec(compile(sys.stdin.read(), "<block>", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    code: str
    fragment: bool

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            before = text[: match.start()]
            found.append(
                Block(
                    page=page,
                    line=before.count("\n") + 1,
                    language=match.group(1),
                    code=match.group(2),
                    fragment=bool(FRAGMENT.search(before[-300:])),
                )
            )
    return found


BLOCKS = blocks()


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.fragment], ids=lambda b: b.name)
def test_block_runs_or_parses(block: Block, tmp_path: Path) -> None:
    if block.language in PARSERS:
        PARSERS[block.language](block.code)
        return
    assert block.language == "python", (
        f"{block.name}: a {block.language or 'plain'} block is neither run nor parsed; "
        "mark it with <!-- fragment: why --> on the line before its fence"
    )
    prints = tmp_path / "prints.json"
    env = {**os.environ, "SANDBOX_SDK_HOME": str(tmp_path / "state"), "DOC_PRINTS": str(prints)}
    result = subprocess.run(
        [sys.executable, "-c", RECORDING_RUNNER],
        check=False,
        cwd=tmp_path,
        env=env,
        input=block.code,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
    )
    assert result.returncode == 0, f"{block.name} failed:\n{result.stdout}\n{result.stderr}"
    printed: dict[int, list[str]] = {}
    for line, text in json.loads(prints.read_text()):
        printed.setdefault(line, []).append(text)
    for number, line in enumerate(block.code.splitlines(), 1):
        if said := SAYS_IT_PRINTS.search(line):
            where = f"{block.page.relative_to(ROOT)}:{block.line + number}"
            assert printed.get(number), f"{where}: says it prints {said['text']!r} but printed nothing"
            assert set(printed[number]) == {said["text"]}, (
                f"{where}: says {said['text']!r}, printed {printed[number]}"
            )


def test_fragments_say_why() -> None:
    """The marker needs a reason, and there is at least one checked block per guide."""
    for page in PAGES:
        for marker in re.findall(r"<!--\s*fragment\b[^>]*-->", page.read_text()):
            assert re.match(r"<!--\s*fragment:\s*\S", marker), f"{page}: {marker} gives no reason"
    assert sum(not b.fragment for b in BLOCKS) >= 5


def test_the_api_reference_renders_docstring_roles_as_code(tmp_path: Path) -> None:
    """The site builds strictly, and no Sphinx role of a docstring (``:meth:`x```)
    is left as raw text in its API reference (scripts/mkdocs_hooks.py)."""
    site = tmp_path / "site"
    subprocess.run(
        [Path(sys.executable).with_name("mkdocs"), "build", "--strict", "--quiet", "--site-dir", site],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=True,
        timeout=300,
    )
    pages = list((site / "reference").rglob("*.html"))
    raw = [
        page.name
        for page in pages
        for _ in re.finditer(r":(?:meth|class|func|attr|mod|exc|data):<code>", page.read_text())
    ]
    assert pages and raw == []
