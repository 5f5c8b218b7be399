"""The bwrap provider; see the package docstring."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from pydantic import ValidationError

from sandbox_sdk import errors
from sandbox_sdk.mounts import Mount, as_records, check_mounts
from sandbox_sdk.network import NetworkPolicy
from sandbox_sdk.provider_kit.host_state import USAGE_FILE, WORKSPACE_DIR, HostStateProvider, SandboxRecord
from sandbox_sdk.providers.bwrap._jail import Expiry, stop_jail
from sandbox_sdk.providers.bwrap.sandbox import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_ROOT_SANDBOX_USER,
    JAIL_DIR,
    TMP_DIR,
    WORKSPACE_PATH,
    BwrapSandbox,
    ResourceLimits,
    checked_jail,
)


class BwrapProviderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`BwrapProvider` (``get_provider("bwrap", **config)``
    type-checks them against this; tests/test_registry.py keeps the two alike)."""

    state_dir: str | os.PathLike[str] | None
    limits: ResourceLimits | None
    network: bool | NetworkPolicy
    env: Mapping[str, str] | None
    max_output_bytes: int
    bwrap: str | None
    root_sandbox_user: tuple[int, int]
    extra_ro_binds: Sequence[str]


class BwrapProvider(HostStateProvider[BwrapSandbox]):
    """Hands out :class:`BwrapSandbox` es, each a directory under ``state_dir``.

    ``limits``, ``network`` and ``env`` are defaults for new sandboxes;
    ``create`` takes ``limits``, ``network`` (``True``: the host's network;
    ``False``: none; a :class:`~sandbox_sdk.NetworkPolicy`: out only through
    the SDK's egress proxy) and ``mounts`` (host paths bound
    into the jail: :class:`~sandbox_sdk.Mount`, docs/policy.md) per sandbox
    (recorded, so the sandbox keeps them) besides ``ttl``, ``idle_timeout``
    and ``setup``.
    Raises ``ProviderUnavailableError`` at construction if bwrap is missing or
    cannot start a jail here; it never falls back to running unisolated."""

    name = "bwrap"
    extra_options = frozenset({"limits", "network", "mounts"})
    supports_mounts = True
    supports_network_policy = True

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        limits: ResourceLimits | None = None,
        network: bool | NetworkPolicy = False,
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        bwrap: str | None = None,
        root_sandbox_user: tuple[int, int] = DEFAULT_ROOT_SANDBOX_USER,
        extra_ro_binds: Sequence[str] = (),
    ) -> None:
        self.jail_settings: dict[str, Any] = {
            "bwrap": bwrap,
            "root_sandbox_user": tuple(root_sandbox_user),
            "extra_ro_binds": tuple(extra_ro_binds),
        }
        self.jail = checked_jail(bwrap, tuple(root_sandbox_user), tuple(extra_ro_binds))
        super().__init__(state_dir)
        self.limits = limits or ResourceLimits()
        self.network = network
        self.env = dict(env or {})
        self.max_output_bytes = max_output_bytes

    def _prepare(self, staging_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
        limits = options.get("limits", self.limits)
        if isinstance(limits, Mapping):
            try:
                limits = ResourceLimits.model_validate(limits)
            except ValidationError as exc:
                raise errors.InvalidArgumentError(f"invalid limits: {exc}") from exc
        if not isinstance(limits, ResourceLimits):
            raise errors.InvalidArgumentError("limits must be a ResourceLimits or a mapping of its fields")
        network = options.get("network", self.network)
        if not isinstance(network, bool | NetworkPolicy):
            raise errors.InvalidArgumentError(f"network must be a bool or a NetworkPolicy, not {network!r}")
        mounts = check_mounts(options.get("mounts", ()), workspace=WORKSPACE_PATH)
        (staging_dir / TMP_DIR).mkdir()
        for directory in (staging_dir / WORKSPACE_DIR, staging_dir / TMP_DIR):
            self.jail.own(directory)
        recorded = network if isinstance(network, bool) else network.model_dump(mode="json")
        return {"limits": limits.model_dump(), "network": recorded, "mounts": as_records(mounts)}

    def _open(self, record: SandboxRecord, directory: Path) -> BwrapSandbox:
        return BwrapSandbox(
            directory / WORKSPACE_DIR,
            tmp_dir=directory / TMP_DIR,
            sandbox_id=record.id,
            limits=ResourceLimits.model_validate(record.options.get("limits", {})),
            network=recorded_network(record.options.get("network", False)),
            mounts=[Mount.model_validate(mount) for mount in record.options.get("mounts", [])],
            env=self.env,
            max_output_bytes=self.max_output_bytes,
            state_dir=directory,
            expiry=Expiry(
                expires_at=None if record.ttl is None else record.created_at.timestamp() + record.ttl,
                idle_timeout=record.idle_timeout,
                usage_file=directory / USAGE_FILE,
            ),
            **self.jail_settings,
        )

    def _release(self, directory: Path) -> None:
        """End the sandbox's jail, with every process in it."""
        stop_jail(directory / JAIL_DIR)


def recorded_network(value: Any) -> bool | NetworkPolicy:
    """A sandbox record's ``network``: a bool, or a policy's fields."""
    return value if isinstance(value, bool) else NetworkPolicy(**value)
