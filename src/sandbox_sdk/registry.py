"""``get_provider``: a provider by name, from the ``sandbox_sdk.providers`` entry points.

The registry is the entry-point group: each provider is registered by name as
a ``"module:Class"`` string (the shipped ones in pyproject.toml, third-party
ones in their own distributions), imported only when ``get_provider`` is
called with its name, so a missing cloud SDK costs nothing until its provider
is asked for.

Why this module and not :mod:`sandbox_sdk.provider`: ``get_provider`` is
typed per shipped name (``get_provider("bwrap")`` is a ``BwrapProvider`` for
a type checker), so it must name the provider classes, and every provider
imports :mod:`sandbox_sdk.provider` for the class it subclasses. Here, above
the providers (nothing below imports this module), one ``typing.overload``
per shipped name returns its class, imported under ``TYPE_CHECKING`` only:
at runtime this module imports no provider, and for a type checker the
arrows still all point down, so neither graph has a circle
(tests/test_layout.py holds both to that).
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal, overload

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider import SandboxProvider

if TYPE_CHECKING:  # the shipped providers, for get_provider's overloads (a cloud SDK is optional)
    from sandbox_sdk.providers.bwrap import BwrapProvider
    from sandbox_sdk.providers.daytona import DaytonaProvider
    from sandbox_sdk.providers.docker import DockerProvider
    from sandbox_sdk.providers.e2b import E2BProvider
    from sandbox_sdk.providers.kubernetes import KubernetesProvider
    from sandbox_sdk.providers.local import LocalProvider
    from sandbox_sdk.providers.modal import ModalProvider
    from sandbox_sdk.providers.remote import RemoteProvider

#: Entry-point group under which providers register, by name.
ENTRY_POINT_GROUP = "sandbox_sdk.providers"
#: The environment variable naming the provider ``get_provider()`` returns when given no name.
PROVIDER_ENV = "SANDBOX_SDK_PROVIDER"
#: The provider ``get_provider()`` returns when given no name and ``SANDBOX_SDK_PROVIDER`` is unset.
DEFAULT_PROVIDER = "bwrap"


def available_providers() -> list[str]:
    """Names of the providers registered under the ``sandbox_sdk.providers`` entry point."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def install_hint(name: str) -> str:
    """How to install what provider ``name`` needs: the ``pip install`` line of
    the extra named after it in the distribution that registers it."""
    for point in entry_points(group=ENTRY_POINT_GROUP, name=name):
        if point.dist is not None and name in (point.dist.metadata.get_all("Provides-Extra") or []):
            return f"pip install '{point.dist.name}[{name}]'"
    return f"install the package that provides the {name!r} provider"


@overload
def get_provider(name: Literal["bwrap"], **config: Any) -> BwrapProvider: ...
@overload
def get_provider(name: Literal["local"], **config: Any) -> LocalProvider: ...
@overload
def get_provider(name: Literal["remote"], **config: Any) -> RemoteProvider: ...
@overload
def get_provider(name: Literal["daytona"], **config: Any) -> DaytonaProvider: ...
@overload
def get_provider(name: Literal["docker"], **config: Any) -> DockerProvider: ...
@overload
def get_provider(name: Literal["e2b"], **config: Any) -> E2BProvider: ...
@overload
def get_provider(name: Literal["kubernetes"], **config: Any) -> KubernetesProvider: ...
@overload
def get_provider(name: Literal["modal"], **config: Any) -> ModalProvider: ...
@overload
def get_provider(name: str | None = None, **config: Any) -> SandboxProvider[BaseSandbox]: ...


def get_provider(name: str | None = None, **config: Any) -> SandboxProvider[Any]:
    """The provider registered as ``name``, constructed with ``config``.

    Without a name: the one ``SANDBOX_SDK_PROVIDER`` names, else ``bwrap``.
    A shipped name gives its class to a type checker (``get_provider("bwrap")``
    is a ``BwrapProvider``); third-party packages register theirs under the
    same entry-point group."""
    if name is None:
        name = os.environ.get(PROVIDER_ENV) or DEFAULT_PROVIDER
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        raise errors.ProviderUnavailableError(
            f"no sandbox provider named {name!r}; installed: {', '.join(available_providers()) or 'none'}"
        )
    try:
        factory = matches[0].load()
    except ImportError as exc:
        raise errors.ProviderUnavailableError(
            f"provider {name!r} is registered but cannot be imported ({exc}): {install_hint(name)}"
        ) from exc
    provider = factory(**config)
    if not isinstance(provider, SandboxProvider):
        raise errors.ProviderUnavailableError(f"entry point {name!r} did not produce a SandboxProvider")
    return provider
