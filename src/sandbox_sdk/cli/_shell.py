"""``sbx shell``: a line loop over ``run``; no terminal needed, lines can be piped in.

Each line runs in a new ``bash`` in the directory the previous line ended in
(so ``cd`` carries over; shell variables do not). The line is followed by a
marker line carrying ``$PWD`` on stdout, which is cut from the output shown;
the command's stderr goes to ours.
"""

from __future__ import annotations

import sys

import click

from sandbox_sdk import BaseSandbox, SandboxError
from sandbox_sdk.cli._text import shown

#: Starts the line that reports the directory a command ended in (never shown).
CWD_MARKER = "\x1esbx-cwd:"
#: Appended to each command line: keep its status, report the directory, exit with the status.
EPILOGUE = f'\nsbx_status=$?; printf "\\n{CWD_MARKER}%s\\n" "$PWD"; exit $sbx_status'


def run_shell(sandbox: BaseSandbox) -> int:
    """Read lines from stdin and run each in ``sandbox`` until ``exit [N]`` or
    the end of input; returns the exit status (``N``, else the last command's)."""
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401  (line editing and history for input())
    cwd: str | None = None
    status = 0
    while (line := read_line(shell_prompt(sandbox.id, cwd) if interactive else None)) is not None:
        words = line.split()
        if words[:1] == ["exit"] and len(words) <= 2:
            return int(words[1]) if len(words) == 2 and words[1].isdigit() else status
        if not words:
            continue
        try:
            response = sandbox.run(line.rstrip("\n") + EPILOGUE, cwd=cwd)
        except SandboxError as exc:
            click.echo(f"Error: {shown(str(exc))}", err=True)
            status = 1
            continue
        output, ended_in = split_marker(response.stdout)
        sys.stdout.write(output)
        sys.stdout.flush()
        sys.stderr.write(response.stderr)
        cwd = ended_in or cwd
        status = 1 if response.exit_code is None else response.exit_code
    return status


def shell_prompt(sandbox_id: str, cwd: str | None) -> str:
    """The sandbox and the directory the last line ended in, escaped: the
    sandbox chose that directory's name."""
    return shown(f"{sandbox_id}:{cwd or '~'}") + "$ "


def read_line(prompt: str | None) -> str | None:
    """The next line (with ``prompt`` on a terminal), ``None`` at the end of input."""
    if prompt is None:
        return sys.stdin.readline() or None
    try:
        return input(prompt)
    except EOFError:
        return None


def split_marker(output: str) -> tuple[str, str | None]:
    """The command's own output, and the directory it ended in (``None`` if it
    exited before the marker, or the output was cut)."""
    head, marker, tail = output.rpartition("\n" + CWD_MARKER)
    return (head, tail.rstrip("\n")) if marker else (output, None)
