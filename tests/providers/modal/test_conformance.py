"""The conformance kit against ``ModalSandbox`` on the fake backend, through the real modal SDK.

Run twice: as is (the SDK's blocking API), and with every round trip forced
through the SDK's native ``.aio`` API (``aexecute``, ``aupload_files``,
``adownload_files``), so the async code path meets the whole contract too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial

import anyio
import pytest

from sandbox_sdk.models import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from sandbox_sdk.providers.modal import ModalProvider, ModalSandbox
from sandbox_sdk.testing import SandboxConformanceTests
from sandbox_sdk.transfer import Progress, UploadSource


class TestModalSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, modal_provider: ModalProvider) -> Iterator[ModalSandbox]:
        sandbox = modal_provider.create(labels={"suite": "conformance-sync"})
        yield sandbox
        modal_provider.delete(sandbox_id=sandbox.id)


class _AsyncDrivenSandbox(ModalSandbox):
    """Every blocking entry point answered by its native async twin on a fresh event loop."""

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return anyio.run(partial(self.aexecute, command, timeout=timeout))

    def upload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> list[FileUploadResponse]:
        return anyio.run(partial(self.aupload_files, list(files), progress=progress))

    def download_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> list[FileDownloadResponse]:
        return anyio.run(partial(self.adownload_files, list(paths), progress=progress))


@pytest.mark.slow
class TestModalSandboxAsyncApi(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, modal_provider: ModalProvider) -> Iterator[ModalSandbox]:
        created = modal_provider.create(labels={"suite": "conformance-async"})
        yield _AsyncDrivenSandbox(
            created.sandbox, timeout=created.timeout, max_output_bytes=created.max_output_bytes
        )
        modal_provider.delete(sandbox_id=created.id)
