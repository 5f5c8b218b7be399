"""``get_provider``'s options: each shipped provider's are its constructor's
keyword arguments (a ``TypedDict`` per provider, for the overloads a type
checker reads: tests/test_public_api.py runs mypy on misspelt ones), and a
misspelt one is an ``InvalidArgumentError`` at run time, for any provider,
before the provider is made. And ``create``'s own options: their names, for a
type checker, are the ones the shipped providers take."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, ForwardRef

import pytest
from daytona import CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams

from sandbox_sdk import errors, get_provider, registry
from sandbox_sdk.provider import CreateOptions
from sandbox_sdk.provider_kit.host_state import COMMON_OPTIONS
from sandbox_sdk.providers.bwrap.provider import BwrapProvider, BwrapProviderOptions
from sandbox_sdk.providers.daytona.provider import DaytonaProvider, DaytonaProviderOptions
from sandbox_sdk.providers.docker import provider as docker
from sandbox_sdk.providers.docker.provider import DockerProvider, DockerProviderOptions
from sandbox_sdk.providers.e2b import provider as e2b
from sandbox_sdk.providers.e2b.provider import E2BProvider, E2BProviderOptions
from sandbox_sdk.providers.kubernetes import provider as kubernetes
from sandbox_sdk.providers.kubernetes.provider import KubernetesProvider, KubernetesProviderOptions
from sandbox_sdk.providers.local.provider import LocalProvider, LocalProviderOptions
from sandbox_sdk.providers.modal import provider as modal
from sandbox_sdk.providers.modal.provider import ModalProvider, ModalProviderOptions
from sandbox_sdk.providers.remote.provider import RemoteProvider, RemoteProviderOptions

SHIPPED: dict[str, tuple[type[Any], Any]] = {
    "bwrap": (BwrapProvider, BwrapProviderOptions),
    "local": (LocalProvider, LocalProviderOptions),
    "remote": (RemoteProvider, RemoteProviderOptions),
    "daytona": (DaytonaProvider, DaytonaProviderOptions),
    "docker": (DockerProvider, DockerProviderOptions),
    "e2b": (E2BProvider, E2BProviderOptions),
    "kubernetes": (KubernetesProvider, KubernetesProviderOptions),
    "modal": (ModalProvider, ModalProviderOptions),
}


def annotation(value: object) -> str:
    return value.__forward_arg__ if isinstance(value, ForwardRef) else str(value)


@pytest.mark.parametrize("name", SHIPPED)
def test_each_providers_options_are_its_constructors_keyword_arguments(name: str) -> None:
    cls, options = SHIPPED[name]
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert all(p.default is not p.empty for p in parameters), "a required one would need total=True"
    assert {p.name: annotation(p.annotation) for p in parameters} == {
        key: annotation(value) for key, value in options.__annotations__.items()
    }
    assert not options.__required_keys__


def test_any_name_takes_the_union_of_the_shipped_options() -> None:
    shipped = {key for _, options in SHIPPED.values() for key in options.__annotations__}
    assert set(registry.ProviderOptions.__annotations__) == shipped


def test_the_overloads_name_every_shipped_provider_and_its_options() -> None:
    source = "".join(inspect.getsource(registry).split())  # however the formatter wraps them
    for name, (cls, options) in SHIPPED.items():
        overload = f'(name: Literal["{name}"], **config: Unpack[{options.__name__}]) -> {cls.__name__}'
        assert "".join(f"def get_provider{overload}".split()) in source


@pytest.mark.parametrize(
    ("name", "config", "message"),
    [
        (
            "bwrap",
            {"state_dirr": "x"},
            "provider 'bwrap' takes no option 'state_dirr'; its options: state_dir, ",
        ),
        (
            "local",
            {"timeout": 1.0, "envv": {}},
            "provider 'local' takes no option 'envv'; its options: state_dir, ",
        ),
        (
            "docker",
            {"imagee": "debian"},
            "provider 'docker' takes no option 'imagee'; its options: base_url, ",
        ),
    ],
)
def test_a_misspelt_option_is_a_typed_error_before_the_provider_is_made(
    name: str, config: dict[str, Any], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_SDK_HOME", str(tmp_path / "home"))
    with pytest.raises(errors.InvalidArgumentError) as caught:
        get_provider(name, **config)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, ValueError)
    assert not (tmp_path / "home").exists()  # nothing was made


def test_a_third_party_factory_is_checked_the_same_way() -> None:
    """A third-party factory that takes no keyword options: the check reads
    any callable's signature, not only the shipped classes'."""

    def factory(*, region: str = "eu") -> Any:
        raise AssertionError("not reached")

    with pytest.raises(
        errors.InvalidArgumentError, match=r"provider 'acme' takes no option 'zone'; its options: region"
    ):
        registry._check_options("acme", factory, {"zone": "x"})


def test_create_takes_by_name_the_options_the_shipped_providers_take() -> None:
    """``CreateOptions`` (``create`` and ``get_or_create``'s ``**options``) is the
    union of what each shipped provider accepts besides the keywords every
    provider has; each provider refuses the others at run time."""
    lifetime = {"ttl", "idle_timeout"}
    accepted = (
        (COMMON_OPTIONS - lifetime)
        | BwrapProvider.extra_options
        | LocalProvider.extra_options
        | docker.SANDBOX_OPTIONS
        | e2b.CREATE_OPTIONS
        | kubernetes.SANDBOX_OPTIONS
        | modal.SANDBOX_OPTIONS
        | {"create_timeout"}
        | (set(CreateSandboxFromSnapshotParams.model_fields) - {"labels"})
        | (set(CreateSandboxFromImageParams.model_fields) - {"labels"})
    )
    assert set(CreateOptions.__annotations__) == accepted
    assert not CreateOptions.__required_keys__
