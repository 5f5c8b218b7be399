"""The deepagents backend's sync and async methods stay in step: same parameters, each documented."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("deepagents", reason="the deepagents extra is not installed")

from sandbox_sdk.integrations.deepagents import DeepAgentsBackend
from tests.test_twins import public_methods, twin_problems


def test_every_public_method_has_an_async_twin_with_the_same_parameters() -> None:
    assert twin_problems(DeepAgentsBackend) == []


def test_every_public_method_has_a_docstring() -> None:
    methods = public_methods(DeepAgentsBackend)
    assert sorted(name for name in methods if not inspect.getdoc(getattr(DeepAgentsBackend, name))) == []
