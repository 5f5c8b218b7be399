"""LangChain's standard sandbox suite (``langchain-tests``) against DeepAgentsBackend.

The suite needs deepagents and langchain-tests (``scripts/test-deepagents``
installs them in their own environments); without them it is skipped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("deepagents")
pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import SandboxIntegrationTests

from sandbox_sdk.integrations.deepagents import PROTOCOL_0_7, DeepAgentsBackend
from sandbox_sdk.providers import bwrap
from sandbox_sdk.providers.bwrap.sandbox import PATH as BWRAP_PATH
from sandbox_sdk.providers.local import BASE_ENV, LocalSandbox

# The suite runs ``python`` inside the sandbox, where only ``python3`` may exist.
#: Local: this interpreter's directory first on PATH.
LOCAL_ENV = {"PATH": f"{Path(sys.executable).parent}:{BASE_ENV['PATH']}"}
#: bwrap: a directory in the jail's private /tmp with a ``python`` alias.
BWRAP_ALIAS_DIR = "/tmp/.python-alias"

OVERWRITE = "deepagents 0.7: write overwrites an existing file instead of refusing it"
ABSOLUTE = "deepagents 0.7: glob returns absolute paths; this test expects paths relative to the root"
FILES_ONLY = "deepagents 0.7: glob returns regular files only; this test expects directories too"

#: Tests encoding 0.6 behaviour that the 0.7 protocol changed. The adapter follows
#: the installed protocol, so with 0.7 each must fail (strict xfail).
CHANGED_IN_0_7 = {
    "test_write_existing_file_fails": OVERWRITE,
    "test_glob": ABSOLUTE,
    "test_glob_basic_pattern": ABSOLUTE,
    "test_glob_hidden_files_explicitly": ABSOLUTE,
    "test_glob_with_character_class": ABSOLUTE,
    "test_glob_with_question_mark": ABSOLUTE,
    "test_glob_with_directories": FILES_ONLY,
}

pytestmark = pytest.mark.filterwarnings(
    # langchain-tests' own class-scoped ``sandbox_backend`` fixture is an instance method.
    "ignore:Class-scoped fixtures defined as instance methods:DeprecationWarning"
)


class DeepAgentsStandardTests(SandboxIntegrationTests):
    """The standard suite as every provider runs it here; subclasses add the ``sandbox`` fixture."""

    @property
    def sandbox_root_dir(self) -> str:
        # Per process and class, so that concurrent runs never share files.
        return f"/tmp/sbx-deepagents-{os.getpid()}/{type(self).__name__}/"

    @pytest.fixture(autouse=True)
    def changed_in_0_7(self, request: pytest.FixtureRequest) -> None:
        reason = CHANGED_IN_0_7.get(request.node.originalname)
        if PROTOCOL_0_7 and reason:
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason, raises=AssertionError))

    @staticmethod
    def cleanup(backend: DeepAgentsBackend, root_dir: str) -> None:
        backend.sandbox.execute(f"chmod -R u+rwX {root_dir}; rm -rf {root_dir}")


class TestLocalSandboxStandard(DeepAgentsStandardTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeepAgentsBackend]:
        root: Path = tmp_path_factory.mktemp("deepagents-local")
        backend = DeepAgentsBackend(LocalSandbox(root, env=LOCAL_ENV))
        try:
            yield backend
        finally:
            cls.cleanup(backend, cls().sandbox_root_dir)


class TestBwrapSandboxStandard(DeepAgentsStandardTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeepAgentsBackend]:
        provider = bwrap.BwrapProvider(
            tmp_path_factory.mktemp("deepagents-bwrap"), env={"PATH": f"{BWRAP_ALIAS_DIR}:{BWRAP_PATH}"}
        )
        sandbox = provider.create()
        try:
            alias = sandbox.execute(
                f"mkdir -p {BWRAP_ALIAS_DIR} && ln -s /usr/bin/python3 {BWRAP_ALIAS_DIR}/python"
            )
            assert alias.exit_code == 0, alias.output
            yield DeepAgentsBackend(sandbox)
        finally:
            provider.delete(sandbox_id=sandbox.id)
