"""The provider conformance suite against the local (unisolated) provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalProvider
from sandbox_sdk.testing.provider_suite import ProviderConformanceTests


class TestLocalProvider(ProviderConformanceTests):
    @pytest.fixture
    def provider(self, tmp_path: Path) -> Iterator[LocalProvider]:
        yield LocalProvider(tmp_path / "state")
