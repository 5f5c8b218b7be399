"""What a client knows of one sandbox's in-sandbox state, in one object.

The SDK leaves state in a sandbox between calls: installed scripts and the
operation server (docs/protocol.md). What a client has learned of that state
lives in a :class:`Session`, one per sandbox object and scratch directory,
under one rule: **a command is planned from the session under its lock
(:meth:`Session.plan`), and the session learns only from a reply, after the
command ran (:meth:`Session.learn`)**. Nothing else writes it, so the
pipeline's threads and the async twins share it safely. Turning the server
off or trusting no installed state is a setting read at each plan.

What the session learns is never trusted for a result: a command that
leaves a script out still checks the installed copy's CRC-32, and a served
command reaches a server only after the server proved itself
(docs/security.md). Learning only decides what later commands carry.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from sandbox_sdk import protocol
from sandbox_sdk.models import ExecuteResponse

#: Launches in a row after which a sandbox still had no server: then a client stops launching.
MAX_FAILED_LAUNCHES = 3


@dataclass(frozen=True)
class Plan:
    """What one command of a script carries, decided by :meth:`Session.plan`:
    where the installed scripts are, whether it leaves the script out (known
    installed), asks the operation server first (over the provider's
    channel, if it has one), starts one first, or (``installed=False``)
    ignores every installed state."""

    scripts_dir: str
    omit_script: bool = False
    served: bool = False
    channel: bool = False
    launch: float | None = None
    installed: bool = True


class Session:
    """What a client has learned of one scratch directory of one sandbox:
    which scripts are installed, and what the operation server did.

    A provider that installs the scripts itself, read-only
    (``BaseSandbox.installed_scripts``), has them all known from the start;
    one with an operation channel (``BaseSandbox.operation_channel``) runs
    the server itself, so no command ever starts one.

    ``known`` maps a module to ``True`` once a command that carried its
    script ran it (and so installed it, if it could), to ``False`` once an
    installed copy was missing: from then on that script always travels.
    The server is ``wanted`` once a command found none (the next command
    starts one first), ``off`` for good once one stalled (a server that
    does not answer in time is not asked again: each ask would wait out
    the handshake) or after ``MAX_FAILED_LAUNCHES`` launches that left
    none."""

    def __init__(self, scratch_dir: str) -> None:
        self.scratch_dir = scratch_dir
        self.lock = threading.Lock()
        # The sandbox's settings, as they were at the latest call (see session_of).
        self.scripts_dir = protocol.scripts_dir_in(scratch_dir)
        self.preinstalled = False
        self.channel = False
        self.server = True
        self.server_idle = 600.0
        self.reuse_state = True
        self.known: dict[str, bool] = {}
        self.server_wanted = False
        self.server_off = False
        self.failed_launches = 0
        self.launches: set[str] = set()  # nonces of the commands in flight that start a server
        self.launched = False  # a command of this session started a server (the local provider stops it)

    def plan(self, module: str, *, seldom_run: bool = False) -> Plan:
        """How to send a command of ``module`` now. Without ``reuse_state``
        the command ships its script and runs it with a fresh ``python3``,
        whatever the sandbox holds. ``seldom_run``: the
        command runs the script only now and then (a shell grep's fallback),
        so it leaves the script out until it is known missing. A launch is
        reserved here (one command at a time starts a server); the command
        that carries it reports back through :meth:`learn` or
        :meth:`launch_dropped`."""
        with self.lock:
            if not self.reuse_state:
                return Plan(self.scripts_dir, installed=False)
            omit = self.known.get(module, seldom_run or self.preinstalled)
            served = self.server and not self.server_off and module not in protocol.UNSERVED
            launch = None
            if served and self.server_wanted and not self.channel:
                self.server_wanted = False
                launch = self.server_idle
            return Plan(
                self.scripts_dir,
                omit_script=omit,
                served=served,
                channel=served and self.channel,
                launch=launch,
            )

    def launching(self, nonce: str) -> None:
        """The command with ``nonce`` carries the launch its plan reserved."""
        with self.lock:
            self.launches.add(nonce)

    def launch_dropped(self) -> None:
        """The launch a plan reserved did not fit its command: a later one takes it."""
        with self.lock:
            self.server_wanted = True

    def learn(self, module: str, response: ExecuteResponse, nonce: str) -> bool:
        """Learn from ``response`` to a command of ``module``; whether it must
        be sent again in full (it left the script out, and there was none:
        only :data:`protocol.MISSING` prints the marker with this nonce)."""
        output = response.output
        with self.lock:
            launched = nonce in self.launches
            self.launches.discard(nonce)
            unserved = protocol.unserved_reason(output, nonce)
            if unserved == protocol.STALLED:
                self.server_off = True
            elif unserved == protocol.NO_SERVER:
                self.failed_launches += launched
                self.server_wanted = self.failed_launches < MAX_FAILED_LAUNCHES
            elif launched:
                self.failed_launches = 0
                self.launched = True
            if f"{protocol.NO_SCRIPT_MARKER} {nonce}" in output:
                self.known[module] = False
                return True
            if module not in self.known and protocol.has_frame(output, nonce):
                self.known[module] = True
            return False


#: Guards the making of a sandbox's sessions (two threads' first calls).
_MAKING = threading.Lock()


def session_of(sandbox: Any) -> Session:
    """The session of ``sandbox`` (a ``BaseSandbox``) for its current
    ``scratch_dir``, made on its first call, with the sandbox's settings of
    now: ``operation_server``, ``operation_server_idle`` and
    ``reuse_sandbox_state`` (class attributes a provider or a user may
    change at any time), and the provider's ``installed_scripts`` and
    ``operation_channel``."""
    sessions: dict[str, Session] | None = vars(sandbox).get("_sessions")
    if sessions is None:
        with _MAKING:
            sessions = vars(sandbox).setdefault("_sessions", {})
    session = sessions.get(sandbox.scratch_dir)
    if session is None:
        with _MAKING:
            session = sessions.setdefault(sandbox.scratch_dir, Session(sandbox.scratch_dir))
    installed = sandbox.installed_scripts
    with session.lock:
        session.preinstalled = installed is not None
        session.scripts_dir = protocol.scripts_dir_in(session.scratch_dir) if installed is None else installed
        session.channel = bool(sandbox.operation_channel)
        session.server = bool(sandbox.operation_server)
        session.server_idle = float(sandbox.operation_server_idle)
        session.reuse_state = bool(sandbox.reuse_sandbox_state)
    return session
