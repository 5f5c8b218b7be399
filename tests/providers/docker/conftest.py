"""The docker provider's fixtures: a real engine (``dockerd``, or podman's service) and
the default image, both from ``scripts/services start``.

The engine is the one ``DOCKER_HOST`` names (``scripts/test`` exports the line
``scripts/services start`` prints), else the socket ``scripts/services`` keeps in its state
directory. Where none answers, the tests are skipped, unless ``CI`` or
``SANDBOX_SDK_REQUIRE_ENGINES`` is set (``scripts/test`` sets the latter): then every one
of them fails, saying why, so a machine whose engine did not start cannot pass quietly.
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


def engine_url() -> str | None:
    """The engine to test against: ``DOCKER_HOST``, else the one ``scripts/services`` starts."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    socket = ENGINES_DIR / "docker" / "docker.sock"
    return f"unix://{socket}" if socket.exists() else None


def engines_required() -> bool:
    """Whether a missing engine is a failure (CI) rather than a reason to skip."""
    return bool(os.environ.get("CI") or os.environ.get("SANDBOX_SDK_REQUIRE_ENGINES"))


def unavailable(why: str) -> None:
    """Fail where engines are required, else skip, with ``why`` and what to run."""
    message = f"{why}: run `scripts/services start` (docs/docker.md)"
    if engines_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def docker_url() -> str:
    url = engine_url()
    if url is None:
        unavailable("no container engine: DOCKER_HOST is unset and scripts/services started none")
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
