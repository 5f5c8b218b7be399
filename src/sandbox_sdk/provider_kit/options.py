"""Checks of a provider's ``create`` options shared by the container providers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox_sdk import errors


def string_map(name: str, mapping: Any) -> dict[str, str]:
    """``mapping`` (an option such as ``env``) as a dict of strings, or a typed error."""
    if not isinstance(mapping, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise errors.InvalidArgumentError(f"{name} must map strings to strings, not {mapping!r}")
    return dict(mapping)


def positive_int(name: str, value: Any) -> int:
    """``value`` (an option such as ``memory_bytes``) as a positive int, or a typed error."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise errors.InvalidArgumentError(f"{name} must be a positive int, not {value!r}")
    return value
