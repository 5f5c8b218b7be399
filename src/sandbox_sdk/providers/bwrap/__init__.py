"""The bubblewrap provider: real isolation on a plain Linux machine.

Each sandbox has one long-lived ``bwrap`` jail over its persistent workspace
(mounted at ``/workspace``, the working directory) and its private ``/tmp``,
started on first use and reached by every command from any process through a
unix socket. Everything else the jail sees is the host's system directories,
read-only. It has its own PID, IPC, UTS, cgroup and (unless
``network=True``) network namespaces, an empty environment plus what the
caller passes, and per-process resource limits. A command's process group is
killed when it ends or times out; what left the group runs on until the
sandbox is deleted, reaped or expires. See docs/bwrap.md for the model and
what it does not cover.
"""

from sandbox_sdk.providers.bwrap.provider import BwrapProvider
from sandbox_sdk.providers.bwrap.sandbox import BwrapSandbox, ResourceLimits

__all__ = ["BwrapProvider", "BwrapSandbox", "ResourceLimits"]
