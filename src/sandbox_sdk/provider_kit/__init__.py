"""What a third-party provider needs beyond :class:`~sandbox_sdk.BaseSandbox`
and :class:`~sandbox_sdk.SandboxProvider`; the shipped providers use the same.

- Running a command as a host process with the ``execute()`` contract
  (own process group, merged output capped as it arrives, the whole group
  killed at the timeout): :func:`run_process`, :func:`bash_script` for
  commands too long for one argument, :data:`LARGE_COMMAND_BYTES` to declare
  as ``max_command_bytes`` when using it, :data:`TIMEOUT_EXIT_CODE`.
  :func:`arun_process` is its ``aexecute`` twin, which kills the group when
  the call is cancelled.
- Checking arguments before any round trip: :func:`check_path`, and
  :func:`command_seconds` for ``execute``'s ``timeout`` (``None`` or ``0``:
  your default, as ``run`` reads it), :func:`check_timeout` where the default
  is another side's (``None`` for it).
- Native streaming of a command's output: override
  ``BaseSandbox._stream_command``, which gets a :class:`Command` and an
  :data:`OutputSink` (see docs/processes.md); :class:`Collected` keeps the
  result's output up to its cap, :func:`can_clean_up` says whether an
  interrupted operation may still kill what it started;
  :data:`OWN_GROUP_PREFIX` makes a ``bash -c`` command a process group of its
  own whose id is the shell's pid, to kill whole.
- Native operations: subclass :class:`NativeRequest` for your platform's
  calls, override an ``_op_*`` operation to yield them and ``_perform`` /
  ``_aperform`` to carry them out (the sync and async APIs then share one body;
  a flow waits with :class:`Sleep`, ``time.sleep`` or ``anyio.sleep`` as it runs);
  :class:`Pipeline` keeps several requests or sub-operations in flight;
  :data:`Operation` and :data:`Request` type the overrides.
- Native transfers: :func:`transfer_error` (the per-file error codes),
  :func:`open_upload_source`, :func:`upload_result` / :func:`download_result`
  and :func:`new_token` for staging names.
- One lifetime model (``ttl``, ``idle_timeout`` in seconds): :class:`Lifetime`
  checks them against a platform's maxima, :class:`KeepAlive` paces the
  lifetime extensions of platforms whose deadline use does not move.
- Sandboxes kept as directories on this machine: :class:`HostStateProvider`
  (ids, labels, ttl and idle timeouts, locking, reaping), as ``local`` and
  ``bwrap`` use it.
"""

from sandbox_sdk._core import (
    NativeRequest,
    Operation,
    Pipeline,
    Request,
    check_path,
    check_timeout,
    command_seconds,
    new_token,
)
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk._process import Collected, Command, OutputSink
from sandbox_sdk._provider_flows import Sleep
from sandbox_sdk.models import TIMEOUT_EXIT_CODE
from sandbox_sdk.provider_kit.groups import OWN_GROUP_PREFIX
from sandbox_sdk.provider_kit.host_process import (
    ARGV_COMMAND_BYTES,
    LARGE_COMMAND_BYTES,
    arun_process,
    bash_script,
    kill_group,
    run_process,
)
from sandbox_sdk.provider_kit.host_state import WORKSPACE_DIR, HostStateProvider, SandboxRecord, mark_used
from sandbox_sdk.provider_kit.lifetime import DEFAULT_IDLE_TIMEOUT, KeepAlive, Lifetime, check_seconds
from sandbox_sdk.transfer import (
    TRANSFER_ERROR_CODES,
    OpenedUpload,
    Progress,
    UploadSource,
    download_result,
    open_upload_source,
    transfer_error,
    upload_result,
)

__all__ = [
    "ARGV_COMMAND_BYTES",
    "DEFAULT_IDLE_TIMEOUT",
    "LARGE_COMMAND_BYTES",
    "OWN_GROUP_PREFIX",
    "TIMEOUT_EXIT_CODE",
    "TRANSFER_ERROR_CODES",
    "WORKSPACE_DIR",
    "Collected",
    "Command",
    "HostStateProvider",
    "KeepAlive",
    "Lifetime",
    "NativeRequest",
    "OpenedUpload",
    "Operation",
    "OutputSink",
    "Pipeline",
    "Progress",
    "Request",
    "SandboxRecord",
    "Sleep",
    "UploadSource",
    "arun_process",
    "bash_script",
    "can_clean_up",
    "check_path",
    "check_seconds",
    "check_timeout",
    "command_seconds",
    "download_result",
    "kill_group",
    "mark_used",
    "new_token",
    "open_upload_source",
    "run_process",
    "transfer_error",
    "upload_result",
]
