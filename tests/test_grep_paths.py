"""grep's ways of searching give the same result on the same tree:

- **shell**: GNU grep run by bash alone, no interpreter (a fixed string),
  its lines taken when their two copies agree;
- **script**: the ``grep`` script's Python walk, the shell path handing
  over to it in the same round trip (here: a grep that refuses ``-r``);
- **walk**: the script with no grep on ``PATH``;
- **failing**: a grep that always fails.

Hostile names, binary files, CRLF and long lines, symlinks and a FIFO, caps;
and what sends the shell path to the script (a binary file that matches, an
unreadable directory or file, a name that is not UTF-8)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox_sdk import BaseSandbox, GrepResult
from sandbox_sdk._calls import sed_unescaped
from sandbox_sdk.errors import InvalidArgumentError
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox

NEEDLE = "needle"
#: The sandbox's interpreter itself (``python3`` on the host may be a shim that needs more of ``PATH``).
PYTHON3 = subprocess.run(
    ["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=True
).stdout.strip()
GREP = shutil.which("grep") or "grep"
#: As root, a mode 000 directory is readable: bash then runs without the
#: capabilities that let root read anything, so the tree's modes hold.
SETPRIV = shutil.which("setpriv")
DROP_ROOT_READ = (
    f"{SETPRIV} --bounding-set -dac_override,-dac_read_search " if os.geteuid() == 0 and SETPRIV else None
)
#: GNU grep reads a file in buffers of at least 32 KiB and calls a file
#: binary at the first one that holds a NUL; the script at a NUL in the
#: first 8 KiB.
PAST_GREPS_BUFFER = 200_000


#: What the shell path runs besides bash and grep.
SHELL_TOOLS = ("sed",)


class Counting(LocalSandbox):
    """A local sandbox that keeps each command and response, and starts
    ``python3`` for each script (these tests count the starts; the
    operation server, which would run the script instead, has its own)."""

    operation_server = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.calls: list[tuple[str, ExecuteResponse]] = []

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        response = super().execute(command, timeout=timeout)
        self.calls.append((command, response))
        return response


def make_tree(tree: Path) -> None:
    """Names and contents that the shell path searches itself."""
    names = [
        "plain.txt",
        "colon:7:x.txt",
        "-e",
        "--",
        "sp ace $(touch pwned).txt",
        "q'uo\"te`x`.txt",
        "nul\u00e9.py",
        "\u65e5\u672c.py",
        ".hidden.py",
        "sub/deeper/z.txt",
        "sub/a.py",
        "sub/.dot/b.py",
    ]
    for i, name in enumerate(names):
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            b"first line\n"
            + f"{NEEDLE} {i}\r\n".encode()
            + b"no match here\n"
            + f"twice {NEEDLE} and {NEEDLE}:{i}\n".encode()
            + b"x" * 1500
            + NEEDLE.encode()
            + b"\n"
            + f"last {NEEDLE} without newline".encode()
        )
    (tree / os.fsdecode(b"bad-\xff\xfe.txt")).write_bytes(b"\xff no match \xfe\n")
    (tree / "binary.bin").write_bytes(b"\0no match\n")
    (tree / "late-nul.txt").write_bytes(NEEDLE.encode() + b"\n" + b"a" * PAST_GREPS_BUFFER + b"\0\n")
    (tree / "mid-nul.txt").write_bytes(b"a" * 20_000 + b"\0\nno match\n")
    (tree / "cr-only.txt").write_bytes(NEEDLE.encode() + b"\r\r\n" + b"needle\rin the middle\n")
    (tree / "empty.txt").write_bytes(b"")
    (tree / "link.txt").symlink_to("plain.txt")
    (tree / "dir-link").symlink_to("sub")
    (tree / "loop").symlink_to("loop")
    (tree / "dangling").symlink_to("nowhere")
    os.mkfifo(tree / "fifo")


def refuse(flag: str) -> str:
    """A grep that fails when given ``flag`` and is GNU grep otherwise."""
    check = f'for a; do [ "$a" = {flag} ] && {{ echo "grep: no {flag}" >&2; exit 2; }}; done'
    return f'#!/bin/sh\n{check}\nexec {GREP} "$@"\n'


#: The greps on each sandbox's ``PATH`` (``None``: no grep).
GREPS: dict[str, Callable[[Path], str] | None] = {
    "shell": lambda log: f'#!/bin/sh\necho "$*" >> "{log}"\nexec {GREP} "$@"\n',
    "script": lambda log: refuse("-r"),
    "walk": None,
    "failing": lambda log: "#!/bin/sh\necho 'grep: unknown option' >&2\nexit 2\n",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    make_tree(root / "tree")
    return root


@pytest.fixture
def sandboxes(tmp_path: Path, root: Path) -> dict[str, Counting]:
    """One sandbox per way on one tree. ``python3`` notes each start in
    ``python-runs`` and the shell path's grep each run in ``grep-runs``."""
    made = {}
    for name, grep in GREPS.items():
        folder = tmp_path / f"bin-{name}"
        folder.mkdir()
        scripts = {"python3": f'#!/bin/sh\necho run >> "{tmp_path}/python-runs"\nexec {PYTHON3} "$@"\n'}
        if grep is not None:
            scripts["grep"] = grep(tmp_path / "grep-runs")
        for tool in SHELL_TOOLS:
            (folder / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
        if DROP_ROOT_READ:
            scripts["bash"] = f'#!/bin/sh\nexec {DROP_ROOT_READ}{shutil.which("bash")} "$@"\n'
        else:
            (folder / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
        for program, text in scripts.items():
            (folder / program).write_text(text)
            (folder / program).chmod(0o755)
        made[name] = Counting(root, env={"PATH": str(folder)})
    return made


def is_shell(command: str) -> bool:
    """Whether a command is a shell grep's (GNU grep, then the script if it must)."""
    return "| LC_ALL=C sed -n" in command


def runs(tmp_path: Path, program: str) -> list[str]:
    log = tmp_path / f"{program}-runs"
    return log.read_bytes().decode("utf-8", "replace").splitlines() if log.exists() else []


def search_all(sandboxes: dict[str, Counting], pattern: str, **options: object) -> dict[str, GrepResult]:
    return {name: sandbox.grep(pattern, "tree", **options) for name, sandbox in sandboxes.items()}  # type: ignore[arg-type]


CASES = [
    pytest.param(NEEDLE, {}, id="literal"),
    pytest.param(NEEDLE, {"max_matches": 1}, id="cap-1"),
    pytest.param(NEEDLE, {"max_matches": 5}, id="cap-5"),
    pytest.param(NEEDLE, {"max_matches": 17}, id="cap-17"),
    pytest.param(NEEDLE, {"glob": "*.py"}, id="glob-filter"),
    pytest.param(NEEDLE, {"glob": "?l*"}, id="glob-question-mark"),
    pytest.param(NEEDLE, {"glob": "sub/**"}, id="glob-path-filter"),
    pytest.param(NEEDLE, {"glob": "{plain,empty}.txt"}, id="glob-braces"),
    pytest.param("and needle:", {}, id="colon"),
    pytest.param("$(touch pwned)", {}, id="shell-syntax"),
    pytest.param("-e", {}, id="option-like"),
    pytest.param("'\"`", {}, id="quotes"),
    pytest.param("x" * 1200, {}, id="long-line"),
    pytest.param("\u00e9", {}, id="unicode"),
    pytest.param(f"{NEEDLE}\r", {}, id="carriage-return"),
    pytest.param(f"first\n{NEEDLE}", {}, id="newline-pattern"),
]


@pytest.mark.parametrize(("pattern", "options"), CASES)
def test_every_way_finds_the_same(
    sandboxes: dict[str, Counting], root: Path, pattern: str, options: dict[str, object]
) -> None:
    results = search_all(sandboxes, pattern, **options)
    assert results["shell"] == results["script"] == results["walk"] == results["failing"]
    assert not (root / "tree" / "pwned").exists() and not (root / "pwned").exists()
    assert len(sandboxes["shell"].calls) == 1


#: The cases GNU grep alone answers. In the others the script takes over:
#: more matches than the cap (it stops there in walk order), a pattern of
#: two lines or ending in CR, a glob with a ``/`` or braces.
SHELL_CASES = [
    case
    for case in CASES
    if case.id
    in {
        "literal",
        "glob-filter",
        "glob-question-mark",
        "colon",
        "shell-syntax",
        "option-like",
        "quotes",
        "long-line",
        "unicode",
    }
]


@pytest.mark.parametrize(("pattern", "options"), SHELL_CASES)
def test_the_shell_path_needs_no_interpreter(
    sandboxes: dict[str, Counting], tmp_path: Path, pattern: str, options: dict[str, object]
) -> None:
    """On this tree, GNU grep alone finds the result: one round trip, no ``python3``."""
    sandboxes["shell"].grep(pattern, "tree", **options)  # type: ignore[arg-type]
    assert [line.split()[0] for line in runs(tmp_path, "grep")] == ["-r"]
    assert runs(tmp_path, "python") == []


def test_grep_lines_come_twice_raw_and_escaped(sandboxes: dict[str, Counting]) -> None:
    """What a shell grep prints is grep's lines, once grep is done, then the
    same escaped on one line (sed's ``l``) and the marker: nothing else,
    nothing while grep runs."""
    found = sandboxes["shell"].grep(NEEDLE, "tree")
    assert found == sandboxes["walk"].grep(NEEDLE, "tree")
    ((command, response),) = sandboxes["shell"].calls
    lines, escaped, marker = response.output.encode("utf-8", "surrogateescape").rsplit(b"\n", 3)[:3]
    assert lines.startswith(b"tree/") and marker.split()[0] == b"@@SANDBOX_SDK_GREP"
    assert marker.split()[1] in command.encode()
    assert escaped.isascii() and escaped.endswith(b"$") and b"\\000" in escaped
    assert sed_unescaped(escaped[:-1]) == lines


def test_sed_escapes_are_undone_for_every_byte(tmp_path: Path) -> None:
    """Every byte, as GNU sed's ``l`` prints it in the C locale, reads back as itself."""
    every = bytes(range(256)) + b"\\000\\n$"
    (tmp_path / "bytes").write_bytes(every)
    done = subprocess.run(
        ["sed", "-n", "H;$!d;x;s/^\\n//;l 0", str(tmp_path / "bytes")],
        capture_output=True,
        check=True,
        env={"LC_ALL": "C", "PATH": os.environ["PATH"]},
    )
    assert done.stdout.isascii() and done.stdout.endswith(b"$\n")
    assert sed_unescaped(done.stdout[:-2]) == every


def test_a_message_inside_a_line_stops_sed(sandboxes: dict[str, Counting]) -> None:
    """grep's lines are block-buffered, its messages not: a message can land
    inside a line, cut at any byte. sed (the command's own program) quits
    with status 6, printing nothing, wherever the cut is."""
    sandboxes["shell"].grep(NEEDLE, "tree")
    ((command, response),) = sandboxes["shell"].calls
    held = re.search(r"sed -n '([^']*)'", command)
    assert held is not None
    lines = response.output.encode("utf-8", "surrogateescape").rsplit(b"\n", 3)[0] + b"\n"
    start = lines.index(b"\n") + 1  # the second line, from its first byte to its newline
    message = b"grep: tree/binary.bin: binary file matches\n"
    for cut in range(start, lines.index(b"\n", start) + 1):
        done = subprocess.run(
            ["sed", "-n", held[1]],
            input=lines[:cut] + message + lines[cut:],
            capture_output=True,
            check=False,
            env={"LC_ALL": "C", "PATH": os.environ["PATH"]},
        )
        assert (done.returncode, done.stdout) == (6, b""), cut


def test_the_result_is_what_the_walk_finds(sandboxes: dict[str, Counting]) -> None:
    """What all ways agree on, spelled out once: symlinks below the root are
    not followed, a binary file without a match is not counted, a NUL past
    8 KiB leaves a file text."""
    result = sandboxes["shell"].grep(NEEDLE, "tree")
    assert (result.skipped_binary, result.truncated, result.unreadable) == (0, False, [])
    by_file: dict[str, list[int]] = {}
    for match in result.matches:
        by_file.setdefault(os.path.relpath(match.path, "tree"), []).append(match.line_number)
    assert by_file["plain.txt"] == [2, 4, 5, 6]
    assert by_file["late-nul.txt"] == [1]
    assert by_file["cr-only.txt"] == [1, 2]
    assert not {"link.txt", "dir-link/a.py", "fifo", "binary.bin", "mid-nul.txt"} & set(by_file)
    long = [m for m in result.matches if m.path.endswith("plain.txt") and m.line_number == 5]
    assert long[0].line_truncated and len(long[0].line) == 1000
    # depth first; a directory's files by name descending, then its subdirectories ascending
    assert list(dict.fromkeys(os.path.relpath(m.path, "tree") for m in result.matches)) == [
        "\u65e5\u672c.py",
        "sp ace $(touch pwned).txt",
        "q'uo\"te`x`.txt",
        "plain.txt",
        "nul\u00e9.py",
        "late-nul.txt",
        "cr-only.txt",
        "colon:7:x.txt",
        ".hidden.py",
        "-e",
        "--",
        "sub/a.py",
        "sub/.dot/b.py",
        "sub/deeper/z.txt",
    ]


def test_caps_cut_where_the_walk_would(sandboxes: dict[str, Counting]) -> None:
    """Past the cap, sed stops grep and the script answers, in the same round trip."""
    full = sandboxes["shell"].grep(NEEDLE, "tree").matches
    for cap in (1, 4, len(full) - 1):
        cut = sandboxes["shell"].grep(NEEDLE, "tree", max_matches=cap)
        assert cut.truncated and cut.matches == full[:cap]
        assert cut == sandboxes["walk"].grep(NEEDLE, "tree", max_matches=cap)
    assert len(sandboxes["shell"].calls) == 4


def test_the_output_budget_cuts_where_the_walk_would(root: Path) -> None:
    """A small ``max_output_bytes``: grep's raw output is cut by the provider,
    the script searches again within its budget."""
    for i in range(30):
        (root / "wide" / f"f{i}.txt").parent.mkdir(exist_ok=True)
        (root / "wide" / f"f{i}.txt").write_text(f"{NEEDLE} {'x' * 2000}\n")
    small = {name: Counting(root, max_output_bytes=20_000) for name in ("shell", "walk")}
    shell = small["shell"].grep(NEEDLE, "wide")
    walk = small["walk"].grep(NEEDLE, "wide", fixed_strings=False)
    assert shell.truncated and shell == walk
    assert [response.truncated for _, response in small["shell"].calls] == [True, False]
    assert is_shell(small["shell"].calls[0][0])


def test_ignore_case_and_regex_use_the_script(sandboxes: dict[str, Counting], tmp_path: Path) -> None:
    sandboxes["shell"].grep(NEEDLE.upper(), "tree", ignore_case=True)
    sandboxes["shell"].grep("ne+dle", "tree", fixed_strings=False)
    assert runs(tmp_path, "grep") == [] and len(runs(tmp_path, "python")) == 2


def make_binary_match(tree: Path) -> None:
    (tree / "zz.bin").write_bytes(b"\0" + NEEDLE.encode() + b"\n")


def make_early_nul(tree: Path) -> None:
    """A NUL past 8 KiB but in grep's first buffer: text to the script,
    binary to GNU grep."""
    (tree / "early-nul.txt").write_bytes(b"a" * 9000 + b"\0\n" + NEEDLE.encode() + b"\n")


def make_late_match(tree: Path) -> None:
    """A match past a NUL that GNU grep meets after its first buffer."""
    (tree / "late-match.txt").write_bytes(b"a" * PAST_GREPS_BUFFER + b"\0\n" + NEEDLE.encode() + b"\n")


def make_unreadable_dir(tree: Path) -> None:
    (tree / "locked").mkdir()
    (tree / "locked" / "in.txt").write_text(NEEDLE)
    (tree / "locked").chmod(0)


def make_unreadable_file(tree: Path) -> None:
    (tree / "sub" / "locked.txt").write_text(NEEDLE)
    (tree / "sub" / "locked.txt").chmod(0)


def make_newline_name(tree: Path) -> None:
    """A name's newline makes a line with no NUL in grep's output, as its
    messages are: the script takes over."""
    (tree / "a\nb.txt").write_text(NEEDLE)


def make_undecodable_name(tree: Path) -> None:
    (tree / os.fsdecode(b"hit-\xff.txt")).write_text(NEEDLE)


#: What sends the shell path to the script, and the round trips it takes then.
TRIGGERS = [
    pytest.param(make_binary_match, 1, id="binary-match"),
    pytest.param(make_early_nul, 1, id="nul-past-8k"),
    pytest.param(make_late_match, 1, id="match-past-late-nul"),
    pytest.param(make_unreadable_dir, 1, id="unreadable-dir"),
    pytest.param(make_unreadable_file, 1, id="unreadable-file"),
    pytest.param(make_newline_name, 1, id="name-with-newline"),
    # the local provider replaces bytes that are not UTF-8 (as the provider
    # contract says): the client sees it and asks the script
    pytest.param(make_undecodable_name, 2, id="name-not-utf8"),
]


@pytest.mark.parametrize(("make", "round_trips"), TRIGGERS)
def test_the_shell_path_hands_over_to_the_script(
    sandboxes: dict[str, Counting], root: Path, tmp_path: Path, make: Callable[[Path], None], round_trips: int
) -> None:
    """In the same round trip, where the bytes came back whole; else in a second one."""
    if make in (make_unreadable_dir, make_unreadable_file) and os.geteuid() == 0 and not DROP_ROOT_READ:
        pytest.skip("root reads everything and setpriv is missing")
    make(root / "tree")
    try:
        results = search_all(sandboxes, NEEDLE)
    finally:
        for locked in (root / "tree" / "locked", root / "tree" / "sub" / "locked.txt"):
            if locked.exists():
                locked.chmod(0o755)
    assert results["shell"] == results["script"] == results["walk"] == results["failing"]
    assert len(sandboxes["shell"].calls) == round_trips
    assert runs(tmp_path, "grep")[0].split()[0] == "-r"
    found = results["shell"]
    if make is make_binary_match:
        assert found.skipped_binary == 1
    if make in (make_early_nul, make_late_match):
        assert NEEDLE in found.matches[0].line and found.skipped_binary == 0
    if make in (make_unreadable_dir, make_unreadable_file):
        assert len(found.unreadable) == 1


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_message_among_the_lines_sends_the_search_to_the_script(
    sandboxes: dict[str, Counting], root: Path, tmp_path: Path, where: str
) -> None:
    """GNU grep 3.3 and 3.4 print "Binary file x matches" among the lines
    (3.5 moved it to standard error): a line with no NUL, so sed hands the
    search over to the script in the same round trip."""
    make_binary_match(root / "tree")
    folder = tmp_path / "bin-grep-3.4"
    shutil.copytree(tmp_path / "bin-shell", folder, symlinks=True)
    message = "echo 'Binary file tree/zz.bin matches'"
    first, last = (message, "") if where == "before" else ("", message)
    run = f'{GREP} "$@" 2>/dev/null\nstatus=$?'
    (folder / "grep").write_text(
        f'#!/bin/sh\n[ "$1" = -r ] || exec {GREP} "$@"\n{first}\n{run}\n{last}\nexit $status\n'
    )
    old_grep = Counting(root, env={"PATH": str(folder)})
    found = old_grep.grep(NEEDLE, "tree")
    assert found == sandboxes["walk"].grep(NEEDLE, "tree") and found.skipped_binary == 1
    assert len(old_grep.calls) == 1 and "@@SANDBOX_SDK_GREP_FALLBACK" in old_grep.calls[0][1].output


def test_no_value_is_in_the_command(sandboxes: dict[str, Counting], root: Path) -> None:
    """The pattern, the root and the glob reach grep as arguments, never as
    command text (the script's payload holds them as base64)."""
    pattern, folder, glob = "'$(needle)\"", "we'i$(rd)", "*'$(x)\".py"
    (root / folder).mkdir()
    (root / folder / "f'$(x)\".py").write_text(f"a {pattern} b\n")
    found = sandboxes["shell"].grep(pattern, folder, glob=glob)
    assert [m.line for m in found.matches] == [f"a {pattern} b"]
    command = sandboxes["shell"].calls[0][0]
    assert len(sandboxes["shell"].calls) == 1 and is_shell(command)
    assert not any(value in command for value in (pattern, folder, glob, "needle", "rd)", "x)"))


def test_without_python3_gnu_grep_still_searches(root: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bin-bare"
    folder.mkdir()
    for program in ("bash", "grep", *SHELL_TOOLS):
        (folder / program).symlink_to(shutil.which(program) or program)
    found = LocalSandbox(root, env={"PATH": str(folder)}).grep(NEEDLE, "tree")
    assert len(found.matches) > 10


def test_grep_output_is_what_is_taken(sandboxes: dict[str, Counting], tmp_path: Path, root: Path) -> None:
    """A grep that adds a line of its own: the line shows up, so the result
    came from grep's output (the walk could not have found it)."""
    folder = tmp_path / "bin-lying"
    shutil.copytree(tmp_path / "bin-walk", folder, symlinks=True)
    lying = folder / "grep"
    lying.write_text(
        f'#!/bin/sh\n{GREP} "$@"\nstatus=$?\n'
        + 'for last; do :; done\n[ -d "$last" ] && last="$last/plain.txt"\n'
        + f"printf '%s\\0999:{NEEDLE} from grep\\n' \"$last\"\nexit $status\n"
    )
    lying.chmod(0o755)
    result = LocalSandbox(root, env={"PATH": str(folder)}).grep(NEEDLE, "tree")
    extra = [m for m in result.matches if m.line_number == 999]
    assert [m.line for m in extra] == [f"{NEEDLE} from grep"]


def test_a_long_pattern_is_the_scripts(sandboxes: dict[str, Counting], tmp_path: Path, root: Path) -> None:
    """Over 4 KiB of values, the escaped command would crowd the script out: the script searches."""
    pattern = "y" * 5000
    (root / "tree" / "long.txt").write_text(f"a {pattern} b\n")
    found = sandboxes["shell"].grep(pattern, "tree")
    assert [m.path for m in found.matches] == ["tree/long.txt"] and len(sandboxes["shell"].calls) == 1
    assert runs(tmp_path, "grep") == [] or runs(tmp_path, "grep")[0].split()[0] != "-r"
    assert runs(tmp_path, "python") == ["run"]


def test_past_the_cap_grep_stops_early(root: Path) -> None:
    """More matching lines than ``max_matches``: sed stops GNU grep at the cap
    and the script, which stops there too in walk order, answers in the same
    round trip; the output stays far below what grep alone would print (its
    ``-m`` bounds one file only)."""
    many = root / "many"
    for i in range(200):
        (many / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
        (many / f"d{i % 10}" / f"f{i}.txt").write_text(f"{NEEDLE} {'x' * 80}\n" * 20)
    shell, walk = Counting(root), Counting(root)
    found = shell.grep(NEEDLE, "many", max_matches=10)
    assert found == walk.grep(NEEDLE, "many", max_matches=10, fixed_strings=False) and found.truncated
    assert len(shell.calls) == 1 and "@@SANDBOX_SDK_GREP_FALLBACK" in shell.calls[0][1].output
    assert len(shell.calls[0][1].output) < 20_000  # all 4,000 lines would be over 400 KB


def test_a_root_named_dash_is_searched_not_read_from_stdin(root: Path) -> None:
    """grep reads its standard input for a file operand ``-``, even after ``--``."""
    (root / "-").mkdir()
    (root / "-" / "f.txt").write_text(NEEDLE)
    found = LocalSandbox(root).grep(NEEDLE, "-")
    assert [m.path for m in found.matches] == ["-/f.txt"]


class Decoding(BaseSandbox):
    """A sandbox whose output bytes are decoded another way (``errors``), as
    some providers' SDKs return them."""

    def __init__(self, root: Path, errors: str) -> None:
        self.root, self.errors, self.calls = root, errors, 0

    @property
    def id(self) -> str:
        return "decoding"

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        self.calls += 1
        done = subprocess.run(["bash", "-c", command], cwd=self.root, capture_output=True, check=False)
        output = (done.stdout + done.stderr).decode("utf-8", self.errors)
        return ExecuteResponse(output=output, exit_code=done.returncode)


@pytest.mark.parametrize(("errors", "trips"), [("surrogateescape", 1), ("replace", 2), ("ignore", 2)])
def test_bytes_the_provider_did_not_keep_send_the_search_to_the_script(
    tmp_path: Path, errors: str, trips: int
) -> None:
    """GNU grep's lines are taken only as the bytes sed printed (their escaped copy):
    a byte that is not UTF-8, replaced or dropped as the provider decodes
    it, sends the search to the script in a second round trip; UTF-8 text
    is taken however the provider decodes."""
    (tmp_path / "a.txt").write_text(f"one {NEEDLE}\ntwo\n{NEEDLE} three\n")
    (tmp_path / "b.txt").write_bytes(NEEDLE.encode() + b" \xff\n")
    sandbox = Decoding(tmp_path, errors)
    for path, round_trips in ((".", trips), ("a.txt", 1)):
        expected = LocalSandbox(tmp_path).grep(NEEDLE, path)
        sandbox.calls = 0
        assert sandbox.grep(NEEDLE, path) == expected
        assert sandbox.calls == round_trips
    assert [m.line for m in LocalSandbox(tmp_path).grep(NEEDLE, "b.txt").matches] == [f"{NEEDLE} \ufffd"]


def test_a_plain_word_regex_is_searched_as_one(sandboxes: dict[str, Counting], tmp_path: Path) -> None:
    """``fixed_strings=False`` with no regex syntax: GNU grep alone, as for a
    fixed string, and what the regex finds."""
    found = sandboxes["shell"].grep(NEEDLE, "tree", fixed_strings=False)
    assert [line.split()[0] for line in runs(tmp_path, "grep")] == ["-r"]
    assert runs(tmp_path, "python") == []
    assert found == sandboxes["walk"].grep(f"ne(e)dle|{NEEDLE}", "tree", fixed_strings=False)


def test_the_shell_path_leaves_the_script_out_until_it_is_known_missing(tmp_path: Path, root: Path) -> None:
    """The script runs only when grep cannot answer: a shell grep's command
    carries it only once it is known missing. A fallback that finds no
    installed copy is sent again in full (one more round trip), and from then
    on the script travels, as any script known missing does."""
    sandbox = Counting(root)
    sandbox.scratch_dir = str(tmp_path / "fresh-scratch")
    found = sandbox.grep(NEEDLE, "tree")
    ((command, _),) = sandbox.calls
    assert len(command) < 4096 and is_shell(command)  # the packed script alone is over 8 KB
    sandbox.calls.clear()
    with pytest.raises(FileNotFoundError):  # no root for grep: the script answers, with the error
        sandbox.grep(NEEDLE, "missing")
    (omitted, response), (full, _) = sandbox.calls
    assert "@@SANDBOX_SDK_NO_SCRIPT" in response.output and len(omitted) < 4096 < len(full)
    sandbox.calls.clear()
    assert sandbox.grep(NEEDLE, "tree") == found
    ((again, _),) = sandbox.calls
    assert len(again) > 4096 and is_shell(again)


def test_a_pattern_with_a_nul_is_searched_for_itself(sandboxes: dict[str, Counting], root: Path) -> None:
    """No argument (nor bash variable) holds a NUL: a pattern with one is the
    script's, which searches it in Python (a bash variable would end at
    the NUL, and grep would find what comes before it, on every line that
    has it)."""
    tree = root / "tree"
    # a NUL past 8 KiB is text to the script
    (tree / "late.txt").write_bytes(b"a" * 9000 + b"\nfirst\0line\nfirst line\n" + b"b" * 200_000 + b"\n")
    results = search_all(sandboxes, "first\0line")
    assert results["shell"] == results["script"] == results["walk"] == results["failing"]
    assert [(m.path, m.line_number, m.line) for m in results["shell"].matches] == [
        ("tree/late.txt", 2, "first\0line")
    ]
    assert sandboxes["shell"].grep("first\0line", "tree/plain.txt").matches == []


def test_a_pattern_over_an_arguments_limit_is_searched(sandboxes: dict[str, Counting], root: Path) -> None:
    """Linux refuses an argument over 128 KiB: the script searches a longer
    pattern in Python (the shell path leaves it to the script, which gets
    its arguments on standard input)."""
    pattern = "z" * 200_000
    (root / "tree" / "long.txt").write_text(f"a {pattern} b\n{pattern[1:]}\n")
    results = search_all(sandboxes, pattern)
    assert results["shell"] == results["script"] == results["walk"] == results["failing"]
    assert [(m.path, m.line_number, m.line_truncated) for m in results["shell"].matches] == [
        ("tree/long.txt", 1, True)
    ]
    assert len(sandboxes["shell"].calls) == 1


def test_a_line_of_megabytes_is_cut_as_the_script_cuts_it(
    sandboxes: dict[str, Counting], root: Path, tmp_path: Path
) -> None:
    """A line of megabytes: GNU grep's output is cut by the provider, and
    the script searches (reading the line once) and cuts it as it cuts
    every long line."""
    half = 12 * 1024 * 1024
    (root / "big").mkdir()
    (root / "big" / "big.txt").write_bytes(b"x" * half + NEEDLE.encode() + b"y" * half + b"\n")
    results = {name: sandbox.grep(NEEDLE, "big") for name, sandbox in sandboxes.items()}
    assert results["shell"] == results["script"] == results["walk"] == results["failing"]
    assert [(m.line_truncated, m.line) for m in results["shell"].matches] == [(True, "x" * 1000)]
    (shell, cut), (script, answer) = sandboxes["shell"].calls
    assert is_shell(shell) and cut.truncated and not is_shell(script) and not answer.truncated
    assert [line.split()[0] for line in runs(tmp_path, "grep")] == ["-r"]


@pytest.mark.slow
def test_a_line_of_100_mb_is_answered_within_a_providers_timeout(root: Path) -> None:
    """The review's case: a match in a line of 100 MB timed out at 30 s (the
    script took its GNU grep's line by copying and searching all it had
    read once per block: minutes); it is answered well within (the provider
    cuts grep's output, the script reads the line once)."""
    half = 50 * 1000 * 1000
    (root / "big").mkdir()
    (root / "big" / "big.txt").write_bytes(b"x" * half + NEEDLE.encode() + b"y" * half + b"\n")
    sandbox = Counting(root)
    sandbox.limits = replace(sandbox.limits, operation_timeout=30.0)
    found = sandbox.grep(NEEDLE, "big")
    assert [(m.path, m.line_truncated, m.line) for m in found.matches] == [("big/big.txt", True, "x" * 1000)]


class Garbling(Counting):
    """A local sandbox whose first reply to a shell grep has one character
    changed, at the index ``where`` finds in it (as a transport that garbles
    a byte would)."""

    def __init__(self, root: Path, where: Callable[[str], int]) -> None:
        super().__init__(root)
        self.where = where

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        response = super().execute(command, timeout=timeout)
        if len(self.calls) > 1:
            return response
        at = self.where(response.output)
        output = response.output[:at] + chr(ord(response.output[at]) ^ 1) + response.output[at + 1 :]
        return response.model_copy(update={"output": output})


#: Where a shell grep's reply is garbled: in grep's lines (a line, a name,
#: a line number), in their escaped copy (a line, an escape, its end), in
#: the marker.
GARBLED = {
    "line": lambda output: output.index("twice"),
    "name": lambda output: output.index("plain.txt"),
    "number": lambda output: output.index("\0") + 1,
    "escaped-line": lambda output: output.rindex("twice"),
    "escaped-escape": lambda output: output.rindex("\\000") + 3,
    "escaped-end": lambda output: output.rindex("$\n"),
    "marker": lambda output: output.rindex("@@SANDBOX_SDK_GREP") + 3,
}


@pytest.mark.parametrize("where", GARBLED)
def test_a_garbled_reply_is_not_taken(sandboxes: dict[str, Counting], root: Path, where: str) -> None:
    """grep's lines are taken only if their escaped copy, printed in the
    sandbox, is the same bytes: else the script searches, in a second round
    trip (whose frame has its own check)."""
    sandbox = Garbling(root, GARBLED[where])
    found = sandbox.grep(NEEDLE, "tree")
    assert found == sandboxes["walk"].grep(NEEDLE, "tree")
    (shell, garbled), (script, _) = sandbox.calls
    assert is_shell(shell) and not is_shell(script)
    assert "@@SANDBOX_SDK_GREP_FALLBACK" not in garbled.output


def make_excluded_tree(tree: Path) -> None:
    """``.git`` directories at the top and nested, a file named ``.git``, a
    ``node_modules``, and a directory whose name has shell and glob syntax."""
    names = [".git/config", "a/.git/HEAD", "a/b.txt", "c/.git", "node_modules/m.js"]
    for name in [*names, "$(touch pwned)/x", "[x]/y"]:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(f"{NEEDLE} in {name}\n")
    (tree / "x").mkdir()
    (tree / "x" / "z").write_text(NEEDLE)


def found_files(result: GrepResult, under: str) -> set[str]:
    return {os.path.relpath(m.path, under) for m in result.matches}


EXCLUDED_CASES = [
    pytest.param({}, {".git/config", "a/.git/HEAD"}, id="default"),
    pytest.param({"exclude_dirs": ()}, set(), id="none"),
    pytest.param(
        {"exclude_dirs": [".git", "node_modules"]},
        {".git/config", "a/.git/HEAD", "node_modules/m.js"},
        id="two",
    ),
    pytest.param({"exclude_dirs": ("a",)}, {"a/.git/HEAD", "a/b.txt"}, id="nested-below"),
    pytest.param({"exclude_dirs": ("$(touch pwned)",)}, {"$(touch pwned)/x"}, id="shell-syntax"),
    # a glob's syntax is the name itself: "[x]" is not "x"
    pytest.param({"exclude_dirs": ("[x]", "*")}, {"[x]/y"}, id="glob-syntax"),
    pytest.param({"exclude_dirs": (".git",), "glob": "*.txt"}, set(), id="with-glob"),
]


@pytest.mark.parametrize(("options", "left_out"), EXCLUDED_CASES)
def test_excluded_directories_are_skipped_by_every_way(
    sandboxes: dict[str, Counting], root: Path, tmp_path: Path, options: dict[str, object], left_out: set[str]
) -> None:
    """``exclude_dirs`` are whole directory names at any depth, as GNU grep's
    ``--exclude-dir`` and the script's walk both take them: a file named
    ``.git`` is searched, and so is ``node_modules`` by default."""
    tree = root / "excl"
    make_excluded_tree(tree)
    shell = sandboxes["shell"].grep(NEEDLE, "excl", **options)  # type: ignore[arg-type]
    ((command, _),) = sandboxes["shell"].calls
    assert "pwned" not in command
    # glob syntax sends the search to the script: --exclude-dir would read it as a glob
    by_grep = options.get("exclude_dirs") != ("[x]", "*")
    assert is_shell(command) == by_grep and (runs(tmp_path, "python") == []) == by_grep
    results = {name: sandbox.grep(NEEDLE, "excl", **options) for name, sandbox in sandboxes.items()}  # type: ignore[arg-type]
    assert shell == results["shell"] == results["script"] == results["walk"] == results["failing"]
    glob = options.get("glob")
    everything = sandboxes["walk"].grep(NEEDLE, "excl", exclude_dirs=())
    expected = {rel for rel in found_files(everything, "excl") if glob is None or rel.endswith(".txt")}
    assert found_files(shell, "excl") == expected - left_out
    assert "c/.git" in found_files(shell, "excl") or glob is not None
    assert not (tree / "pwned").exists() and not (root / "pwned").exists()


@pytest.mark.parametrize("under", ["excl/.git", "excl/.git/", "excl/a/.git", "excl/a"])
def test_a_search_rooted_at_an_excluded_directory_searches_it(
    sandboxes: dict[str, Counting], root: Path, under: str
) -> None:
    """The root itself is never excluded (GNU grep would skip a directory
    operand of that name: the script searches it), but what is below it is."""
    tree = root / "excl"
    make_excluded_tree(tree)
    (tree / ".git" / "modules" / ".git").mkdir(parents=True)
    (tree / ".git" / "modules" / ".git" / "deep").write_text(NEEDLE)
    (tree / "a" / ".git" / "sub").mkdir()
    (tree / "a" / ".git" / "sub" / "f").write_text(NEEDLE)
    options = {"exclude_dirs": (".git", "a")}
    results = {name: sandbox.grep(NEEDLE, under, **options) for name, sandbox in sandboxes.items()}  # type: ignore[arg-type]
    assert results["shell"] == results["script"] == results["walk"] == results["failing"]
    expected = {
        "excl/.git": {"config"},
        "excl/.git/": {"config"},
        "excl/a/.git": {"HEAD", "sub/f"},
        "excl/a": {"b.txt"},
    }[under]
    assert found_files(results["shell"], under) == expected


@pytest.mark.parametrize(
    "exclude_dirs",
    [".git", b".git", [".git/x"], ["/"], [""], ["."], [".."], ["a\0b"], [1], ["\udc80\ud800"], None],
)
def test_exclude_dirs_that_are_not_directory_names_are_refused(root: Path, exclude_dirs: object) -> None:
    sandbox = Counting(root)
    with pytest.raises(InvalidArgumentError, match="exclude_dirs"):
        sandbox.grep(NEEDLE, "tree", exclude_dirs=exclude_dirs)  # type: ignore[arg-type]
    assert sandbox.calls == []
