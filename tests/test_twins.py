"""Every public sync method has an async twin ``a<name>`` with the same
parameters (names, kinds, defaults, annotations), and every public method,
async twins included, has a docstring (its own, or the one of the method it
overrides).

``CLASSES`` lists the classes held to this; add any class with a sync and an
async API. scripts/generate_twins.py writes BaseSandbox's twins from one
declaration each; a provider that overrides one of a pair keeps the pair in
step by hand, and this test holds it to that.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scripts import generate_twins

#: ``(module, class, SDK the module needs or None)``.
CLASSES = [
    ("sandbox_sdk.base", "BaseSandbox", None),
    ("sandbox_sdk.process", "Process", None),
    ("sandbox_sdk.providers.local", "LocalSandbox", None),
    ("sandbox_sdk.providers.bwrap", "BwrapSandbox", None),
    ("sandbox_sdk.providers.daytona", "DaytonaSandbox", "daytona"),
    ("sandbox_sdk.providers.e2b", "E2BSandbox", "e2b"),
    ("sandbox_sdk.providers.modal", "ModalSandbox", "modal"),
    ("sandbox_sdk.providers.remote", "RemoteSandbox", "websockets"),
    ("sandbox_sdk.provider", "SandboxProvider", None),
    ("sandbox_sdk.provider_kit", "HostStateProvider", None),
    ("sandbox_sdk.providers.local", "LocalProvider", None),
    ("sandbox_sdk.providers.bwrap", "BwrapProvider", None),
    ("sandbox_sdk.providers.daytona", "DaytonaProvider", "daytona"),
    ("sandbox_sdk.providers.e2b", "E2BProvider", "e2b"),
    ("sandbox_sdk.providers.modal", "ModalProvider", "modal"),
    ("sandbox_sdk.providers.remote", "RemoteProvider", "websockets"),
]
IDS = [name for _, name, _ in CLASSES]
#: Twins that cannot be ``a<name>`` (``await`` is a keyword), as the generator names them.
ASYNC_NAMES = {name: twin for entry in generate_twins.ENTRIES for name, twin in entry.async_names}


def load(module: str, name: str, sdk: str | None) -> type[Any]:
    if sdk is not None:
        pytest.importorskip(sdk)
    cls: type[Any] = getattr(importlib.import_module(module), name)
    return cls


def public_methods(cls: type[Any]) -> dict[str, Callable[..., Any]]:
    """The public functions of ``cls`` and its bases (not properties or attributes)."""
    methods: dict[str, Callable[..., Any]] = {}
    for name in dir(cls):
        attribute = inspect.getattr_static(cls, name)
        if isinstance(attribute, staticmethod | classmethod):
            attribute = attribute.__func__
        if not name.startswith("_") and inspect.isfunction(attribute):
            methods[name] = attribute
    return methods


def parameters(function: Callable[..., Any]) -> list[inspect.Parameter]:
    """Names, kinds, defaults and annotations (as written: the modules use
    ``from __future__ import annotations``), in order."""
    return list(inspect.signature(function).parameters.values())


def is_async(function: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


def twin_problems(cls: type[Any]) -> list[str]:
    """What is wrong with the twins of ``cls``; an async-only method (closing
    an async client, say) needs no sync twin."""
    methods = public_methods(cls)
    problems = []
    for name, function in sorted(methods.items()):
        twin_name = ASYNC_NAMES.get(name, f"a{name}")
        twin = methods.get(twin_name)
        if is_async(function):
            continue
        if twin is None or not is_async(twin):
            problems.append(f"{name} has no async twin {twin_name}")
        elif parameters(twin) != parameters(function):
            problems.append(f"{twin_name}{inspect.signature(twin)} != {name}{inspect.signature(function)}")
    return problems


@pytest.mark.parametrize(("module", "name", "sdk"), CLASSES, ids=IDS)
def test_every_public_method_has_an_async_twin_with_the_same_parameters(
    module: str, name: str, sdk: str | None
) -> None:
    assert twin_problems(load(module, name, sdk)) == []


@pytest.mark.parametrize(("module", "name", "sdk"), CLASSES, ids=IDS)
def test_every_public_method_has_a_docstring(module: str, name: str, sdk: str | None) -> None:
    cls = load(module, name, sdk)
    undocumented = [method for method in public_methods(cls) if not inspect.getdoc(getattr(cls, method))]
    assert sorted(undocumented) == []


class Drifted:
    """Twins gone wrong in each way the test must catch."""

    def read(self, path: str, *, offset: int = 0) -> str:
        """Sync."""
        return path

    async def aread(self, path: str, *, offset: int = 1) -> str:
        """Another default."""
        return path

    def write(self, path: str) -> None:
        """No twin."""

    def stat(self, path: str) -> None:
        """A twin that is not async."""

    def astat(self, path: str) -> None:
        """Not async."""

    def delete(self, path: str, *, recursive: bool = False) -> None:
        """In step."""

    async def adelete(self, path: str, *, recursive: bool = False) -> None:
        """In step."""


def test_drifted_twins_are_caught() -> None:
    assert twin_problems(Drifted) == [
        "astat has no async twin aastat",
        "aread(self, path: 'str', *, offset: 'int' = 1) -> 'str' != "
        "read(self, path: 'str', *, offset: 'int' = 0) -> 'str'",
        "stat has no async twin astat",
        "write has no async twin awrite",
    ]


TOY_DECLARATIONS = '''
from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Mapping

T = TypeVar("T")
Flow = Generator[str, Any, T]
RETRIES = 3


class Flows(Generic[T]):
    def _drive(self, flow: Flow[T]) -> T:
        try:
            reply = next(flow)
            while True:
                reply = flow.send(f"sync {reply}")
        except StopIteration as stop:
            return stop.value

    async def _adrive(self, flow: Flow[T]) -> T:
        return self._drive(flow)

    def _op_create(self, *, labels: Mapping[str, str] | None = None, **options: Any) -> Flow[T]:
        """Create one."""
        return (yield f"create {labels} {options}")

    def _op_get(self, sandbox_id: str, /, retries: int = RETRIES) -> Flow[T]:
        """Get one, trying ``retries`` times.

        More about it."""
        return (yield f"get {sandbox_id} {retries}")

    def _op__internal(self) -> Flow[T]:
        """Not public: no twins."""
        return (yield "internal")
'''


def test_the_generator_handles_generic_bases_and_every_kind_of_parameter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "toy_flows.py").write_text(TOY_DECLARATIONS)
    entry = generate_twins.Twins(
        declarations="toy_flows.py",
        declaring_class="Flows",
        output="toy_provider.py",
        generated_class="Provider",
        docstring="A provider.",
        module_docstring="Generated twins of a toy.",
        bases="Flows[T]",
        source_root=".",
        async_names=(("create", "create_async"),),
    )
    source = generate_twins.generate(entry, tmp_path)
    assert "class Provider(Flows[T]):" in source
    assert "from toy_flows import RETRIES, Flows, T" in source
    assert "if TYPE_CHECKING:\n    from collections.abc import Mapping" in source
    assert "_internal" not in source
    (tmp_path / "toy_provider.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    provider = importlib.import_module("toy_provider").Provider()
    assert provider.create(labels={"a": "b"}, size=1) == "sync create {'a': 'b'} {'size': 1}"
    assert provider.get("x") == "sync get x 3"
    assert asyncio.run(provider.create_async()) == "sync create None {}"
    assert not hasattr(provider, "acreate")
    assert asyncio.run(provider.aget("x", 2)) == "sync get x 2"
    assert inspect.getdoc(provider.aget) == "Async twin of :meth:`get`: get one, trying ``retries`` times."
    assert twin_problems(type(provider)) == ["create has no async twin acreate"]  # named apart, on purpose


def test_the_committed_twins_are_up_to_date() -> None:
    assert generate_twins.main(["--check"]) == 0
