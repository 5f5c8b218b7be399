"""What the sandbox-level suites share: declared gaps and a fresh directory per test."""

from __future__ import annotations

import copy
import posixpath
import secrets
from collections.abc import Iterator
from typing import ClassVar

import pytest

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.testing.fixtures import PROVIDERS


class SandboxSuite:
    """Base of the suites that take a ``sandbox`` fixture."""

    #: ``{"test_name": "reason"}`` (or ``"test_name[param-id]"``) for behaviour
    #: the provider cannot offer; each becomes a strict xfail, so the entry must
    #: go once the gap is fixed.
    known_gaps: ClassVar[dict[str, str]] = {}
    #: Why a command on this platform cannot outlive its ``execute()`` call
    #: (``None``: it can). The tests that need a background process
    #: (``background_tests``) are then expected to fail, though not strictly:
    #: a short command may still end before its call does.
    background_gap: ClassVar[str | None] = None
    #: The tests that need a command to outlive ``execute()`` (names, or ``name[id]``).
    background_tests: ClassVar[frozenset[str]] = frozenset()

    @pytest.fixture(autouse=True)
    def _declared_gaps(self, request: pytest.FixtureRequest) -> None:
        # A gap names a test, or one parametrization of it ("test_x[id]").
        names = (request.node.name, request.node.originalname)
        reason = self.known_gaps.get(names[0]) or self.known_gaps.get(names[1])
        if reason:
            request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
        elif self.background_gap and any(name in self.background_tests for name in names):
            request.applymarker(pytest.mark.xfail(reason=self.background_gap, strict=False))

    @pytest.fixture
    def workdir(self, sandbox: BaseSandbox) -> Iterator[str]:
        """A fresh, empty directory inside the sandbox for one test."""
        path = f"suite-{secrets.token_hex(6)}"
        sandbox.mkdir(path)
        yield path
        sandbox.execute(f"chmod -R u+rwx {path} 2>/dev/null; rm -rf {path}")

    def reopen(self, sandbox: BaseSandbox) -> BaseSandbox:
        """A second client object for ``sandbox``, as another program would
        open it: the provider's ``get`` for a sandbox of ``provided_sandbox``,
        else a copy of the object (override this where your provider can do better)."""
        provider = PROVIDERS.get(sandbox)
        return copy.copy(sandbox) if provider is None else provider.get(sandbox.id)

    @staticmethod
    def p(workdir: str, *parts: str) -> str:
        """A path below the test's working directory in the sandbox."""
        return posixpath.join(workdir, *parts)
