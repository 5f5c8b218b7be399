"""``DockerProvider`` on podman's Docker-compatible service: test_provider.py's tests (the
lifecycle kit, eight processes racing, the defaults, images, expiry), collected here with
the ``engine`` fixture saying podman."""

from __future__ import annotations

import pytest

from tests.providers.docker.test_provider import TestDockerProvider as TestPodmanProvider
from tests.providers.docker.test_provider import (
    derived_image,
    test_a_missing_image_is_a_typed_error,
    test_a_user_override_runs_commands_as_that_user,
    test_an_expired_ttl_is_not_found_and_removed,
    test_an_image_without_python3_is_a_typed_error_naming_it,
    test_eight_processes_get_or_create_one_container,
    test_limits_and_network_are_options,
    test_reap_removes_idle_and_stopped_sandboxes_and_keeps_the_rest,
    test_sbx_reap_removes_expired_containers,
    test_the_defaults_confine_the_container,
    test_the_workspace_goes_to_the_users_where_the_image_has_none,
)

pytestmark = pytest.mark.engines
__all__ = [
    "TestPodmanProvider",
    "derived_image",
    "engine",
    "test_a_missing_image_is_a_typed_error",
    "test_a_user_override_runs_commands_as_that_user",
    "test_an_expired_ttl_is_not_found_and_removed",
    "test_an_image_without_python3_is_a_typed_error_naming_it",
    "test_eight_processes_get_or_create_one_container",
    "test_limits_and_network_are_options",
    "test_reap_removes_idle_and_stopped_sandboxes_and_keeps_the_rest",
    "test_sbx_reap_removes_expired_containers",
    "test_the_defaults_confine_the_container",
    "test_the_workspace_goes_to_the_users_where_the_image_has_none",
]


@pytest.fixture(scope="module")
def engine() -> str:
    return "podman"
