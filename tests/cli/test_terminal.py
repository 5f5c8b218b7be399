"""``sbx shell`` as a real terminal and ``sbx exec`` with stdin and Ctrl-C,
driven through tmux (a terminal a test can type into, resize and read), on
the local and bwrap providers. tmux is installed by scripts/setup."""

from __future__ import annotations

import hashlib
import secrets
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.support import SBX, Sbx

#: How long a test waits for the terminal to show what it is owed.
SCREEN_SECONDS = 60.0
#: A shell test that the process whose pid is in file ``{0}`` still runs: one
#: killed may stay a zombie a moment, until its new parent reaps it, and
#: ``kill -0`` still finds a zombie.
RUNS = """s=$(sed 's/.*) //' /proc/$(cat {0})/stat 2>/dev/null) && [ "${{s%% *}}" != Z ]"""
#: The line a window's shell prints when the command it ran has exited.
EXITED = "[sbx-test exited "


class Tmux:
    """A tmux server of the test's own (its socket in the test's directory)
    with one window running a command: keys in, the screen out. The command
    runs under a shell that prints its exit status (:data:`EXITED`): tmux
    3.3a, under load, sometimes never reaps a window's own process, which
    then never shows as exited."""

    def __init__(self, socket: Path, command: str, env: dict[str, str], *, cols: int, rows: int) -> None:
        self.socket = socket
        environment = shlex.join(["env", *(f"{key}={value}" for key, value in env.items())])
        line = f"{environment} bash -c {shlex.quote(command + f'; echo {shlex.quote(EXITED)}$?]')}"
        self("new-session", "-d", "-s", "t", "-x", str(cols), "-y", str(rows), line)
        self("set-option", "-t", "t", "remain-on-exit", "on")

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, check=True, timeout=60
        )
        return done.stdout

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        self("send-keys", "-t", "t", "-l", text)
        self.keys("Enter")

    def screen(self) -> str:
        """What the window shows, and its history (each line without its trailing spaces)."""
        return self("capture-pane", "-p", "-t", "t", "-S", "-200")

    def until(self, wanted: str, *, after: int = 0) -> int:
        """Wait until ``wanted`` is on the screen, found after the ``after``-th
        character of its history; where it ends."""
        deadline = time.monotonic() + SCREEN_SECONDS
        while (found := self.screen().find(wanted, after)) < 0:
            assert time.monotonic() < deadline, f"{wanted!r} never appeared:\n{self.screen()}"
            time.sleep(0.1)
        return found + len(wanted)

    def exit_status(self) -> int:
        """The status the window's command exited with, once it has."""
        at = self.until(EXITED)
        return int(self.screen()[at:].partition("]")[0])

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, check=False)


@pytest.fixture
def terminal(sbx: Sbx, tmp_path: Path) -> Iterator[Callable[..., Tmux]]:
    """Opens a tmux window running ``sbx`` with the given arguments (or a shell line)."""
    opened: list[Tmux] = []

    def open_window(*args: str, line: str | None = None, cols: int = 100, rows: int = 30) -> Tmux:
        command = line if line is not None else shlex.join([str(SBX), *args])
        passed = (
            "SANDBOX_SDK_",
            "PATH",
            "PYTHONPATH",
            "HOME",
        )  # (tmux's server has an environment of its own)
        env = {key: value for key, value in sbx.environment().items() if key.startswith(passed)}
        window = Tmux(tmp_path / f"tmux-{len(opened)}", command, env, cols=cols, rows=rows)
        opened.append(window)
        return window

    yield open_window
    for window in opened:
        window.close()


def test_shell_is_a_real_terminal(sandbox: str, terminal: Callable[..., Tmux]) -> None:
    """``python3`` through ``sbx shell``: a prompt, ``1+1`` gives 2, Ctrl-C
    interrupts a busy loop, Ctrl-D leaves it; the window's size reaches the
    sandbox and follows a resize; the shell's exit status is sbx's."""
    window = terminal("shell", sandbox)
    window.type("stty size; echo [$TERM]")
    at = window.until("30 100\n[xterm-256color]")
    window.type("python3 -q")
    at = window.until(">>>", after=at)
    window.type("while True: pass")
    window.keys("Enter")
    at = window.until("...", after=at)
    window.keys("C-c")
    at = window.until("KeyboardInterrupt\n>>>", after=at)
    window.type("1+1")
    at = window.until("\n2\n>>>", after=at)
    window.keys("C-d")
    window("resize-window", "-t", "t", "-x", "120", "-y", "40")
    window.type("stty size")
    window.until("40 120", after=at)
    window.type("exit 3")
    assert window.exit_status() == 3


def test_less_starts_and_quits_on_the_terminal(sandbox: str, terminal: Callable[..., Tmux]) -> None:
    """A full-screen program: ``less`` draws a screenful (29 lines and its
    prompt in a 30-line window), goes to the end, and quits."""
    window = terminal("shell", sandbox)
    window.type('seq 1 500 | less; echo "less-$((6 * 7))"')
    window.until("\n28\n29\n:")  # (less draws on the alternate screen: what capture-pane shows)
    window.keys("G")
    window.until("\n499\n500\n(END)")
    window.keys("q")
    window.until("\nless-42")  # the shell's again, its echo of the line showing no 42
    window.type("exit")
    assert window.exit_status() == 0


@pytest.mark.parametrize("stdin", ["terminal", "pipe"])
def test_ctrl_c_in_exec_kills_the_remote_group_and_exits_130(
    sbx: Sbx, sandbox: str, terminal: Callable[..., Tmux], stdin: str
) -> None:
    """On a terminal (stdin not forwarded) and with stdin forwarded from a
    pipe that stays open: Ctrl-C ends ``sbx exec`` with 130, and the remote
    command (and what it started in its group) is gone by then."""
    remote = "sleep 600 & echo $! > bg.pid; echo $$ > fg.pid; echo started; wait"
    exec_line = shlex.join([str(SBX), "exec", sandbox, remote])
    line = exec_line if stdin == "terminal" else f"sleep 600 | {exec_line}"
    window = terminal(line=line)
    window.until("started")
    window.keys("C-c")
    assert window.exit_status() == 130
    for pid_file in ("fg.pid", "bg.pid"):
        alive = sbx("exec", sandbox, RUNS.format(pid_file), check=False)
        assert alive.returncode != 0, f"{pid_file}'s process still runs:\n{window.screen()}"


def test_closing_the_terminal_kills_the_remote_command(
    sbx: Sbx, sandbox: str, terminal: Callable[..., Tmux]
) -> None:
    """The terminal closed (SIGHUP) under ``sbx exec``: the command it ran
    in the sandbox does not outlive it."""
    window = terminal("exec", sandbox, "echo $$ > hup.pid; echo started; sleep 600")
    window.until("started")
    window.close()
    deadline = time.monotonic() + SCREEN_SECONDS
    while sbx("exec", sandbox, RUNS.format("hup.pid"), check=False).returncode == 0:
        assert time.monotonic() < deadline, "the command outlived its terminal"
        time.sleep(0.2)


def test_exec_forwards_stdin(sbx: Sbx, sandbox: str, tmp_path: Path) -> None:
    assert sbx("exec", sandbox, "cat", stdin="hi\n").stdout == "hi\n"
    assert sbx("exec", sandbox, "wc -c", stdin="").stdout.strip() == "0"  # an end of file at once
    assert sbx("exec", "-n", sandbox, "cat", stdin="not forwarded\n").stdout == ""
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * 20_000)  # larger than one chunk of a small command
    with data.open("rb") as source:
        done = subprocess.run(
            [SBX, "exec", sandbox, "sha256sum | cut -c1-64"],
            stdin=source,
            capture_output=True,
            text=True,
            env=sbx.environment(),
            timeout=300,
            check=True,
        )
    assert done.stdout.strip() == hashlib.sha256(data.read_bytes()).hexdigest()


def test_watch_prints_changes_until_ctrl_c(sbx: Sbx, sandbox: str) -> None:
    """``sbx watch``: a line per change, and Ctrl-C (SIGINT) ends it with 130
    and the watcher in the sandbox with it."""
    directory = f"watched-{secrets.token_hex(4)}"
    sbx("exec", sandbox, f"mkdir {directory}")
    process = subprocess.Popen(
        [SBX, "watch", sandbox, directory],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sbx.environment(),
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        assert process.stderr.readline() == f"sbx: watching {directory} (inotify)\n"
        sbx("exec", sandbox, f"touch {directory}/new")
        assert process.stdout.readline() == f"created {directory}/new\n"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 130
    finally:
        process.kill()
    pattern = f"[{directory[0]}]{directory[1:]}"  # (matches the watcher, not this pgrep's own shell)
    assert sbx("exec", sandbox, f"pgrep -f -- {shlex.quote(pattern)}", check=False).returncode == 1
