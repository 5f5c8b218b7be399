"""Conformance suites for provider authors (importable pytest classes).

``SandboxConformanceTests`` checks ``execute`` and every ``BaseSandbox``
operation; see docs/provider-guide.md. Importing this package needs pytest.
"""

from sandbox_sdk.testing.sandbox_suite import HOSTILE_CONTENTS, HOSTILE_NAMES, SandboxConformanceTests

__all__ = ["HOSTILE_CONTENTS", "HOSTILE_NAMES", "SandboxConformanceTests"]
