"""``E2BProvider``: create, find, list and delete E2B sandboxes.

Labels are the sandbox's E2B metadata. The lifetime is the SDK's common one
(``ttl``, ``idle_timeout``), mapped onto E2B's ``timeout``, a deadline that
use does not move: see :class:`~sandbox_sdk.providers.e2b.sandbox.E2BLifetime`.
The async twins use the SDK's native ``AsyncSandbox`` class methods.
"""

from __future__ import annotations

import builtins
import datetime as dt
import logging
import os
import time
from collections.abc import Mapping
from typing import Any, TypedDict

from e2b import AsyncSandbox, Sandbox, SandboxQuery
from e2b import SandboxInfo as E2BSandboxInfo

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.provider_kit import Lifetime, check_seconds
from sandbox_sdk.providers.e2b._errors import translate_errors
from sandbox_sdk.providers.e2b.sandbox import (
    DEFAULT_TIMEOUT,
    LIFETIME_PREFIX,
    E2BLifetime,
    E2BSandbox,
    check_timeout,
)

#: Environment variable the SDK reads the API key from.
API_KEY_ENV = "E2B_API_KEY"
#: E2B's longest sandbox uptime, in seconds: 24 hours on the Pro tier (1 hour,
#: 3600, on Hobby). The SDK's ``Sandbox.create`` docstring states both.
MAX_LIFETIME = 86_400
#: Seconds a new sandbox may take to show in E2B's listing. E2B has no
#: uniqueness to claim for a label set (metadata is free-form, names are not
#: unique), so ``get_or_create`` by labels converges after creating: it lists
#: until its own sandbox shows, keeps the oldest carrying the labels and
#: deletes its own if that is another's (``_converge`` in the lifecycle
#: flows). The API lists running sandboxes from the orchestrator's store
#: (e2b-dev/infra packages/api/internal/handlers/sandboxes_list.go,
#: ``a.orchestrator.GetSandboxes``), which a create enters before it answers,
#: so the wait usually ends at the first listing; the bound is for an API
#: instance whose store has not caught up.
DEFAULT_LISTING_LAG = 5.0
logger = logging.getLogger(__name__)

#: Options of ``create`` handed to ``Sandbox.create`` as they are.
CREATE_OPTIONS = frozenset({"template", "envs", "allow_internet_access", "lifecycle", "network"})


def _labels(metadata: Mapping[str, str]) -> dict[str, str]:
    """A sandbox's labels: its metadata without the keys that hold its lifetime."""
    return {key: value for key, value in metadata.items() if not key.startswith(LIFETIME_PREFIX)}


def _info(sandbox: E2BSandboxInfo) -> SandboxInfo:
    return SandboxInfo(
        id=sandbox.sandbox_id,
        labels=_labels(sandbox.metadata),
        created_at=sandbox.started_at,
        status=str(sandbox.state.value),
        metadata={
            "template_id": sandbox.template_id,
            "end_at": sandbox.end_at.isoformat(),
            "cpu_count": sandbox.cpu_count,
            "memory_mb": sandbox.memory_mb,
        },
    )


def _check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise errors.InvalidArgumentError(f"labels must map non-empty str to str, not {key!r}: {value!r}")
        if key.startswith(LIFETIME_PREFIX):
            raise errors.InvalidArgumentError(
                f"label keys starting {LIFETIME_PREFIX!r} are reserved, not {key!r}"
            )
    return dict(labels)


class E2BProviderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`E2BProvider` (``get_provider("e2b", **config)``
    type-checks them against this; tests/test_registry.py keeps the two alike)."""

    api_key: str | None
    domain: str | None
    api_url: str | None
    sandbox_url: str | None
    request_timeout: float | None
    template: str | None
    command_timeout: float
    max_lifetime: int
    listing_lag: float


class E2BProvider(SandboxProvider[E2BSandbox]):
    """E2B sandboxes through the ``e2b`` SDK.

    Credentials come from ``api_key`` or ``E2B_API_KEY``; without either the
    constructor raises :class:`~sandbox_sdk.errors.AuthenticationError`.
    ``domain``, ``api_url``, ``sandbox_url`` and ``request_timeout`` are the
    SDK's connection options (its ``E2B_*`` environment variables apply when
    they are not given). ``command_timeout`` is each sandbox's default
    ``execute`` timeout in seconds. ``max_lifetime`` is the account's longest
    sandbox uptime in seconds: 86400 (24 hours, E2B Pro) unless given; a
    Hobby account passes 3600, so that ``ttl`` and ``idle_timeout`` over an
    hour are refused here rather than by the service. ``listing_lag`` bounds
    how long ``get_or_create`` by labels waits for its new sandbox to show in
    the listing, to agree with clients racing it (:data:`DEFAULT_LISTING_LAG`).
    """

    name = "e2b"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        domain: str | None = None,
        api_url: str | None = None,
        sandbox_url: str | None = None,
        request_timeout: float | None = None,
        template: str | None = None,
        command_timeout: float = DEFAULT_TIMEOUT,
        max_lifetime: int = MAX_LIFETIME,
        listing_lag: float = DEFAULT_LISTING_LAG,
    ) -> None:
        api_key = api_key or os.environ.get(API_KEY_ENV)
        if not api_key:
            raise errors.AuthenticationError(
                f"E2B needs an API key: set {API_KEY_ENV} or pass api_key= (https://e2b.dev/dashboard?tab=keys)"
            )
        if (
            isinstance(max_lifetime, bool)
            or not isinstance(max_lifetime, int)
            or not 1 <= max_lifetime <= MAX_LIFETIME
        ):
            raise errors.InvalidArgumentError(
                f"max_lifetime must be whole seconds up to E2B's {MAX_LIFETIME}, not {max_lifetime!r}"
            )
        connection = {
            "api_key": api_key,
            "domain": domain,
            "api_url": api_url,
            "sandbox_url": sandbox_url,
            "request_timeout": request_timeout,
        }
        self._connection: dict[str, Any] = {k: v for k, v in connection.items() if v is not None}
        self.template = template
        self.command_timeout = check_timeout(command_timeout)
        self.max_lifetime = max_lifetime
        self._listing_lag = check_seconds("listing_lag", listing_lag or None) or 0.0  # 0: no wait
        #: The last handle handed out for each label set, to tell when one expired.
        self._handles: dict[frozenset[tuple[str, str]], E2BSandbox] = {}

    def _create_kwargs(
        self, labels: dict[str, str], options: dict[str, Any]
    ) -> tuple[dict[str, Any], E2BLifetime]:
        """``Sandbox.create``'s arguments, and the lifetime its handle keeps up."""
        options = dict(options)
        if "timeout" in options:
            raise errors.InvalidArgumentError(
                "E2B's timeout is derived from idle_timeout and ttl (seconds): pass those instead"
            )
        requested = Lifetime.from_options(
            options, platform="E2B", max_ttl=self.max_lifetime, max_idle_timeout=self.max_lifetime
        )
        unknown = set(options) - CREATE_OPTIONS
        if unknown:
            raise errors.InvalidArgumentError(
                f"unknown E2B create options: {', '.join(sorted(unknown))}"
                f" (known: {', '.join(sorted(CREATE_OPTIONS | {'ttl', 'idle_timeout'}))})"
            )
        now = time.time()
        lifetime = E2BLifetime.starting(requested, now, max_lifetime=self.max_lifetime)
        timeout = lifetime.timeout(now)
        if timeout is None:
            raise errors.InvalidArgumentError(f"ttl must be at least a second on E2B, not {requested.ttl!r}")
        metadata = {**_check_labels(labels), **lifetime.metadata()}
        kwargs = {"template": self.template, **options, "timeout": timeout}
        return {**kwargs, "metadata": metadata, **self._connection}, lifetime

    def _wrap(
        self,
        sandbox: Sandbox | AsyncSandbox,
        labels: Mapping[str, str],
        lifetime: E2BLifetime | None,
        deadline: float | None,
    ) -> E2BSandbox:
        """The handle, remembered as the last one handed out with its labels."""
        handle = E2BSandbox(sandbox, timeout=self.command_timeout, lifetime=lifetime, deadline=deadline)
        if labels:
            self._handles[frozenset(labels.items())] = handle
        return handle

    def _report_expired(self, labels: Mapping[str, str]) -> None:
        """Before creating a sandbox with ``labels``: if the last one this provider
        handed out with them is past its deadline, it expired, and E2B deleted it
        with its files; say so, since nothing on E2B still tells."""
        previous = self._handles.pop(frozenset(labels.items()), None)
        if previous is not None and previous.deadline is not None and previous.deadline < time.time():
            logger.warning(
                "E2B sandbox %s, which carried labels %s, expired at %s (unused for its idle_timeout,"
                " or past its ttl) and was deleted with its files: the new sandbox starts empty",
                previous.id,
                dict(labels),
                dt.datetime.fromtimestamp(previous.deadline, dt.UTC).isoformat(timespec="seconds"),
            )

    def _forget(self, sandbox_id: str) -> None:
        """A sandbox deleted here did not expire."""
        for key, handle in builtins.list(self._handles.items()):
            if handle.id == sandbox_id:
                self._handles.pop(key, None)

    def _connected(
        self, sandbox: Sandbox | AsyncSandbox, info: E2BSandboxInfo, timeout: int | None
    ) -> E2BSandbox:
        """The handle of a sandbox connected to with ``timeout``, which connecting only lengthens."""
        deadline = info.end_at.timestamp()
        if timeout is not None:
            deadline = max(deadline, time.time() + timeout)
        return self._wrap(sandbox, _labels(info.metadata), E2BLifetime.from_metadata(info.metadata), deadline)

    def _connect_timeout(self, info: E2BSandboxInfo) -> int | None:
        """The timeout to connect with: one more idle period, if the sandbox's
        metadata records its lifetime."""
        lifetime = E2BLifetime.from_metadata(info.metadata)
        if lifetime is None:
            return None
        timeout = lifetime.timeout(time.time())
        if timeout is None:
            raise errors.SandboxNotFoundError(f"E2B sandbox {info.sandbox_id} has reached its ttl")
        return timeout

    def _list_kwargs(
        self, labels: Mapping[str, str] | None, cursor: str | None, limit: int
    ) -> dict[str, Any]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise errors.InvalidArgumentError(f"limit must be an int >= 1, not {limit!r}")
        return {
            "query": SandboxQuery(metadata=_check_labels(labels or {})),
            "limit": limit,
            "next_token": cursor,
            "order": "asc",
            **self._connection,
        }

    # -- sync -----------------------------------------------------------------------------

    def _create(self, *, labels: dict[str, str], **options: Any) -> E2BSandbox:
        kwargs, lifetime = self._create_kwargs(labels, options)
        self._report_expired(labels)
        with translate_errors("create an E2B sandbox"):
            sandbox = Sandbox.create(**kwargs)
        return self._wrap(sandbox, labels, lifetime, time.time() + kwargs["timeout"])

    def _get(self, sandbox_id: str) -> E2BSandbox:
        """Read the sandbox's lifetime from its metadata, then connect (which resumes a
        paused sandbox) with one more idle period: two requests."""
        with translate_errors(f"connect to E2B sandbox {sandbox_id}"):
            info = Sandbox.get_info(sandbox_id, **self._connection)
            timeout = self._connect_timeout(info)
            return self._connected(
                Sandbox.connect(sandbox_id, timeout=timeout, **self._connection), info, timeout
            )

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        paginator = Sandbox.list(**self._list_kwargs(labels, cursor, limit))
        with translate_errors("list E2B sandboxes"):
            items = paginator.next_items()
        return SandboxPage(items=[_info(item) for item in items], next_cursor=paginator.next_token)

    def _delete(self, sandbox_id: str) -> None:
        self._forget(sandbox_id)
        with translate_errors(f"delete E2B sandbox {sandbox_id}"):
            Sandbox.kill(sandbox_id, **self._connection)  # False when already gone: success too

    # -- async ----------------------------------------------------------------------------

    async def _acreate(self, *, labels: dict[str, str], **options: Any) -> E2BSandbox:
        kwargs, lifetime = self._create_kwargs(labels, options)
        self._report_expired(labels)
        with translate_errors("create an E2B sandbox"):
            sandbox = await AsyncSandbox.create(**kwargs)
        return self._wrap(sandbox, labels, lifetime, time.time() + kwargs["timeout"])

    async def _aget(self, sandbox_id: str) -> E2BSandbox:
        with translate_errors(f"connect to E2B sandbox {sandbox_id}"):
            info = await AsyncSandbox.get_info(sandbox_id, **self._connection)
            timeout = self._connect_timeout(info)
            sandbox = await AsyncSandbox.connect(sandbox_id, timeout=timeout, **self._connection)
            return self._connected(sandbox, info, timeout)

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        paginator = AsyncSandbox.list(**self._list_kwargs(labels, cursor, limit))
        with translate_errors("list E2B sandboxes"):
            items: builtins.list[E2BSandboxInfo] = await paginator.next_items()
        return SandboxPage(items=[_info(item) for item in items], next_cursor=paginator.next_token)

    async def _adelete(self, sandbox_id: str) -> None:
        self._forget(sandbox_id)
        with translate_errors(f"delete E2B sandbox {sandbox_id}"):
            await AsyncSandbox.kill(sandbox_id, **self._connection)
