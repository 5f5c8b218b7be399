"""E2B cloud sandboxes: ``pip install "sandbox-sdk[e2b]"``.

:class:`E2BSandbox` runs commands through ``commands.run`` and moves files
through E2B's native file API; :class:`E2BProvider` creates, finds (by id or
by labels, kept as E2B metadata), lists and deletes sandboxes, with async
twins on the SDK's ``AsyncSandbox``. Credentials: ``E2B_API_KEY``.
"""

from sandbox_sdk.providers.e2b.provider import E2BProvider
from sandbox_sdk.providers.e2b.sandbox import E2BSandbox

__all__ = ["E2BProvider", "E2BSandbox"]
