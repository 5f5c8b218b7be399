"""The transfer and lifecycle contracts against E2B, through the real SDK and the fake service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from sandbox_sdk.providers.e2b import E2BSandbox
from sandbox_sdk.testing import ProviderConformanceTests, TransferContractTests
from tests.fakes.e2b_server import FakeE2BServer
from tests.providers.e2b.support import make_provider


class TestE2BTransferContract(TransferContractTests):
    known_gaps = {  # noqa: RUF012 - the kit's documented way to declare gaps
        "test_hostile_names_round_trip[non-utf8]": "envd's APIs carry paths as UTF-8 strings",
        "test_replacing_keeps_permission_bits": "files.write cannot set a mode; a renamed file keeps its own",
    }

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, fake_e2b: FakeE2BServer) -> Iterator[E2BSandbox]:
        provider = make_provider(fake_e2b)
        sandbox = provider.create(labels={"suite": "transfer-contract"})
        yield sandbox
        provider.delete(sandbox_id=sandbox.id)


class TestE2BProviderContract(ProviderConformanceTests):
    """Uses the ``provider`` fixture of conftest.py."""
