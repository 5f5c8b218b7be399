"""The conformance suite against the local shell provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing import SandboxConformanceTests


class TestLocalSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
        root: Path = tmp_path_factory.mktemp("local-conformance")
        yield LocalSandbox(root)
