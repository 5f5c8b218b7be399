"""Helpers shared by the E2B provider tests."""

from __future__ import annotations

from typing import Any

from sandbox_sdk.providers.e2b import E2BProvider
from tests.fakes.e2b_server import FakeE2BServer

#: The only API key the fake accepts.
API_KEY = "e2b_fake_test_key"


def make_provider(fake: FakeE2BServer, **options: Any) -> E2BProvider:
    """A provider pointed at the fake (both the API and the sandbox URL)."""
    return E2BProvider(api_key=API_KEY, api_url=fake.url, sandbox_url=fake.url, **options)
