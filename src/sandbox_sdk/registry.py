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

import inspect
import os
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack, overload

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider import SandboxProvider

if TYPE_CHECKING:  # the shipped providers, for get_provider's overloads (a cloud SDK is optional)
    from sandbox_sdk.providers.bwrap import BwrapProvider
    from sandbox_sdk.providers.bwrap.provider import BwrapProviderOptions
    from sandbox_sdk.providers.daytona import DaytonaProvider
    from sandbox_sdk.providers.daytona.provider import DaytonaProviderOptions
    from sandbox_sdk.providers.docker import DockerProvider
    from sandbox_sdk.providers.docker.provider import DockerProviderOptions
    from sandbox_sdk.providers.e2b import E2BProvider
    from sandbox_sdk.providers.e2b.provider import E2BProviderOptions
    from sandbox_sdk.providers.kubernetes import KubernetesProvider
    from sandbox_sdk.providers.kubernetes.provider import KubernetesProviderOptions
    from sandbox_sdk.providers.local import LocalProvider
    from sandbox_sdk.providers.local.provider import LocalProviderOptions
    from sandbox_sdk.providers.modal import ModalProvider
    from sandbox_sdk.providers.modal.provider import ModalProviderOptions
    from sandbox_sdk.providers.remote import RemoteProvider
    from sandbox_sdk.providers.remote.provider import RemoteProviderOptions

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


class ProviderOptions(TypedDict, total=False):
    """Every keyword argument of every shipped provider, of any type: what
    ``get_provider`` takes where the name is not one of theirs (a variable, a
    third-party name), so that a misspelt one is still caught by a type checker.
    tests/test_registry.py keeps it the union of the shipped providers' own."""

    state_dir: Any
    limits: Any
    network: Any
    env: Any
    max_output_bytes: Any
    bwrap: Any
    root_sandbox_user: Any
    extra_ro_binds: Any
    timeout: Any
    url: Any
    token: Any
    cafile: Any
    tls: Any
    connect_timeout: Any
    request_timeout: Any
    api_key: Any
    api_url: Any
    target: Any
    shell: Any
    start_timeout: Any
    listing_lag: Any
    base_url: Any
    image: Any
    user: Any
    command_timeout: Any
    engine_timeout: Any
    domain: Any
    sandbox_url: Any
    template: Any
    max_lifetime: Any
    app_name: Any
    token_id: Any
    token_secret: Any
    workdir: Any
    namespace: Any
    kubeconfig: Any
    context: Any
    in_cluster: Any
    run_as_user: Any
    image_pull_policy: Any
    network_policy: Any
    api_timeout: Any
    exec_protocols: Any
    warm_pool: Any


# Each shipped name's options are its class's keyword arguments, checked by a type checker
# (a misspelt one matches no overload: the last one's keys are theirs too).
@overload
def get_provider(name: Literal["bwrap"], **config: Unpack[BwrapProviderOptions]) -> BwrapProvider: ...
@overload
def get_provider(name: Literal["local"], **config: Unpack[LocalProviderOptions]) -> LocalProvider: ...
@overload
def get_provider(name: Literal["remote"], **config: Unpack[RemoteProviderOptions]) -> RemoteProvider: ...
@overload
def get_provider(name: Literal["daytona"], **config: Unpack[DaytonaProviderOptions]) -> DaytonaProvider: ...
@overload
def get_provider(name: Literal["docker"], **config: Unpack[DockerProviderOptions]) -> DockerProvider: ...
@overload
def get_provider(name: Literal["e2b"], **config: Unpack[E2BProviderOptions]) -> E2BProvider: ...
@overload
def get_provider(
    name: Literal["kubernetes"], **config: Unpack[KubernetesProviderOptions]
) -> KubernetesProvider: ...
@overload
def get_provider(name: Literal["modal"], **config: Unpack[ModalProviderOptions]) -> ModalProvider: ...
@overload
def get_provider(
    name: str | None = None, **config: Unpack[ProviderOptions]
) -> SandboxProvider[BaseSandbox]: ...


def get_provider(name: str | None = None, **config: Any) -> SandboxProvider[Any]:
    """The provider registered as ``name``, constructed with ``config``.

    Without a name: the one ``SANDBOX_SDK_PROVIDER`` names, else ``bwrap``.
    A shipped name gives its class to a type checker (``get_provider("bwrap")``
    is a ``BwrapProvider``) and its options (a misspelt one is an error for
    ``mypy``, and an :class:`~sandbox_sdk.errors.InvalidArgumentError` at run
    time, as for any provider); third-party packages register theirs under the
    same entry-point group (a type checker sees them through a variable or a
    ``**`` mapping)."""
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
    _check_options(name, factory, config)
    provider = factory(**config)
    if not isinstance(provider, SandboxProvider):
        raise errors.ProviderUnavailableError(f"entry point {name!r} did not produce a SandboxProvider")
    return provider


def _check_options(name: str, factory: Any, config: dict[str, Any]) -> None:
    """Refuse options the provider's constructor does not take, naming the ones it does,
    before it runs (a ``TypeError`` from inside it would say neither)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a callable without a signature to read: it checks its own
        return
    try:
        signature.bind(**config)
    except TypeError as exc:
        takes = [
            option
            for option, parameter in signature.parameters.items()
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        ]
        unknown = sorted(set(config) - set(takes))
        problem = f"no option {', '.join(map(repr, unknown))}" if unknown else str(exc)
        raise errors.InvalidArgumentError(
            f"provider {name!r} takes {problem}; its options: {', '.join(takes) or 'none'}"
        ) from None
