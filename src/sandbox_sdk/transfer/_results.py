"""Per-file results of a transfer: the error codes, and helpers for native transfers."""

from __future__ import annotations

from sandbox_sdk import errors
from sandbox_sdk.models import FileDownloadResponse, FileUploadResponse

#: The per-file ``error`` of a transfer response for each error type (else its message).
TRANSFER_ERROR_CODES: dict[type[errors.SandboxError], str] = {
    errors.SandboxFileNotFoundError: "file_not_found",
    errors.SandboxPermissionError: "permission_denied",
    errors.SandboxIsADirectoryError: "is_directory",
    errors.InvalidPathError: "invalid_path",
}


def transfer_error(exc: BaseException) -> str:
    """The per-file error string of a transfer response for ``exc``."""
    for kind, code in TRANSFER_ERROR_CODES.items():
        if isinstance(exc, kind):
            return code
    return str(exc) or type(exc).__name__


def upload_result(path: str, error: BaseException | None = None) -> FileUploadResponse:
    """A native upload's per-file result: success, or ``error`` as its code."""
    return FileUploadResponse(path=path, error=None if error is None else transfer_error(error))


def download_result(
    path: str, content: bytes | None = None, error: BaseException | None = None
) -> FileDownloadResponse:
    """A native download's per-file result: ``content``, or ``error`` as its code."""
    if error is not None:
        return FileDownloadResponse(path=path, error=transfer_error(error))
    return FileDownloadResponse(path=path, content=content)
