"""Sandboxes on another machine, reached over a WebSocket: ``pip install "sandbox-sdk-py[remote]"``.

A runner (``python -m sandbox_sdk.runner``) on the machine that holds the
files executes each command through a local backend (bubblewrap by default);
:class:`RemoteProvider` reaches it directly or through a coordinator that
pairs runners with clients by id. ``execute`` (and ``aexecute``, natively
async) is one request over one shared connection, so every file operation,
transfer and search works unchanged. See docs/remote.md.

- A lost connection fails the requests in flight with
  ``ProviderUnavailableError`` (a command is never retried: it may have
  run); the next request dials again.
- Cancelling a call (``asyncio`` cancellation, Ctrl-C, a timeout) cancels
  the request: the runner kills the command's process group.
- ``get_or_create`` by labels is not atomic across clients (two clients
  racing may each create one); one client at a time, it finds what it made.
"""

from sandbox_sdk.providers.remote.provider import URL_ENV, RemoteProvider
from sandbox_sdk.providers.remote.sandbox import RemoteSandbox

__all__ = ["URL_ENV", "RemoteProvider", "RemoteSandbox"]
