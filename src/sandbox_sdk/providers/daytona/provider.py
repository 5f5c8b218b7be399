"""``DaytonaProvider``: create, find, list and delete Daytona sandboxes."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, TypedDict

import pydantic
from daytona import (
    AsyncSandbox,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    DaytonaConfig,
    DaytonaNotFoundError,
    Sandbox,
)
from daytona.common.daytona import CODE_TOOLBOX_LANGUAGE_LABEL

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider, labels_match
from sandbox_sdk.provider_kit import DEFAULT_IDLE_TIMEOUT, Lifetime, check_seconds
from sandbox_sdk.providers.daytona._errors import translate_errors
from sandbox_sdk.providers.daytona.sandbox import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_START_TIMEOUT,
    DEFAULT_TIMEOUT,
    DaytonaClients,
    DaytonaSandbox,
    state_value,
)

#: Seconds ``create`` waits for a new sandbox to start (the SDK's ``timeout``).
DEFAULT_CREATE_TIMEOUT = 120.0
#: Sandboxes one ``list_sandboxes`` request may return (its ``limit``: ``le=200`` in
#: daytona_api_client/api/sandbox_api.py); a longer page takes several requests.
MAX_PAGE = 200
#: Seconds a new sandbox may take to show in Daytona's listing, which is
#: "eventually consistent" (``list_sandboxes``' own description).
DEFAULT_LISTING_LAG = 10.0
_GONE = {"destroyed", "destroying"}


def _gone(state: object) -> bool:
    """Whether a sandbox state means deleted."""
    return state_value(state) in _GONE


def _minutes(seconds: float) -> int:
    """Seconds as Daytona's whole minutes, rounded up: never 0, which means "never" to Daytona."""
    return max(1, math.ceil(seconds / 60))


class DaytonaProviderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`DaytonaProvider` (``get_provider("daytona", **config)``
    type-checks them against this; tests/test_registry.py keeps the two alike)."""

    api_key: str | None
    api_url: str | None
    target: str | None
    timeout: float
    max_output_bytes: int
    shell: str
    start_timeout: float
    listing_lag: float


class DaytonaProvider(SandboxProvider[DaytonaSandbox]):
    """Daytona sandboxes through the official ``daytona`` SDK (sync and async clients).

    Lifetime (seconds, as on every provider): ``idle_timeout`` becomes
    Daytona's ``auto_stop_interval`` (default an hour, not Daytona's 15
    minutes) and ``ttl`` its ``ttl_minutes`` (destroyed that long after
    creation, whatever its state), both rounded up to whole minutes.
    Other ``create`` options are those of the SDK's
    ``CreateSandboxFromSnapshotParams`` (or ``CreateSandboxFromImageParams``
    when ``image`` is given), in Daytona's units: ``auto_stop_interval``,
    ``auto_pause_interval``, ``auto_archive_interval``, ``auto_delete_interval``
    and ``ttl_minutes`` are whole **minutes** (given instead of ``idle_timeout``
    / ``ttl``, not with them); ``snapshot``, ``env_vars``, ``name``, ``public``,
    ... pass through as is. ``create_timeout`` (seconds) bounds the wait for
    the sandbox to start.
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
        start_timeout: float = DEFAULT_START_TIMEOUT,
        listing_lag: float = DEFAULT_LISTING_LAG,
    ) -> None:
        """Unset arguments come from the SDK's environment variables; missing
        credentials raise :class:`~sandbox_sdk.errors.AuthenticationError` here.
        ``start_timeout`` (seconds) bounds the wait for a sandbox to be running
        (``get``, and a handle whose sandbox was stopped). ``listing_lag``
        (seconds) bounds how long ``get_or_create`` by labels waits for a new
        sandbox to show in the listing before settling a concurrent create."""
        # DAYTONA_API_URL is resolved here, as the SDK would, because an unset api_url makes
        # the SDK read its deprecated server_url field and warn about it.
        api_url = api_url or os.environ.get("DAYTONA_API_URL") or None
        self._clients = DaytonaClients(DaytonaConfig(api_key=api_key, api_url=api_url, target=target))
        self._listing_lag = check_seconds("listing_lag", listing_lag or None) or 0.0  # 0: no lag
        self._sandbox_options: dict[str, Any] = {
            "timeout": timeout,
            "max_output_bytes": max_output_bytes,
            "shell": shell,
            "start_timeout": check_seconds("start_timeout", start_timeout),
        }

    def _sandbox(self, sdk_sandbox: Sandbox | AsyncSandbox) -> DaytonaSandbox:
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
        options = _lifetime_options(dict(options))
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
                "(accepted: ttl, idle_timeout, create_timeout, "
                f"{', '.join(sorted(set(kind.model_fields) - {'labels'}))})"
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
        """Connect to a sandbox by id (or name), running: a transition under way
        (``starting``, ``stopping``, ``archiving``, ``pausing``, ``resuming``,
        ...) is waited out and a stopped, archived or paused sandbox started
        (after ``auto_stop_interval`` idle minutes, for example), within
        ``start_timeout``. A deleted or expired one is ``SandboxNotFoundError``."""
        with translate_errors(f"get sandbox {sandbox_id}"):
            sandbox = self._sandbox(self._clients.sync.get(self._check_id(sandbox_id)))
            sandbox._drive(sandbox._op_ready())
        return sandbox

    async def _aget(self, sandbox_id: str) -> DaytonaSandbox:
        with translate_errors(f"get sandbox {sandbox_id}"):
            sandbox = self._sandbox(await self._clients.aclient().get(self._check_id(sandbox_id)))
            await sandbox._adrive(sandbox._op_ready())
        return sandbox

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

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """A page of Daytona's own cursor pagination, filtered by labels on the
        server; a ``limit`` over Daytona's 200 takes several requests."""
        pages = _Pages.of(labels, cursor, limit)
        with translate_errors("list Daytona sandboxes"):
            # The SDK's public list() follows cursors itself; one page needs its REST client.
            while (query := pages.next_query()) is not None:
                pages.take(self._clients.sync._sandbox_api.list_sandboxes(**query))
        return pages.page()

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        pages = _Pages.of(labels, cursor, limit)
        with translate_errors("list Daytona sandboxes"):
            while (query := pages.next_query()) is not None:
                pages.take(await self._clients.aclient()._sandbox_api.list_sandboxes(**query))
        return pages.page()

    # -- clients --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the async clients that can be closed from here (see :meth:`aclose`)."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the async client of the running event loop (the sync client holds
        only a connection pool). A loop's client is also closed when ``asyncio.run``
        shuts the loop down, so none is left unclosed."""
        await self._clients.aclose()


def _lifetime_options(options: dict[str, Any]) -> dict[str, Any]:
    """``ttl`` and ``idle_timeout`` (seconds) as Daytona's ``ttl_minutes`` and
    ``auto_stop_interval`` (minutes, no maximum; 0 would mean never, so at least
    1). Daytona's own options stand for them when given instead; both at once
    is an error. No idle timeout of ours is set when ``auto_pause_interval`` is
    given: Daytona refuses auto-stop and auto-pause together."""
    own_idle = {"auto_stop_interval", "auto_pause_interval"} & set(options)
    for ours, theirs in (("ttl", {"ttl_minutes"} & set(options)), ("idle_timeout", own_idle)):
        if ours in options and theirs:
            raise errors.InvalidArgumentError(
                f"give {ours} (seconds) or {', '.join(sorted(theirs))}, not both"
            )
    lifetime = Lifetime.from_options(
        options, platform="Daytona", default_idle_timeout=None if own_idle else DEFAULT_IDLE_TIMEOUT
    )
    if lifetime.ttl is not None:
        options["ttl_minutes"] = _minutes(lifetime.ttl)
    if lifetime.idle_timeout is not None:
        options["auto_stop_interval"] = _minutes(lifetime.idle_timeout)
    return options


@dataclass
class _Pages:
    """One ``list`` page made of as many requests as Daytona's 200 per request
    need; each asks for no more than is still wanted, so the last one's cursor
    is exactly where the page ends."""

    query: dict[str, Any]
    labels: Mapping[str, str] | None
    limit: int
    cursor: str | None
    items: list[SandboxInfo] = field(default_factory=list)
    done: bool = False

    @classmethod
    def of(cls, labels: Mapping[str, str] | None, cursor: str | None, limit: int) -> _Pages:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise errors.InvalidArgumentError(f"limit must be an int >= 1, not {limit!r}")
        if cursor is not None and not isinstance(cursor, str):
            raise errors.InvalidArgumentError(f"cursor must be a str or None, not {cursor!r}")
        return cls({"labels": json.dumps(dict(labels)) if labels else None}, labels, limit, cursor)

    def next_query(self) -> dict[str, Any] | None:
        """The next request's arguments, or ``None`` when the page is complete."""
        remaining = self.limit - len(self.items)
        if self.done or remaining <= 0:
            return None
        return {**self.query, "cursor": self.cursor, "limit": min(MAX_PAGE, remaining)}

    def take(self, response: Any) -> None:
        self.items += [_info(item) for item in response.items]
        self.cursor = response.next_cursor or None
        self.done = self.cursor is None or not response.items

    def page(self) -> SandboxPage:
        return SandboxPage(
            items=[info for info in self.items if labels_match(info.labels, self.labels)],
            next_cursor=self.cursor,
        )


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
