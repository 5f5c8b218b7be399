"""The docker provider's fixtures: a real engine (``dockerd``, or podman's service) and
the default image, both from ``scripts/services start``.

An engine is the one its variable names (``DOCKER_HOST`` for dockerd, ``CONTAINER_HOST``
for podman: ``scripts/test`` exports the lines ``scripts/services start`` prints), else the
socket ``scripts/services`` keeps in its state directory. Where none answers, the tests are
skipped, unless ``CI`` or ``SANDBOX_SDK_REQUIRE_ENGINES`` is set (``scripts/test`` sets the
latter): then every one of them fails, saying why, so a machine whose engine did not start
cannot pass quietly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.docker import DEFAULT_IMAGE, DockerProvider

#: Where ``scripts/services`` keeps its state (the same default as the script's).
ENGINES_DIR = Path(
    os.environ.get("SANDBOX_SDK_ENGINES_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sandbox-sdk" / "engines"
)


#: The engines the tests run against: the variable ``scripts/services start`` prints for
#: each, and its socket in the services' state directory.
ENGINES = {
    "dockerd": ("DOCKER_HOST", "docker/docker.sock"),
    "podman": ("CONTAINER_HOST", "podman/podman.sock"),
}


def engine_url(engine: str) -> str | None:
    """Where ``engine`` answers: its variable, else the socket ``scripts/services`` starts."""
    variable, socket = ENGINES[engine]
    if os.environ.get(variable):
        return os.environ[variable]
    path = ENGINES_DIR / socket
    return f"unix://{path}" if path.exists() else None


def engines_required() -> bool:
    """Whether a missing engine is a failure (CI) rather than a reason to skip."""
    return bool(os.environ.get("CI") or os.environ.get("SANDBOX_SDK_REQUIRE_ENGINES"))


def unavailable(why: str) -> None:
    """Fail where engines are required, else skip, with ``why`` and what to run."""
    message = f"{why}: run `scripts/services start` (docs/docker.md)"
    if engines_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def engine() -> str:
    """The engine a module's tests run against: dockerd, unless the module says podman."""
    return "dockerd"


@pytest.fixture(scope="module")
def docker_url(engine: str) -> str:
    """The engine's address, once it answers and has the default image."""
    url = engine_url(engine)
    if url is None:
        unavailable(f"no {engine}: {ENGINES[engine][0]} is unset and scripts/services started none")
    assert url is not None
    try:
        with DockerProvider(base_url=url) as probe:
            probe.client.inspect_image(DEFAULT_IMAGE)
    except errors.ProviderUnavailableError as exc:
        unavailable(f"the container engine at {url} does not answer ({exc})")
    except Exception as exc:  # noqa: BLE001 - the image is missing: said, with what to run
        unavailable(f"the engine at {url} has no image {DEFAULT_IMAGE} ({exc})")
    return url


@pytest.fixture(scope="module")
def module_provider(docker_url: str) -> Iterator[DockerProvider]:
    """One provider for a module's tests (its sandboxes are the tests' to delete)."""
    with DockerProvider(base_url=docker_url) as provider:
        yield provider


@pytest.fixture
def provider(module_provider: DockerProvider) -> DockerProvider:
    return module_provider
