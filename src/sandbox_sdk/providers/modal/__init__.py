"""Modal sandboxes (``pip install "sandbox-sdk-py[modal]"``).

``ModalProvider`` creates ``modal.Sandbox`` es inside one Modal app and hands
them out as :class:`ModalSandbox`; our labels are Modal sandbox *tags*.
Credentials are the SDK's usual ones: ``MODAL_TOKEN_ID`` /
``MODAL_TOKEN_SECRET`` (or the active profile in ``~/.modal.toml``), and
``MODAL_SERVER_URL`` picks the server. Lifetimes follow the shared model:
``ttl`` (Modal's ``timeout``, at most 24 hours) and ``idle_timeout``, in
seconds. ``get_or_create(labels=...)`` names the sandbox after its labels
(:func:`sandbox_name`), so concurrent callers share one.

Platform limits worth knowing: all arguments of one exec are capped at 64
KiB (so ``ModalSandbox.limits.max_command_bytes`` is lower than the default);
``sandbox.filesystem`` needs absolute paths (relative ones are resolved
against the sandbox's working directory) and its writes are not atomic, so
uploads are staged under a hidden name and renamed into place.
"""

from sandbox_sdk.providers.modal.provider import DEFAULT_APP_NAME, ModalProvider, sandbox_name
from sandbox_sdk.providers.modal.sandbox import ModalSandbox

__all__ = ["DEFAULT_APP_NAME", "ModalProvider", "ModalSandbox", "sandbox_name"]
