"""The ``sbx`` command through its installed entry point, in real subprocesses,
against the local and bwrap providers (each test has its own state directory)."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandbox_sdk.wire.security import CLIENT_TOKEN_ENV
from tests.cli.support import SBX, Sbx
from tests.providers.remote.support import new_token, start_runner

#: A file that takes well over the progress bar's "moment" to copy (uploads run at tens of MiB/s).
LARGE = 64 * 1024 * 1024
#: What rich draws a bar with.
BAR = "━"


def make_tree(root: Path) -> dict[str, bytes]:
    """A small tree with a nested file, an empty directory and binary content."""
    files = {"a.txt": b"alpha\n", "sub/b.bin": bytes(range(256)) * 40, "sub/deeper/c": b""}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "empty").mkdir()
    return files


def tree_of(root: Path) -> tuple[dict[str, bytes], set[str]]:
    """The files (with their bytes) and the directories under ``root``."""
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    dirs = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir()}
    return files, dirs


# -- providers, create, list, rm --------------------------------------------------------


def test_providers_tells_which_can_be_used_here(tmp_path: Path) -> None:
    done = Sbx(tmp_path, "bwrap")("providers")
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:] if line.strip() and line[0] != " "}
    assert {"local", "bwrap", "daytona", "docker", "e2b", "kubernetes", "modal", "remote"} <= rows.keys()
    assert rows["local"].split()[1] == "available"
    assert rows["bwrap"].split()[1] == "available"
    assert "SANDBOX_SDK_REMOTE_URL" in done.stdout  # why remote is unavailable here


def test_providers_gives_the_install_hint_of_a_missing_extra(tmp_path: Path) -> None:
    """A provider registered by a distribution whose extra is not installed: its
    module does not import, and the hint names that distribution's extra."""
    site = tmp_path / "site"
    info = site / "ghostly_sandboxes-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ghostly-sandboxes\nVersion: 1.0\nProvides-Extra: ghost\n"
    )
    (info / "entry_points.txt").write_text("[sandbox_sdk.providers]\nghost = ghostly_sandboxes:Provider\n")
    sbx = Sbx(tmp_path, "bwrap", env={"PYTHONPATH": str(site)})
    done = sbx("providers")
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("ghost ")]
    assert row.split()[1:3] == ["not", "installed"]
    assert "pip install 'ghostly-sandboxes[ghost]'" in row


def test_create_list_and_rm(sbx: Sbx) -> None:
    first = sbx.create("--label", "team=a", "--label", "thread=1", "--ttl", "600")
    second = sbx.create("-l", "team=b", "--idle-timeout", "300")
    listed = json.loads(sbx("list", "--json").stdout)
    assert [info["id"] for info in listed] == [first, second]
    assert listed[0]["labels"] == {"team": "a", "thread": "1"}
    assert listed[0]["metadata"]["ttl"] == 600
    assert listed[1]["metadata"]["idle_timeout"] == 300
    assert [info["id"] for info in json.loads(sbx("list", "--json", "-l", "team=b").stdout)] == [second]
    table = sbx("list", "--label", "thread=1").stdout
    assert first in table and second not in table and "team=a thread=1" in table
    assert sbx("rm", first, second).stdout.split() == [first, second]
    assert json.loads(sbx("list", "--json").stdout) == []
    assert sbx("rm", first).returncode == 0  # deleting what is gone succeeds, as in the API


def test_rm_without_a_provider_takes_it_from_a_local_providers_id(tmp_path: Path) -> None:
    sbx = Sbx(tmp_path, "")  # neither --provider nor $SANDBOX_SDK_PROVIDER: bwrap by default
    sandbox_id = sbx("create", "-p", "local").stdout.strip()
    assert sbx("rm", sandbox_id).stdout.split() == [sandbox_id]
    assert json.loads(sbx("list", "--json", "-p", "local").stdout) == []


def test_rm_refuses_an_id_its_provider_cannot_have_made(sbx: Sbx, sandbox: str) -> None:
    other = "bwrap" if sbx.provider == "local" else "local"
    for bad, hint in (("not-an-id", "give its provider with --provider"), (f"{other}-{'0' * 24}", other)):
        done = sbx("rm", sandbox, bad, check=False)
        assert done.returncode == 2, done.stderr
        assert f"'{bad}' is not a {sbx.provider} sandbox id" in done.stderr and hint in done.stderr
        assert done.stdout == ""
    assert [info["id"] for info in json.loads(sbx("list", "--json").stdout)] == [sandbox]  # nothing deleted


def test_the_provider_comes_from_the_option_else_the_environment(tmp_path: Path) -> None:
    sbx = Sbx(tmp_path, "bwrap")
    sandbox_id = sbx("create", "--provider", "local").stdout.strip()
    assert sandbox_id.startswith("local-")
    assert json.loads(sbx("list", "--json").stdout) == []  # bwrap, from the environment
    assert [i["id"] for i in json.loads(sbx("list", "--json", "-p", "local").stdout)] == [sandbox_id]


def test_reap_deletes_the_expired(sbx: Sbx) -> None:
    expiring = sbx.create("--idle-timeout", "1")
    kept = sbx.create()
    deadline = time.monotonic() + 60
    while (reaped := sbx("reap").stdout.split()) == [] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert reaped == [expiring]
    assert [info["id"] for info in json.loads(sbx("list", "--json").stdout)] == [kept]


def test_reap_on_a_remote_runner(tmp_path: Path) -> None:
    """The runner's sandboxes live on its machine: ``reap`` deletes its expired ones."""
    token = new_token()
    runner = start_runner(tmp_path, token)
    try:
        sbx = Sbx(
            tmp_path / "state", "remote", env={"SANDBOX_SDK_REMOTE_URL": runner.url, CLIENT_TOKEN_ENV: token}
        )
        expiring = sbx("create", "--idle-timeout", "1").stdout.strip()
        kept = sbx("create").stdout.strip()
        deadline = time.monotonic() + 60
        while (reaped := sbx("reap").stdout.split()) == [] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert reaped == [expiring]
        assert [info["id"] for info in json.loads(sbx("list", "--json").stdout)] == [kept]
    finally:
        runner.stop()


def test_reap_on_a_platform_that_expires_its_own(tmp_path: Path) -> None:
    done = Sbx(tmp_path, "e2b", env={"E2B_API_KEY": "e2b_test"})("reap", check=False)
    assert done.returncode == 1
    assert "nothing to reap" in done.stderr


# -- exec and shell ---------------------------------------------------------------------


def test_exec_passes_output_and_exit_status_through(sbx: Sbx, sandbox: str) -> None:
    done = sbx("exec", sandbox, "--", "sh", "-c", "echo out; echo err >&2; exit 7", check=False)
    assert done.returncode == 7
    assert (done.stdout, done.stderr) == ("out\n", "err\n")
    assert sbx("exec", sandbox, "--", "sh", "-c", "kill -TERM $$", check=False).returncode == 128 + 15
    line = sbx("exec", sandbox, "printf '%s\\n' a b | tr a-z A-Z")  # one argument: a shell line
    assert line.stdout == "A\nB\n"
    quoted = sbx("exec", sandbox, "printf", "[%s]", "two words", "$HOME")  # several: quoted
    assert quoted.stdout == "[two words][$HOME]"


def test_exec_output_is_live(sbx: Sbx, sandbox: str) -> None:
    """The first line arrives while the command still waits for a file that only
    the test creates after reading it (the command gives up after a minute)."""
    waits = "echo ready; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; ls go"
    process = subprocess.Popen(
        [SBX, "exec", sandbox, waits], stdout=subprocess.PIPE, text=True, env=sbx.environment()
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    sbx("exec", sandbox, "touch go")
    assert process.communicate(timeout=120)[0] == "go\n"
    assert process.returncode == 0


def test_exec_timeout_is_status_124(sbx: Sbx, sandbox: str) -> None:
    done = sbx("exec", "--timeout", "1", sandbox, "--", "sleep", "60", check=False)
    assert done.returncode == 124
    assert "killed at its timeout" in done.stderr


def test_shell_reads_lines_and_keeps_the_directory(sbx: Sbx, sandbox: str) -> None:
    lines = "mkdir -p work/deep\ncd work/deep\n\npwd\necho hi > f; ls\necho oops >&2; false\n"
    done = sbx("shell", sandbox, stdin=lines, check=False)
    assert done.returncode == 1  # the last command's status
    assert done.stderr == "oops\n"
    out = done.stdout.splitlines()
    assert out[0].endswith("/work/deep")
    assert out[1:] == ["f"]
    assert sbx("exec", sandbox, "cat work/deep/f").stdout == "hi\n"
    assert sbx("shell", sandbox, stdin="true\nexit 3\necho never\n", check=False).returncode == 3


def test_shell_in_line_mode_on_a_terminal_prompts_with_the_directory(sbx: Sbx, sandbox: str) -> None:
    status, drawn = run_on_a_terminal(
        sbx, "shell", "--lines", sandbox, typed="mkdir -p sub\ncd sub\necho made\nexit 5\n"
    )
    assert status == 5
    assert f"{sandbox}:~$ " in drawn
    assert re.search(rf"{sandbox}:/\S*/sub\$ ", drawn)  # the prompt after cd
    assert re.search(r"\nmade\r?\n", drawn)  # the output, not the echo of "echo made"


def test_shell_prompts_with_a_hostile_directory_escaped(sbx: Sbx, sandbox: str) -> None:
    typed = 'mkdir -p "$(printf "x\\033]0;pwned\\007")"\ncd x*\nexit\n'
    status, drawn = run_on_a_terminal(sbx, "shell", "--lines", sandbox, typed=typed)
    assert status == 0
    assert re.search(r":/\S*/x\\x1b\]0;pwned\\x07\$ ", drawn), drawn
    assert "\x1b]0;pwned" not in drawn  # (readline's own sequences may be there)


# -- cp and ls --------------------------------------------------------------------------


def test_cp_files_both_ways(sbx: Sbx, sandbox: str, tmp_path: Path) -> None:
    source = tmp_path / "data.bin"
    source.write_bytes(os.urandom(300_000))
    sbx("cp", source, f"{sandbox}:in/copy.bin")
    sbx("exec", sandbox, "mkdir -p box")
    sbx("cp", source, f"{sandbox}:box")  # into an existing directory, under its own name
    assert sbx("exec", sandbox, "cmp in/copy.bin box/data.bin && echo same").stdout == "same\n"
    back = tmp_path / "back.bin"
    sbx("cp", f"{sandbox}:in/copy.bin", back)
    assert back.read_bytes() == source.read_bytes()
    into = tmp_path / "into"
    into.mkdir()
    sbx("cp", f"{sandbox}:box/data.bin", into)
    assert (into / "data.bin").read_bytes() == source.read_bytes()


def test_cp_directories_both_ways(sbx: Sbx, sandbox: str, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    files = make_tree(tree)
    (tree / ".venv" / "bin").mkdir(parents=True)
    (tree / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (tree / "__pycache__").mkdir()
    (tree / "__pycache__" / "a.pyc").write_bytes(b"\0")
    (tree / "outside").symlink_to("/etc/hostname")
    excluded = ("--exclude", ".venv", "-x", "__pycache__")
    first = sbx("cp", *excluded, tree, f"{sandbox}:project")
    assert first.stderr == f"sbx: skipped {tree}/outside: a symlink pointing outside the tree\n"
    sbx("cp", *excluded, tree, f"{sandbox}:project")  # project exists now: copied into it, as cp -r does
    listing = sbx("exec", sandbox, "find project -type f -o -type l | sort").stdout.split()
    assert listing == sorted([f"project/{n}" for n in files] + [f"project/tree/{n}" for n in files])
    sbx("cp", "-x", "deeper", f"{sandbox}:project", tmp_path / "back")
    back_files, back_dirs = tree_of(tmp_path / "back")
    expected = {name: data for name, data in files.items() if "deeper" not in name}
    assert back_files == {**expected, **{f"tree/{name}": data for name, data in expected.items()}}
    assert {"empty", "tree/empty"} <= back_dirs
    assert "sub/deeper" not in back_dirs


def test_cp_symlinks_policy_both_ways(sbx: Sbx, sandbox: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("from outside\n")
    tree = tmp_path / "linked"
    tree.mkdir()
    (tree / "kept").write_text("kept\n")
    (tree / "link").symlink_to(outside)
    refused = sbx("cp", "--symlinks", "refuse", tree, f"{sandbox}:refused", check=False)
    assert refused.returncode != 0
    assert "link" in refused.stderr
    assert sbx("exec", sandbox, "test -e refused || echo absent").stdout == "absent\n"
    copied = sbx("cp", "--symlinks", "copy-inside", tree, f"{sandbox}:copied")
    assert copied.stderr == ""
    assert sbx("exec", sandbox, "test -L copied/link || cat copied/link").stdout == "from outside\n"
    sbx("exec", sandbox, 'printf far > far.txt && ln -s "$PWD/far.txt" copied/away')
    back = tmp_path / "back"
    sbx("cp", "--symlinks", "copy-inside", f"{sandbox}:copied", back)
    assert (back / "away").read_bytes() == b"far"
    assert not (back / "away").is_symlink()
    bad = sbx("cp", "--symlinks", "follow", tree, f"{sandbox}:x", check=False)
    assert bad.returncode == 2
    assert "'skip', 'refuse', 'copy-inside'" in bad.stderr


def test_ls_lists_a_directory(sbx: Sbx, sandbox: str) -> None:
    sbx("exec", sandbox, "mkdir -p d/inner && printf 12345 > d/five && chmod 640 d/five")
    lines = sbx("ls", sandbox, "d").stdout.splitlines()
    assert [line.split()[-1] for line in lines] == ["five", "inner/"]
    assert lines[0].split()[:2] == ["-rw-r-----", "5"]
    assert lines[1].startswith("d")
    entries = json.loads(sbx("ls", "--json", sandbox, "d").stdout)
    assert [(e["name"], e["type"], e["size"]) for e in entries] == [
        ("five", "file", 5),
        ("inner", "dir", 4096),
    ]
    assert "d/" in sbx("ls", sandbox).stdout.split()


# -- progress bars ----------------------------------------------------------------------


def run_on_a_terminal(sbx: Sbx, *args: str | Path, typed: str | None = None) -> tuple[int, str]:
    """``sbx`` with its stderr on a pseudo-terminal (and its stdin and stdout
    too when ``typed`` is given, typed ahead): its status and what it drew there."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [SBX, *map(str, args)],
        stdin=subprocess.DEVNULL if typed is None else follower,
        stdout=subprocess.DEVNULL if typed is None else follower,
        stderr=follower,
        env={**sbx.environment(), "TERM": "xterm", "COLUMNS": "120"},
    )
    os.close(follower)
    if typed is not None:
        os.write(leader, typed.encode())
    drawn = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's last writer has gone
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    status = process.wait(timeout=300)
    reader.join(timeout=60)
    os.close(leader)
    return status, drawn.decode(errors="replace")


@pytest.mark.parametrize("sbx", ["local"], indirect=True)
def test_progress_bars_on_a_terminal_only(sbx: Sbx, sandbox: str, tmp_path: Path) -> None:
    large = tmp_path / "large.bin"
    large.write_bytes(os.urandom(LARGE))
    status, drawn = run_on_a_terminal(sbx, "cp", large, f"{sandbox}:large.bin")
    assert status == 0
    assert BAR in drawn and "MB" in drawn and "large.bin" in drawn
    status, drawn = run_on_a_terminal(sbx, "cp", f"{sandbox}:large.bin", tmp_path / "back.bin")
    assert status == 0
    assert BAR in drawn
    assert (tmp_path / "back.bin").read_bytes() == large.read_bytes()
    status, drawn = run_on_a_terminal(sbx, "cp", "--quiet", large, f"{sandbox}:quiet.bin")
    assert status == 0
    assert drawn == ""
    piped = sbx("cp", large, f"{sandbox}:piped.bin")  # stderr is a pipe, not a terminal
    assert piped.stderr == ""
    assert sbx("exec", sandbox, "cmp large.bin quiet.bin && cmp large.bin piped.bin && echo same").stdout == (
        "same\n"
    )


# -- bad input: one clear line, a non-zero status, never a traceback ---------------------


@pytest.mark.parametrize(
    "args",
    [
        ("exec", "{missing}", "--", "true"),
        ("ls", "{missing}"),
        ("shell", "{missing}"),
        ("cp", "{missing}:x", "local-copy"),
    ],
)
def test_an_unknown_id_is_a_clear_error(sbx: Sbx, args: tuple[str, ...], tmp_path: Path) -> None:
    missing = f"{sbx.provider}-00000000000000000000dead"
    done = sbx(*(arg.format(missing=missing) for arg in args), check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: ") and missing in done.stderr
    assert "--provider" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create", "--label", "no-equals-sign"), "expected KEY=VALUE"),
        (("list", "--label", "=value"), "expected KEY=VALUE"),
        (("cp", "a", "b"), "one of SOURCE and DEST must be ID:PATH"),
        (("exec", "some-id"), "Missing argument"),
        (("create", "--ttl", "soon"), "'soon' is not a valid float"),
    ],
)
def test_a_usage_mistake_is_status_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = Sbx(tmp_path, "local")(*args, check=False)
    assert done.returncode == 2
    assert message in done.stderr


def test_bad_values_and_missing_files_are_clear_errors(sbx: Sbx, sandbox: str, tmp_path: Path) -> None:
    negative = sbx("create", "--ttl", "-5", check=False)
    assert negative.returncode == 1 and "ttl" in negative.stderr
    absent = tmp_path / "absent.txt"
    missing_local = sbx("cp", absent, f"{sandbox}:x", check=False)
    assert missing_local.returncode == 1
    assert missing_local.stderr == f"Error: {absent}: No such file or directory\n"
    missing_remote = sbx("cp", f"{sandbox}:nothing-here", tmp_path / "y", check=False)
    assert missing_remote.returncode == 1 and "nothing-here" in missing_remote.stderr
    unknown = Sbx(tmp_path, "no-such-provider")("list", check=False)
    assert unknown.returncode == 1 and "no sandbox provider named 'no-such-provider'" in unknown.stderr


def test_python_dash_m_runs_the_same_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sandbox_sdk", "--help"], capture_output=True, text=True, check=True
    )
    assert "cp" in done.stdout and "providers" in done.stdout


# -- names chosen inside the sandbox ------------------------------------------------------

#: Names a sandbox can choose to attack the user's terminal (shell ``printf``
#: escapes, in double quotes): a title-setting OSC sequence, a forged line, a
#: C1 CSI byte (not UTF-8); a backslash, DEL, U+009B (CSI, in UTF-8) and
#: U+2028 (a line separator); and (a symlink's) a screen clear. Each with what
#: ``sbx`` shows.
HOSTILE = {
    r"t\033]0;pwned\007x": r"t\x1b]0;pwned\x07x",
    r"l1\nl2": r"l1\nl2",
    r"c\233d": r"c\x9bd",
    r"b\\\\s\177\302\233\342\200\250": r"b\\s\x7f\x9b\u2028",
}
HOSTILE_LINK = (r"s\033[2J", r"s\x1b[2J")
#: What a terminal would act on, raw: ESC, BEL, CR, DEL, a CSI byte (alone or
#: in U+009B), U+2028.
RAW_CONTROLS = (b"\x1b", b"\x07", b"\r", b"\x7f", b"\x9b", "\u2028".encode())


def raw_sbx(sbx: Sbx, *args: str | bytes | Path) -> subprocess.CompletedProcess[bytes]:
    """``sbx`` with bytes in and out, as a terminal would get them."""
    return subprocess.run([SBX, *args], check=False, capture_output=True, env=sbx.environment(), timeout=300)


def test_names_chosen_in_the_sandbox_are_shown_escaped(sbx: Sbx, sandbox: str, tmp_path: Path) -> None:
    names = " ".join(f'"$(printf "{name}")"' for name in HOSTILE)
    sbx("exec", sandbox, f'mkdir d && cd d && touch {names} && ln -s / "$(printf "{HOSTILE_LINK[0]}")"')

    listed = raw_sbx(sbx, "ls", sandbox, "d")
    assert listed.returncode == 0, listed.stderr
    assert not any(control in listed.stdout for control in RAW_CONTROLS), listed.stdout
    lines = listed.stdout.decode("ascii").splitlines()
    assert sorted(line.split(" ")[-1] for line in lines) == sorted([*HOSTILE.values(), HOSTILE_LINK[1]])

    copied = raw_sbx(sbx, "cp", f"{sandbox}:d", tmp_path / "back")  # the link is skipped, and named
    assert copied.returncode == 0, copied.stderr
    assert copied.stderr.decode("ascii") == (
        f"sbx: skipped d/{HOSTILE_LINK[1]}: a symlink pointing outside the tree\n"
    )
    assert sorted(os.listdir(tmp_path / "back")) == sorted(
        ["t\x1b]0;pwned\x07x", "l1\nl2", "c\udc9bd", "b\\s\x7f\x9b\u2028"]
    )

    (tmp_path / "up.txt").write_text("up\n")
    into_a_file = raw_sbx(sbx, "cp", tmp_path / "up.txt", f"{sandbox}:d/l1\nl2/".encode())
    missing = raw_sbx(sbx, "ls", sandbox, b"d/c\x9bd/t\x1b]0;pwned\x07x")
    for failed in (into_a_file, missing):
        assert failed.returncode == 1
        assert failed.stderr.startswith(b"Error: ") and failed.stderr.count(b"\n") == 1, failed.stderr
        assert not any(control in failed.stderr for control in RAW_CONTROLS), failed.stderr
