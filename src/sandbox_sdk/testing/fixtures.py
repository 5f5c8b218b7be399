"""The scaffold every provider's suites share: a sandbox from a provider for a
class of tests, deleted afterwards."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider import SandboxProvider

#: The provider each sandbox of :func:`provided_sandbox` came from, so a suite
#: can open a second client of it (``SandboxSuite.reopen``).
PROVIDERS: weakref.WeakKeyDictionary[BaseSandbox, SandboxProvider[Any]] = weakref.WeakKeyDictionary()


def provided_sandbox(provider: SandboxProvider[Any], suite: str, **options: Any) -> Iterator[BaseSandbox]:
    """Create a sandbox labelled ``{"suite": suite}`` (with provider ``options``),
    yield it, delete it. Use it in a class-scoped ``sandbox`` fixture::

        @pytest.fixture(scope="class")
        @classmethod
        def sandbox(cls, provider: MyProvider) -> Iterator[BaseSandbox]:
            yield from provided_sandbox(provider, "conformance")
    """
    sandbox = provider.create(labels={"suite": suite}, **options)
    PROVIDERS[sandbox] = provider
    try:
        yield sandbox
    finally:
        provider.delete(sandbox_id=sandbox.id)
