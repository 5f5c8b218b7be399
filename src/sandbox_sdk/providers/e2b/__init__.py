"""E2B cloud sandboxes: ``pip install "sandbox-sdk-py[e2b]"``.

:class:`E2BSandbox` runs commands through ``commands.run`` and moves files
through E2B's native file API; :class:`E2BProvider` creates, finds (by id or
by labels, kept as E2B metadata), lists and deletes sandboxes, with async
twins on the SDK's ``AsyncSandbox``. Credentials: ``E2B_API_KEY``.

What the platform does not give, and what this provider does about it:

- A sandbox dies at a deadline (E2B's ``timeout``) that use does not move.
  ``idle_timeout`` and ``ttl`` are kept in the sandbox's metadata, and a
  handle moves the deadline with ``set_timeout`` at most once per tenth of
  the idle timeout, never past ``ttl`` (:class:`E2BLifetime`). E2B's maximum
  uptime (24 h on Pro, 1 h on Hobby: the provider's ``max_lifetime``) caps both.
- A sandbox that expired is gone without a trace: ``get_or_create`` by labels
  then creates a new, empty one, and logs that it does (a warning naming the
  expired sandbox when this provider handed it out).
- envd's command deadline kills the shell only. Each command therefore runs
  in its own session (``setsid``, from util-linux, which E2B's templates
  have), and on timeout one more command kills that process group.
- An upload is written to a hidden file beside its target and renamed over
  it (envd's ``Move`` is ``os.Rename``), so it is atomic; the replaced file's
  mode, owner and extended attributes are not kept, and a symlink at the
  target is replaced rather than followed.
- A download is read whole into memory (``files.read(format="bytes")``) and
  checked only by HTTP framing, not by a SHA-256 as the script path does.
- envd reports a command killed by a signal as exit code -1 (Go's
  convention) and names the signal: it reads as 128 + N, as on every provider.
- ``get`` connects with ``Sandbox.connect``, which resumes a paused sandbox;
  ``list`` shows paused sandboxes too (status ``"paused"``).
"""

from sandbox_sdk.providers.e2b.provider import E2BProvider
from sandbox_sdk.providers.e2b.sandbox import E2BLifetime, E2BSandbox

__all__ = ["E2BLifetime", "E2BProvider", "E2BSandbox"]
