"""The transfer and lifecycle contracts against Modal, through the real SDK and the fake backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk.providers.modal import ModalProvider, ModalSandbox
from sandbox_sdk.testing import ProviderConformanceTests, TransferContractTests


class TestModalTransferContract(TransferContractTests):
    known_gaps = {  # noqa: RUF012 - the kit's documented way to declare gaps
        "test_hostile_names_round_trip[non-utf8]": "the file API carries paths as protobuf (UTF-8) strings",
    }

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, modal_provider: ModalProvider) -> Iterator[ModalSandbox]:
        sandbox = modal_provider.create(labels={"suite": "transfer-contract"})
        yield sandbox
        modal_provider.delete(sandbox_id=sandbox.id)


class TestModalProviderContract(ProviderConformanceTests):
    @pytest.fixture
    def provider(self, modal_provider: ModalProvider) -> ModalProvider:
        return modal_provider
