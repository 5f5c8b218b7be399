"""The sandbox conformance kit against the bubblewrap provider's sandboxes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_sdk import BaseSandbox
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.testing import SandboxConformanceTests, provided_sandbox


class TestBwrapSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, module_provider: BwrapProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(module_provider, "conformance")
