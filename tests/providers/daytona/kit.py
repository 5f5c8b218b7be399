"""The conformance kit adapted to DaytonaSandbox, shared by the fake-server and live test modules."""

from __future__ import annotations

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.daytona import DaytonaSandbox
from sandbox_sdk.testing import SandboxConformanceTests


class DaytonaConformance(SandboxConformanceTests):
    """``SandboxConformanceTests``; subclasses supply the ``sandbox`` fixture."""

    async def test_async_twins(self, sandbox: BaseSandbox, workdir: str) -> None:
        """The kit's async test, then closing the loop's AsyncDaytona client (its aiohttp session)."""
        assert isinstance(sandbox, DaytonaSandbox)
        try:
            await super().test_async_twins(sandbox, workdir)
        finally:
            await sandbox.aclose()
