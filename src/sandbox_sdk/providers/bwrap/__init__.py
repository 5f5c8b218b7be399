"""The bubblewrap provider: real isolation on a plain Linux machine.

Every ``execute()`` starts a fresh ``bwrap`` jail over the sandbox's
persistent workspace (mounted at ``/workspace``, the working directory) and
its private ``/tmp``. Everything else the jail sees is the host's system
directories, read-only. It has its own PID, IPC, UTS, cgroup and (unless
``network=True``) network namespaces, an empty environment plus what the
caller passes, and per-process resource limits; when the command ends or
times out the whole PID namespace is killed. See docs/bwrap.md for the model
and what it does not cover.
"""

from sandbox_sdk.providers.bwrap.provider import BwrapProvider
from sandbox_sdk.providers.bwrap.sandbox import BwrapSandbox, ResourceLimits

__all__ = ["BwrapProvider", "BwrapSandbox", "ResourceLimits"]
