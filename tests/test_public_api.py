"""The public API as a user meets it: documented everywhere, typed per provider
name for a type checker, and ``get_provider()`` choosing a provider by itself.

The deepagents backend is checked the same way in its own environments
(tests/integrations/deepagents/test_deepagents_twins.py); the core
environment has no deepagents.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import sandbox_sdk.providers
from sandbox_sdk import ProviderUnavailableError, get_provider
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.local import LocalProvider

ROOT = Path(__file__).resolve().parents[1]
#: The public modules a user imports; each provider package is added below.
PUBLIC_MODULES = [
    "sandbox_sdk",
    "sandbox_sdk.errors",
    "sandbox_sdk.models",
    "sandbox_sdk.protocol",
    "sandbox_sdk.provider",
    "sandbox_sdk.registry",
    "sandbox_sdk.base",
    "sandbox_sdk.transfer",
    "sandbox_sdk.provider_kit",
    "sandbox_sdk.testing",
    "sandbox_sdk.integrations.inspect",
    "sandbox_sdk.integrations.mcp",
    *(f"sandbox_sdk.providers.{m.name}" for m in pkgutil.iter_modules(sandbox_sdk.providers.__path__)),
]


def public_names(module: ModuleType) -> list[str]:
    return list(getattr(module, "__all__", None) or (n for n in vars(module) if not n.startswith("_")))


def undocumented(obj: object) -> Iterator[str]:
    """Qualified names of ``obj`` and its public methods and properties
    (inherited ones included, as ``help()`` shows them) without a docstring.
    A test case of a conformance suite is named for what it checks; dataclass
    fields are data."""
    if inspect.isfunction(obj):
        if not inspect.getdoc(obj):
            yield f"{obj.__module__}.{obj.__qualname__}"
        return
    if not inspect.isclass(obj):
        return
    if not inspect.getdoc(obj):
        yield f"{obj.__module__}.{obj.__qualname__}"
    fields = {field.name for field in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
    for owner in obj.__mro__:
        if not owner.__module__.startswith("sandbox_sdk"):
            continue
        for name, value in vars(owner).items():
            if name.startswith(("_", "test_")) or name in fields:
                continue
            function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if (inspect.isfunction(function) or isinstance(value, property)) and not inspect.getdoc(
                getattr(obj, name)
            ):
                yield f"{owner.__module__}.{owner.__qualname__}.{name}"


def test_every_public_function_and_method_has_a_docstring() -> None:
    missing: set[str] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in public_names(module):
            obj = getattr(module, name)
            if (getattr(obj, "__module__", None) or "").startswith("sandbox_sdk"):
                missing.update(undocumented(obj))
    assert sorted(missing) == []


def test_the_docstring_walk_sees_a_missing_docstring() -> None:
    class Documented:
        """A class."""

        def documented(self) -> None:
            """A method."""

        async def abare(self) -> None:
            pass

    Documented.__module__ = "sandbox_sdk.example"
    assert [name.rsplit(".", 1)[-1] for name in undocumented(Documented)] == ["abare"]


def test_get_provider_without_a_name_uses_the_environment_or_bwrap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SANDBOX_SDK_PROVIDER", "local")
    assert isinstance(get_provider(state_dir=tmp_path), LocalProvider)
    monkeypatch.delenv("SANDBOX_SDK_PROVIDER")
    assert isinstance(get_provider(state_dir=tmp_path), BwrapProvider)
    monkeypatch.setenv("SANDBOX_SDK_PROVIDER", "no-such-provider")
    with pytest.raises(ProviderUnavailableError, match="no-such-provider"):
        get_provider()


SNIPPET = """\
from sandbox_sdk import get_provider

reveal_type(get_provider("bwrap"))
reveal_type(get_provider("bwrap").create())
reveal_type(get_provider("local").get("x"))
reveal_type(get_provider("remote"))
reveal_type(get_provider("daytona"))
reveal_type(get_provider("e2b"))
reveal_type(get_provider("modal").get_or_create(labels={"thread": "1"}))
reveal_type(get_provider())
get_provider("local").create(ttl=600, idle_timeout="an hour")
get_provider("bwrap", state_dirr="state")
get_provider("docker", imagee="debian")
get_provider("local").create(ttll=5)
get_provider("bwrap").get_or_create(labels={"thread": "1"}, network=True, setupp="make")


def configure(name: str) -> None:
    get_provider(name, state_dir="state", api_key="k")
    get_provider(name, state_dirr="state")
"""
REVEALED = [
    "sandbox_sdk.providers.bwrap.provider.BwrapProvider",
    "sandbox_sdk.providers.bwrap.sandbox.BwrapSandbox",
    "sandbox_sdk.providers.local.provider.TrackedLocalSandbox",
    "sandbox_sdk.providers.remote.provider.RemoteProvider",
    "sandbox_sdk.providers.daytona.provider.DaytonaProvider",
    "sandbox_sdk.providers.e2b.provider.E2BProvider",
    "sandbox_sdk.providers.modal.sandbox.ModalSandbox",
    "sandbox_sdk.provider.SandboxProvider[sandbox_sdk.base.BaseSandbox]",
]


def test_get_provider_is_typed_per_name_for_mypy_users(tmp_path: Path) -> None:
    """mypy --strict, with no expression of type Any allowed, on a user's
    snippet outside the repository: the errors are the mistyped lifetime and
    the misspelt options, of get_provider (for a shipped name and for any
    name) and of create and get_or_create."""
    (tmp_path / "snippet.py").write_text(SNIPPET)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--disallow-any-expr",
            "--cache-dir",
            str(tmp_path / "cache"),
            "snippet.py",
        ],
        check=False,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert re.findall(r'Revealed type is "([^"]+)"', result.stdout) == REVEALED, result.stdout + result.stderr
    # The lifetime every provider takes is typed, and so are the providers' own options
    # (get_provider's); the package's own files are not this check's (MYPYPATH makes them
    # the user's code to mypy, without the project's settings).
    errors = [
        line for line in result.stdout.splitlines() if line.startswith("snippet.py:") and ": error:" in line
    ]
    assert {line.split(":")[1] for line in errors} == {"11", "12", "13", "14", "15", "20"}, result.stdout
    (lifetime,) = [line for line in errors if line.startswith("snippet.py:11:")]
    assert 'Argument "idle_timeout"' in lifetime and "[arg-type]" in lifetime
    options = (("12", "state_dirr"), ("13", "imagee"), ("14", "ttll"), ("15", "setupp"), ("20", "state_dirr"))
    for line, option in options:
        assert any(f'snippet.py:{line}: error: Unexpected keyword argument "{option}"' in e for e in errors)
