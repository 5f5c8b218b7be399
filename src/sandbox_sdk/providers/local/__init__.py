"""The local shell provider: commands run with ``bash`` on this machine.

.. warning::
   **No isolation.** A command can read, change and delete anything the
   current user can, reach the network, and leave processes behind. Use it for
   tests and trusted code; use :mod:`sandbox_sdk.providers.bwrap` for anything
   an agent writes.
"""

from sandbox_sdk.providers.local.provider import LocalProvider, TrackedLocalSandbox
from sandbox_sdk.providers.local.sandbox import BASE_ENV, LocalSandbox

__all__ = ["BASE_ENV", "LocalProvider", "LocalSandbox", "TrackedLocalSandbox"]
