"""Conformance suites for provider authors (importable pytest classes).

- ``SandboxConformanceTests`` (fixture ``sandbox``): ``execute`` semantics and
  every ``BaseSandbox`` operation.
- ``TransferContractTests`` (fixture ``sandbox``): the transfer contract that
  native ``upload_files``/``download_files`` overrides must keep.
- ``ProviderConformanceTests`` (fixture ``provider``): the lifecycle contract.
- ``provided_sandbox``: the class-scoped ``sandbox`` fixture's body, for any provider.
- ``Gap``: a ``known_gaps`` entry whose check raises something other than ``AssertionError``.

See docs/provider-guide.md. Importing this package needs pytest.
"""

from sandbox_sdk.testing._suite import Gap
from sandbox_sdk.testing.fixtures import provided_sandbox
from sandbox_sdk.testing.provider_suite import ProviderConformanceTests
from sandbox_sdk.testing.sandbox_suite import HOSTILE_CONTENTS, HOSTILE_NAMES, SandboxConformanceTests
from sandbox_sdk.testing.transfer_suite import TransferContractTests

__all__ = [
    "HOSTILE_CONTENTS",
    "HOSTILE_NAMES",
    "Gap",
    "ProviderConformanceTests",
    "SandboxConformanceTests",
    "TransferContractTests",
    "provided_sandbox",
]
