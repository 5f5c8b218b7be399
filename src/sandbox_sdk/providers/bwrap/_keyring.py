"""Each jail starts with a session keyring of its own, new and empty.

A process inherits its parent's session keyring, so without this every jail
would hold the caller's (and, as root, one shared by all jails): a key the
caller added there would be readable inside. A session keyring belongs to
one thread's credentials, and a child inherits those of the thread that
forks it; so the jail is started from a short-lived thread that has joined a
new anonymous session keyring (``keyctl(KEYCTL_JOIN_SESSION_KEYRING,
NULL)``), and the caller's own threads keep theirs. The seccomp filter
denies the keyring calls inside, so the jail cannot reach even its own.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from sandbox_sdk import errors
from sandbox_sdk.providers.bwrap._seccomp import syscall_number

T = TypeVar("T")
KEYCTL_JOIN_SESSION_KEYRING = 1


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def join_new_session_keyring() -> None:
    """Give the calling thread a new, empty session keyring."""
    keyctl = syscall_number("keyctl")
    if _libc().syscall(keyctl, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        code = ctypes.get_errno()
        raise errors.ProviderUnavailableError(
            f"cannot give the bwrap jail a session keyring of its own: {os.strerror(code)}"
        )


def in_new_session_keyring(run: Callable[[], T]) -> T:
    """``run()`` in a new thread with a new session keyring; what it returns
    or raises. Processes it starts inherit that keyring. The thread is a
    daemon: if the caller is interrupted and exits, it does not wait for it."""
    outcome: Future[T] = Future()

    def thread_main() -> None:
        try:
            join_new_session_keyring()
            outcome.set_result(run())
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            outcome.set_exception(exc)

    threading.Thread(target=thread_main, name="sandbox-sdk-bwrap-jail", daemon=True).start()
    return outcome.result()
