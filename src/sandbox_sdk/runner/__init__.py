"""The remote runner: sandboxes on one machine, used from another over a WebSocket.

- :class:`Runner` (:mod:`~sandbox_sdk.runner.service`) executes requests
  through a local backend provider (bubblewrap by default), listening for
  clients or dialled out to a coordinator; one :class:`~sandbox_sdk.runner.session.Session`
  per connection.
- :class:`Coordinator` (:mod:`~sandbox_sdk.runner.coordinator`), an ASGI app
  pairing runners with clients by id and relaying their frames unread.
- The protocol both speak with the client,
  :class:`sandbox_sdk.providers.remote.RemoteProvider`, and the tokens and
  TLS of all three, are :mod:`sandbox_sdk.wire`, below both.
- :mod:`~sandbox_sdk.runner.cli`: ``python -m sandbox_sdk.runner``.

Needs the ``remote`` extra (``websockets``; ``starlette`` and ``uvicorn`` for
the coordinator). Import from the modules: this package imports nothing.
See docs/remote.md.
"""
