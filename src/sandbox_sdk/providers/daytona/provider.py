"""``DaytonaProvider``: create, find, list and delete Daytona sandboxes."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

import pydantic
from daytona import (
    AsyncSandbox,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    DaytonaConfig,
    DaytonaNotFoundError,
    Sandbox,
    SandboxState,
)
from daytona.common.daytona import CODE_TOOLBOX_LANGUAGE_LABEL

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider, labels_match
from sandbox_sdk.providers.daytona._errors import translate_errors
from sandbox_sdk.providers.daytona.sandbox import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TIMEOUT,
    DaytonaClients,
    DaytonaSandbox,
)

#: Seconds ``create`` waits for a new sandbox to start (the SDK's ``timeout``).
DEFAULT_CREATE_TIMEOUT = 120.0
_GONE = {SandboxState.DESTROYED.value, SandboxState.DESTROYING.value}
#: States ``get`` starts a sandbox from.
_RESTARTABLE = {SandboxState.STOPPED.value, SandboxState.ARCHIVED.value}


def _state(state: object) -> object:
    """A sandbox state as its string value, whichever client's enum it comes from."""
    return getattr(state, "value", state)


def _gone(state: object) -> bool:
    """Whether a sandbox state means deleted."""
    return _state(state) in _GONE


class DaytonaProvider(SandboxProvider[DaytonaSandbox]):
    """Daytona sandboxes through the official ``daytona`` SDK (sync and async clients).

    ``create`` options are those of the SDK's ``CreateSandboxFromSnapshotParams``
    (or ``CreateSandboxFromImageParams`` when ``image`` is given), in Daytona's
    units: ``auto_stop_interval``, ``auto_archive_interval``,
    ``auto_delete_interval`` and ``ttl_minutes`` are whole **minutes**;
    ``snapshot``, ``env_vars``, ``name``, ``public``, ... pass through as is.
    ``create_timeout`` (seconds) bounds the wait for the sandbox to start.
    """

    name: ClassVar[str] = "daytona"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        target: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        shell: str = "bash",
        start_timeout: float = DEFAULT_CREATE_TIMEOUT,
    ) -> None:
        """Unset arguments come from the SDK's environment variables; missing
        credentials raise :class:`~sandbox_sdk.errors.AuthenticationError` here.
        ``start_timeout`` (seconds) bounds ``get``'s wait for a stopped sandbox to start."""
        # DAYTONA_API_URL is resolved here, as the SDK would, because an unset api_url makes
        # the SDK read its deprecated server_url field and warn about it.
        api_url = api_url or os.environ.get("DAYTONA_API_URL") or None
        self._clients = DaytonaClients(DaytonaConfig(api_key=api_key, api_url=api_url, target=target))
        self._start_timeout = start_timeout
        self._sandbox_options: dict[str, Any] = {
            "timeout": timeout,
            "max_output_bytes": max_output_bytes,
            "shell": shell,
        }

    def _sandbox(self, sdk_sandbox: Sandbox | AsyncSandbox) -> DaytonaSandbox:
        if _gone(sdk_sandbox.state):
            # The service keeps deleted sandboxes readable for a while; to us they do not exist.
            raise errors.SandboxNotFoundError(
                f"sandbox {sdk_sandbox.id} has been deleted ({sdk_sandbox.state})"
            )
        if isinstance(sdk_sandbox, Sandbox):
            return DaytonaSandbox(
                self._clients, sdk_sandbox.id, sdk_sandbox=sdk_sandbox, **self._sandbox_options
            )
        sandbox = DaytonaSandbox(self._clients, sdk_sandbox.id, **self._sandbox_options)
        sandbox._adopt_async(sdk_sandbox)
        return sandbox

    # -- create ------------------------------------------------------------------------------

    @staticmethod
    def _params(
        labels: dict[str, str], options: dict[str, Any]
    ) -> tuple[CreateSandboxFromSnapshotParams | CreateSandboxFromImageParams, float]:
        options = dict(options)
        wait = options.pop("create_timeout", DEFAULT_CREATE_TIMEOUT)
        if isinstance(wait, bool) or not isinstance(wait, int | float) or wait < 0:
            raise errors.InvalidArgumentError(f"create_timeout must be seconds >= 0, not {wait!r}")
        kind: type[CreateSandboxFromSnapshotParams] | type[CreateSandboxFromImageParams] = (
            CreateSandboxFromImageParams if "image" in options else CreateSandboxFromSnapshotParams
        )
        unknown = sorted(set(options) - set(kind.model_fields))
        if unknown:
            raise errors.InvalidArgumentError(
                f"unknown Daytona create option(s): {', '.join(unknown)} "
                f"(accepted: create_timeout, {', '.join(sorted(set(kind.model_fields) - {'labels'}))})"
            )
        try:
            return kind(labels=dict(labels), **options), float(wait)
        except pydantic.ValidationError as exc:
            raise errors.InvalidArgumentError(f"invalid Daytona create options: {exc}") from exc

    def _create(self, *, labels: dict[str, str], **options: Any) -> DaytonaSandbox:
        params, wait = self._params(labels, options)
        with translate_errors("create a Daytona sandbox"):
            return self._sandbox(self._clients.sync.create(params, timeout=wait))

    async def _acreate(self, *, labels: dict[str, str], **options: Any) -> DaytonaSandbox:
        params, wait = self._params(labels, options)
        with translate_errors("create a Daytona sandbox"):
            return self._sandbox(await self._clients.aclient().create(params, timeout=wait))

    # -- get / delete --------------------------------------------------------------------------

    @staticmethod
    def _check_id(sandbox_id: object) -> str:
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise errors.InvalidArgumentError(f"sandbox_id must be a non-empty str, not {sandbox_id!r}")
        return sandbox_id

    def _get(self, sandbox_id: str) -> DaytonaSandbox:
        """Connect to a sandbox by id (or name), starting it first if Daytona stopped or
        archived it (after ``auto_stop_interval`` idle minutes, for example)."""
        with translate_errors(f"get sandbox {sandbox_id}"):
            sdk_sandbox = self._clients.sync.get(self._check_id(sandbox_id))
            if _state(sdk_sandbox.state) in _RESTARTABLE:
                sdk_sandbox.start(timeout=self._start_timeout)
            return self._sandbox(sdk_sandbox)

    async def _aget(self, sandbox_id: str) -> DaytonaSandbox:
        with translate_errors(f"get sandbox {sandbox_id}"):
            sdk_sandbox = await self._clients.aclient().get(self._check_id(sandbox_id))
            if _state(sdk_sandbox.state) in _RESTARTABLE:
                await sdk_sandbox.start(timeout=self._start_timeout)
            return self._sandbox(sdk_sandbox)

    def _delete(self, sandbox_id: str) -> None:
        """Delete the sandbox; one that does not exist (any more) counts as deleted."""
        client = self._clients.sync
        with translate_errors(f"delete sandbox {sandbox_id}"), contextlib.suppress(DaytonaNotFoundError):
            sdk_sandbox = client.get(self._check_id(sandbox_id))
            if not _gone(sdk_sandbox.state):
                client.delete(sdk_sandbox)

    async def _adelete(self, sandbox_id: str) -> None:
        client = self._clients.aclient()
        with translate_errors(f"delete sandbox {sandbox_id}"), contextlib.suppress(DaytonaNotFoundError):
            sdk_sandbox = await client.get(self._check_id(sandbox_id))
            if not _gone(sdk_sandbox.state):
                await client.delete(sdk_sandbox)

    # -- list -------------------------------------------------------------------------------------

    @staticmethod
    def _list_query(labels: Mapping[str, str] | None, cursor: str | None, limit: int) -> dict[str, Any]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise errors.InvalidArgumentError(f"limit must be an int >= 1, not {limit!r}")
        if cursor is not None and not isinstance(cursor, str):
            raise errors.InvalidArgumentError(f"cursor must be a str or None, not {cursor!r}")
        return {"labels": json.dumps(dict(labels)) if labels else None, "cursor": cursor, "limit": limit}

    @staticmethod
    def _page(response: Any, labels: Mapping[str, str] | None) -> SandboxPage:
        items = [_info(item) for item in response.items]
        return SandboxPage(
            items=[info for info in items if labels_match(info.labels, labels)],
            next_cursor=response.next_cursor or None,
        )

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """One page of Daytona's own cursor pagination, filtered by labels on the server."""
        query = self._list_query(labels, cursor, limit)
        with translate_errors("list Daytona sandboxes"):
            # The SDK's public list() follows cursors itself; one page needs its REST client.
            response = self._clients.sync._sandbox_api.list_sandboxes(**query)
        return self._page(response, labels)

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        query = self._list_query(labels, cursor, limit)
        with translate_errors("list Daytona sandboxes"):
            response = await self._clients.aclient()._sandbox_api.list_sandboxes(**query)
        return self._page(response, labels)

    async def aclose(self) -> None:
        """Close the async client of the running event loop."""
        await self._clients.aclose()


def _info(item: Any) -> SandboxInfo:
    """Our view of a listed sandbox; the SDK's own language label is left out."""
    labels = {k: v for k, v in (item.labels or {}).items() if k != CODE_TOOLBOX_LANGUAGE_LABEL}
    created = (
        datetime.fromisoformat(item.created_at.replace("Z", "+00:00"))
        if item.created_at
        else datetime.fromtimestamp(0, UTC)
    )
    state = item.state.value if item.state is not None else "unknown"
    return SandboxInfo(
        id=item.id,
        labels=labels,
        created_at=created,
        status=state,
        metadata={
            "name": item.name,
            "target": item.target,
            "auto_stop_interval": item.auto_stop_interval,
            "auto_archive_interval": item.auto_archive_interval,
            "auto_delete_interval": item.auto_delete_interval,
            "auto_destroy_at": item.auto_destroy_at,
        },
    )
