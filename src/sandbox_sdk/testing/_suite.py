"""What the sandbox-level suites share: declared gaps and a fresh directory per test."""

from __future__ import annotations

import copy
import posixpath
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

import pytest

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.testing.fixtures import PROVIDERS


@dataclass(frozen=True)
class Gap:
    """A declared gap whose check fails with an error of its own rather than a
    failed assertion: ``Gap("why", raises=SandboxPermissionError)``."""

    reason: str
    raises: type[BaseException] | tuple[type[BaseException], ...]


def gap_marker(gap: str | Gap) -> pytest.MarkDecorator:
    """The strict xfail of a declared gap, naming what the check raises (a reason
    alone: ``AssertionError``, a check not met), so that a failure of any other
    kind fails the test instead of passing as the expected one."""
    declared = gap if isinstance(gap, Gap) else Gap(gap, AssertionError)
    return pytest.mark.xfail(reason=declared.reason, raises=declared.raises, strict=True)


class SandboxSuite:
    """Base of the suites that take a ``sandbox`` fixture."""

    #: ``{"test_name": "reason"}`` (or ``"test_name[param-id]"``) for behaviour
    #: the provider cannot offer: the check's assertion fails. A :class:`Gap`
    #: in place of the reason names another exception the check raises. Each
    #: becomes a strict xfail, so the entry must go once the gap is fixed.
    known_gaps: ClassVar[Mapping[str, str | Gap]] = {}

    @pytest.fixture(autouse=True)
    def _declared_gaps(self, request: pytest.FixtureRequest) -> None:
        # A gap names a test, or one parametrization of it ("test_x[id]").
        gap = self.known_gaps.get(request.node.name) or self.known_gaps.get(request.node.originalname)
        if gap:
            request.applymarker(gap_marker(gap))

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
