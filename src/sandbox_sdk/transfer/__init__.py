"""Moving files in and out of a sandbox: the transfer half of ``BaseSandbox``.

Through ``execute()`` alone, small files travel many to a command (or many to
an output); a large file is staged in chunks, each within
``max_command_bytes``, into a hidden temp file beside its destination, then
checked (size and SHA-256) and renamed in one step; a large download is read
in chunks sized to ``max_output_bytes`` and checked against the SHA-256 the
sandbox computed. Client memory stays bounded by a few chunks.

One module per job: ``_sources`` (what an upload reads, progress),
``_staging`` (a large upload, chunk by chunk), ``_download`` (a large
download, chunk by chunk), ``_batch`` (``upload_files`` / ``download_files``,
small files packed many to a round trip) and ``_directories`` (trees as tar
archives). Each operation is a generator over a
:class:`~sandbox_sdk._core.SandboxCore`, declared on ``BaseSandbox``.

Providers with a native file API override ``_upload_batch`` /
``_download_batch``, the operations both twins of ``upload_files`` /
``download_files`` run (helpers: :func:`transfer_error`,
:func:`open_upload_source`); docs/transfers.md lists the guarantees an
override must keep, and
``sandbox_sdk.testing.transfer_suite.TransferContractTests`` checks them.
"""

from sandbox_sdk.transfer._directories import SymlinkPolicy, safe_extract
from sandbox_sdk.transfer._results import (
    TRANSFER_ERROR_CODES,
    TransferResults,
    download_result,
    transfer_error,
    upload_result,
)
from sandbox_sdk.transfer._sources import OpenedUpload, Progress, UploadSource, open_upload_source

__all__ = [
    "TRANSFER_ERROR_CODES",
    "OpenedUpload",
    "Progress",
    "SymlinkPolicy",
    "TransferResults",
    "UploadSource",
    "download_result",
    "open_upload_source",
    "safe_extract",
    "transfer_error",
    "upload_result",
]
