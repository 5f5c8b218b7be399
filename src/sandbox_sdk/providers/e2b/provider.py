"""``E2BProvider``: create, find, list and delete E2B sandboxes.

Labels are the sandbox's E2B metadata; the time to live is E2B's ``timeout``
in seconds (the platform's unit, passed through). The async twins use the
SDK's native ``AsyncSandbox`` class methods.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping
from typing import Any

from e2b import AsyncSandbox, Sandbox, SandboxQuery
from e2b import SandboxInfo as E2BSandboxInfo

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.providers.e2b._errors import translate_errors
from sandbox_sdk.providers.e2b.sandbox import DEFAULT_TIMEOUT, E2BSandbox, check_timeout

#: Environment variable the SDK reads the API key from.
API_KEY_ENV = "E2B_API_KEY"
#: Sandbox time to live in seconds when ``create`` is given none (E2B's API default is 15).
DEFAULT_SANDBOX_TIMEOUT = 300
#: Options of ``create`` handed to ``Sandbox.create`` as they are.
CREATE_OPTIONS = frozenset({"template", "timeout", "envs", "allow_internet_access", "lifecycle", "network"})


def _info(sandbox: E2BSandboxInfo) -> SandboxInfo:
    return SandboxInfo(
        id=sandbox.sandbox_id,
        labels=dict(sandbox.metadata),
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
    return dict(labels)


class E2BProvider(SandboxProvider[E2BSandbox]):
    """E2B sandboxes through the ``e2b`` SDK.

    Credentials come from ``api_key`` or ``E2B_API_KEY``; without either the
    constructor raises :class:`~sandbox_sdk.errors.AuthenticationError`.
    ``domain``, ``api_url``, ``sandbox_url`` and ``request_timeout`` are the
    SDK's connection options (its ``E2B_*`` environment variables apply when
    they are not given). ``command_timeout`` is each sandbox's default
    ``execute`` timeout in seconds.
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
        sandbox_timeout: int = DEFAULT_SANDBOX_TIMEOUT,
        command_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        api_key = api_key or os.environ.get(API_KEY_ENV)
        if not api_key:
            raise errors.AuthenticationError(
                f"E2B needs an API key: set {API_KEY_ENV} or pass api_key= (https://e2b.dev/dashboard?tab=keys)"
            )
        self._check_ttl(sandbox_timeout)
        connection = {
            "api_key": api_key,
            "domain": domain,
            "api_url": api_url,
            "sandbox_url": sandbox_url,
            "request_timeout": request_timeout,
        }
        self._connection: dict[str, Any] = {k: v for k, v in connection.items() if v is not None}
        self.template = template
        self.sandbox_timeout = sandbox_timeout
        self.command_timeout = check_timeout(command_timeout)

    @staticmethod
    def _check_ttl(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise errors.InvalidArgumentError(f"timeout must be an int number of seconds >= 1, not {value!r}")
        return value

    def _create_kwargs(self, labels: dict[str, str], options: dict[str, Any]) -> dict[str, Any]:
        unknown = set(options) - CREATE_OPTIONS
        if unknown:
            raise errors.InvalidArgumentError(
                f"unknown E2B create options: {', '.join(sorted(unknown))}"
                f" (known: {', '.join(sorted(CREATE_OPTIONS))})"
            )
        kwargs = {"template": self.template, "timeout": self.sandbox_timeout, **options}
        self._check_ttl(kwargs["timeout"])
        return {**kwargs, "metadata": _check_labels(labels), **self._connection}

    def _wrap(self, sandbox: Sandbox | AsyncSandbox) -> E2BSandbox:
        return E2BSandbox(sandbox, timeout=self.command_timeout)

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
        kwargs = self._create_kwargs(labels, options)
        with translate_errors("create an E2B sandbox"):
            return self._wrap(Sandbox.create(**kwargs))

    def get(self, sandbox_id: str) -> E2BSandbox:
        with translate_errors(f"connect to E2B sandbox {sandbox_id}"):
            return self._wrap(Sandbox.connect(sandbox_id, **self._connection))

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        paginator = Sandbox.list(**self._list_kwargs(labels, cursor, limit))
        with translate_errors("list E2B sandboxes"):
            items = paginator.next_items()
        return SandboxPage(items=[_info(item) for item in items], next_cursor=paginator.next_token)

    def delete(self, *, sandbox_id: str) -> None:
        with translate_errors(f"delete E2B sandbox {sandbox_id}"):
            Sandbox.kill(sandbox_id, **self._connection)  # False when already gone: success too

    # -- async ----------------------------------------------------------------------------

    async def _acreate(self, *, labels: dict[str, str], **options: Any) -> E2BSandbox:
        kwargs = self._create_kwargs(labels, options)
        with translate_errors("create an E2B sandbox"):
            return self._wrap(await AsyncSandbox.create(**kwargs))

    async def aget(self, sandbox_id: str) -> E2BSandbox:
        with translate_errors(f"connect to E2B sandbox {sandbox_id}"):
            return self._wrap(await AsyncSandbox.connect(sandbox_id, **self._connection))

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        paginator = AsyncSandbox.list(**self._list_kwargs(labels, cursor, limit))
        with translate_errors("list E2B sandboxes"):
            items: builtins.list[E2BSandboxInfo] = await paginator.next_items()
        return SandboxPage(items=[_info(item) for item in items], next_cursor=paginator.next_token)

    async def adelete(self, *, sandbox_id: str) -> None:
        with translate_errors(f"delete E2B sandbox {sandbox_id}"):
            await AsyncSandbox.kill(sandbox_id, **self._connection)
