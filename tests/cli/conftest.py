"""The fixtures of the ``sbx`` tests: ``sbx`` (the command with a private
state directory, on the local and on the bwrap provider) and ``sandbox``
(one created with it, removed afterwards)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.support import Sbx


@pytest.fixture(params=["local", "bwrap"])
def sbx(request: pytest.FixtureRequest, tmp_path: Path) -> Sbx:
    return Sbx(tmp_path / "state", request.param)


@pytest.fixture
def sandbox(sbx: Sbx) -> Iterator[str]:
    sandbox_id = sbx.create()
    yield sandbox_id
    sbx("rm", sandbox_id)
