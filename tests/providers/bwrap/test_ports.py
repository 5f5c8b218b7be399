"""Ports of a bubblewrap sandbox exposed to the host (docs/policy.md): the shared
contract (tests/providers/ports.py) on jails, each in its own network namespace,
whose server makes every forwarded connection from inside."""

from __future__ import annotations

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.local import LocalSandbox
from tests.providers.ports import ExposedPortTests


class TestBwrapPorts(ExposedPortTests):
    pass


def test_a_provider_without_a_way_in_says_so(local: LocalSandbox) -> None:
    with pytest.raises(errors.UnsupportedError, match="cannot expose ports"):
        local.expose_port(8000)
