"""A command runner for platforms whose exec API cannot kill what it started (Docker
Engine's exec, Kubernetes' ``exec`` subresource): the timeout is enforced inside the
sandbox, and the runner reports the command's exit status itself.

A provider runs ``bash -c RUNNER sandbox-sdk SECONDS HOW ARG NONCE`` as the exec
(:func:`runner_call` builds the arguments) and reads:

- the command's output (stderr joined to stdout, so the merged output keeps its order)
  on the exec's **stdout**;
- one line ``NONCE STATUS`` on the exec's **stderr**, written by the runner once the
  command has ended (:func:`reported_status` reads it). The command's own stderr never
  reaches that stream, so the report is the runner's. It is the cross-check of the exit
  status the platform reports, which can be missing or racy (the Kubernetes exec
  status channel: kubernetes-client/python #2156, #2328, #1840).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sandbox_sdk.models import TIMEOUT_EXIT_CODE
from sandbox_sdk.provider_kit.host_process import ARGV_COMMAND_BYTES

#: The file each command touches, so a provider can tell how long a sandbox has been idle
#: where the platform keeps no time of a sandbox's last exec.
USED_MARKER = "/tmp/.sandbox-sdk-used"

#: What a sandbox's image must have, checked when a sandbox is created: exits 3 and says
#: ``missing: NAMES`` where it lacks one.
IMAGE_CHECK = (
    'missing=; for p in bash python3; do command -v $p >/dev/null 2>&1 || missing="$missing $p"; done\n'
    'if [ -n "$missing" ]; then echo "missing:$missing"; exit 3; fi\n'
)
#: Exit status of :data:`IMAGE_CHECK` when the image lacks something.
IMAGE_LACKS = 3

#: The program every ``execute`` runs as ``bash -c RUNNER sandbox-sdk SECONDS HOW ARG NONCE``.
#: The command runs as a session and process group of its own (``setsid`` of a background
#: job, which leads no group, does not fork: its pid is the group's id), and a timer in a
#: group of its own kills that whole group with SIGKILL at the deadline, after telling the
#: runner (SIGUSR1), which then reports and exits 124 (the client also checks its own
#: clock: a command that exits 124 by itself before the deadline is not a timeout). A
#: command killed by signal N exits 128+N, as bash reports it. The runner's own stderr
#: (bash's job notices) is dropped; its report goes to the exec's stderr (fd 4, which
#: nothing the command starts inherits). The timer's group is killed once the command ends.
#:
#: ``HOW`` is ``arg`` (``ARG`` is the command) or ``stdin`` (``ARG`` is a byte count): a
#: command too long for one argument arrives on the exec's stdin, exactly that many bytes,
#: which the command's shell sources as fd 3 (so the runner needs no end of stdin: the
#: Kubernetes v4 exec protocol cannot send one). :func:`runner_call` puts ``exec 3<&-``
#: first, so nothing the command starts inherits it.
RUNNER = (
    "{ : >|" + USED_MARKER + "; } 2>/dev/null\n"
    "exec 4>&2 2>/dev/null\n"
    "timed_out=\n"
    "trap timed_out=1 USR1\n"
    'if [ "$2" = stdin ]; then exec 3< <(head -c "$3" 4>&-)\n'
    '  setsid bash -c ". /dev/fd/3" </dev/null 2>&1 4>&- &\n'
    'else setsid bash -c "$3" </dev/null 2>&1 4>&- & fi\n'
    "pid=$!\n"
    "exec 3<&-\n"
    'setsid bash -c \'sleep "$1"; kill -USR1 "$2"; kill -KILL -- -"$3"\' timer "$1" $$ "$pid"'
    " </dev/null >/dev/null 2>&1 4>&- &\n"
    "timer=$!\n"
    'wait "$pid"\n'
    "status=$?\n"
    'while [ -n "$timed_out" ] && kill -0 "$pid" 2>/dev/null; do wait "$pid"; done\n'
    'kill -KILL -- -"$timer" 2>/dev/null\n'
    f'[ -n "$timed_out" ] && status={TIMEOUT_EXIT_CODE}\n'
    'printf "%s %s\\n" "$4" "$status" >&4\n'
    'exit "$status"\n'
)


@dataclass(frozen=True)
class RunnerCall:
    """One ``execute`` as an exec: its ``argv``, the bytes to send on its stdin (``None``:
    no stdin), and the nonce its status report starts with."""

    argv: list[str]
    stdin: bytes | None
    nonce: str


def runner_call(command: str, seconds: float, *, argv_bytes: int = ARGV_COMMAND_BYTES) -> RunnerCall:
    """The exec that runs ``command`` with a timeout of ``seconds``: as an argument up to
    ``argv_bytes`` of UTF-8, else over stdin (a platform whose exec arguments travel in a
    URL sets a lower bound)."""
    nonce = f"sandbox-sdk-status-{secrets.token_hex(8)}"
    script = command.encode("utf-8")
    head = ["bash", "-c", RUNNER, "sandbox-sdk", f"{seconds:.3f}"]
    if len(script) <= argv_bytes:
        return RunnerCall([*head, "arg", command, nonce], None, nonce)
    staged = b"exec 3<&-; " + script
    return RunnerCall([*head, "stdin", str(len(staged)), nonce], staged, nonce)


def reported_status(report: bytes, nonce: str) -> int | None:
    """The exit status the runner reported on the exec's stderr, or ``None`` if it did not
    (it was killed, or the stream broke before its line)."""
    for line in report.decode("ascii", "replace").splitlines():
        tag, _, status = line.partition(" ")
        if tag == nonce and status.isdigit():
            return int(status)
    return None
