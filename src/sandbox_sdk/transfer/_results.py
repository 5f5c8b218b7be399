"""Per-file results of a transfer: the result list, the error codes, and
helpers for native transfers."""

from __future__ import annotations

from typing import Generic, Self, TypeVar

from sandbox_sdk import errors
from sandbox_sdk.models import FileDownloadResponse, FileUploadResponse

ResponseT = TypeVar("ResponseT", FileUploadResponse, FileDownloadResponse)
#: Failed items named in a :class:`~sandbox_sdk.errors.TransferFailedError`'s message.
SHOWN_FAILURES = 5


class TransferResults(list[ResponseT], Generic[ResponseT]):
    """The per-item responses of ``upload_files`` / ``download_files``, in
    order: a list (one failed item never stops the others, and deepagents'
    backend contract is this list), which can also raise for its failures.

    Chosen over a ``raise_on_error=True`` flag: one return type and one
    signature for every provider, native transfers included, and the caller
    who raises still has every item's response on the exception."""

    @property
    def failed(self) -> list[ResponseT]:
        """The responses whose ``error`` is set."""
        return [response for response in self if response.error is not None]

    def raise_for_errors(self) -> Self:
        """Raise :class:`~sandbox_sdk.errors.TransferFailedError` if any item
        failed; else return the results, for chaining."""
        failed = self.failed
        if failed:
            shown = "; ".join(f"{r.path!r}: {r.error}" for r in failed[:SHOWN_FAILURES])
            more = f" (and {len(failed) - SHOWN_FAILURES} more)" if len(failed) > SHOWN_FAILURES else ""
            raise errors.TransferFailedError(
                f"{len(failed)} of {len(self)} items failed: {shown}{more}", failed
            )
        return self


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


def malformed_reply(what: str, value: object) -> errors.SandboxRuntimeError:
    """The error for a script's reply that is not of its shape: a sandbox
    can answer for the script, so no field of a reply is trusted unchecked."""
    return errors.SandboxRuntimeError(f"{what}: malformed reply from the sandbox: {value!r:.200}")


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
