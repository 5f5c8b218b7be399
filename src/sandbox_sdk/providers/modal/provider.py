"""The Modal provider; see the package docstring."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import logging
import math
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

try:
    import modal
    import modal.exception
    from modal._utils.async_utils import synchronize_api
    from modal.config import config as modal_config
    from modal.sandbox._impl_v2 import SandboxImplV2
    from modal_proto import api_pb2
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the modal provider needs the modal SDK: pip install 'sandbox-sdk-py[modal]'") from exc

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.provider_kit import Lifetime, NativeRequest
from sandbox_sdk.providers.modal._errors import NameTakenError, translate_errors
from sandbox_sdk.providers.modal.sandbox import DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_TIMEOUT, ModalSandbox

logger = logging.getLogger(__name__)

#: The Modal app sandboxes are created in (and listed from) unless told otherwise.
DEFAULT_APP_NAME = "sandbox-sdk"
#: Modal's longest sandbox lifetime (``timeout``), also the longest idle timeout: 24 hours
#: ("a timeout of up to 24 hours", https://modal.com/docs/guide/sandboxes, Timeouts).
MAX_LIFETIME = 24 * 3600
#: Options of ``create`` passed straight to ``modal.Sandbox.create`` (Modal's own names and
#: units), besides ``ttl`` and ``idle_timeout`` (:class:`~sandbox_sdk.provider_kit.Lifetime`).
SANDBOX_OPTIONS = frozenset(
    {
        "image",
        "name",
        "cpu",
        "memory",
        "region",
        "cloud",
        "env",
        "block_network",
        "secrets",
    }
)


def sandbox_name(labels: Mapping[str, str]) -> str:
    """The name ``get_or_create(labels=...)`` gives the sandbox it creates.

    Modal names are unique among an app's running sandboxes ("AlreadyExistsError: If
    another running Sandbox in the App already holds the name", ``_experimental_set_name``,
    ``modal/sandbox/_sandbox.py:764`` in modal 1.6.4), and free again once that sandbox ends
    (``from_name(include_terminated=True)`` returns "the most recent terminated" one of
    a name, same file:554), so one name per label set makes concurrent ``get_or_create``
    calls agree. A digest: names are at most 64 of ``[A-Za-z0-9-_.]``
    (``modal/_utils/name_utils.py:26``), labels are not."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return f"sbx-{hashlib.sha256(canonical.encode()).hexdigest()[:56]}"


@dataclass(frozen=True)
class FindNamed(NativeRequest):
    """The app's running sandbox called ``name``, else the last one of that name that
    ended, else ``None``: ``modal.Sandbox.from_name(..., include_terminated=True)``."""

    name: str


@dataclass(frozen=True)
class ListPage(NativeRequest):
    """One page of Modal's listing (:data:`list_page`); replies with the response."""

    request: api_pb2.SandboxListRequest


async def _list_page(client: Any, request: api_pb2.SandboxListRequest) -> api_pb2.SandboxListResponse:
    """One page of Modal's sandbox listing, as the service sends it.

    ``modal.Sandbox.list`` keeps only each sandbox's id and drops the tags and creation
    time the response carries (``modal/sandbox/_sandbox.py:1459`` in modal 1.6.4), which
    would cost a tag request per sandbox, and it always starts at the newest, so a later
    page would re-walk the earlier ones. This is the request it makes
    (``SandboxImplV2.list_page``, ``modal/sandbox/_impl_v2.py:246``: ``SandboxListV2`` with
    the auth token), reached through the SDK's internals: the fake serves only
    ``SandboxListV2``, so an SDK that changes it fails the tests at once."""
    return await SandboxImplV2.list_page(client, request)


#: :func:`_list_page` on the SDK's event loop: ``list_page(client, request)`` blocks,
#: ``list_page.aio(client, request)`` awaits, as the SDK's own functions do.
list_page = synchronize_api(_list_page)  # type: ignore[no-untyped-call]  # the SDK's helper has no hints


class ModalProviderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`ModalProvider` (``get_provider("modal", **config)``
    type-checks them against this; tests/test_registry.py keeps the two alike)."""

    app_name: str
    token_id: str | None
    token_secret: str | None
    workdir: str | None
    command_timeout: float
    max_output_bytes: int


class ModalProvider(SandboxProvider[ModalSandbox]):
    """Modal sandboxes in one app.

    ``create(labels=..., ttl=7200, idle_timeout=600, image=modal.Image...)``:
    ``ttl`` (Modal's ``timeout``, default and maximum 24 hours) and
    ``idle_timeout`` (default an hour, maximum 24 hours) are seconds, rounded
    up to whole ones; other options of :data:`SANDBOX_OPTIONS` go to
    ``modal.Sandbox.create`` unchanged. ``list`` shows running sandboxes of
    the app, newest first. ``get_or_create(labels=...)`` names the sandbox it
    creates after the labels (:func:`sandbox_name`), so concurrent callers get
    one sandbox. :meth:`close` closes the Modal client.
    """

    name = "modal"

    def __init__(
        self,
        *,
        app_name: str = DEFAULT_APP_NAME,
        token_id: str | None = None,
        token_secret: str | None = None,
        workdir: str | None = None,
        command_timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        token_id = token_id or modal_config.get("token_id")
        token_secret = token_secret or modal_config.get("token_secret")
        if not token_id or not token_secret:
            raise errors.AuthenticationError(
                "Modal credentials not found: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET "
                "(or run `modal token new`), or pass token_id= and token_secret="
            )
        self.client = modal.Client.from_credentials(token_id, token_secret)
        self.app_name = app_name
        self.workdir = workdir
        self.command_timeout = command_timeout
        self.max_output_bytes = max_output_bytes
        self._app: modal.App | None = None

    def _wrap(self, sandbox: modal.Sandbox) -> ModalSandbox:
        return ModalSandbox(
            sandbox,
            timeout=self.command_timeout,
            max_output_bytes=self.max_output_bytes,
            workdir=self.workdir,
        )

    def _create_args(self, labels: dict[str, str], options: dict[str, Any]) -> dict[str, Any]:
        if "timeout" in options:
            raise errors.InvalidArgumentError(
                "a sandbox's lifetime is ttl= (seconds), as on every provider; Modal calls it timeout"
            )
        lifetime = Lifetime.from_options(
            options, platform="Modal", max_ttl=MAX_LIFETIME, max_idle_timeout=MAX_LIFETIME
        )
        unknown = set(options) - SANDBOX_OPTIONS
        if unknown:
            raise errors.InvalidArgumentError(
                f"unknown Modal sandbox options {sorted(unknown)}; known: ttl, idle_timeout, "
                f"{', '.join(sorted(SANDBOX_OPTIONS))}"
            )
        for key, value in labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise errors.InvalidArgumentError(f"invalid label {key!r}={value!r}")
        return {
            "tags": labels,
            "workdir": self.workdir,
            "client": self.client,
            # without a ttl, the platform's maximum: the SDK's default is five minutes
            "timeout": MAX_LIFETIME if lifetime.ttl is None else math.ceil(lifetime.ttl),
            "idle_timeout": None if lifetime.idle_timeout is None else math.ceil(lifetime.idle_timeout),
            **options,
        }

    @staticmethod
    def _info(sandbox: api_pb2.SandboxInfo) -> SandboxInfo:
        return SandboxInfo(
            id=sandbox.id,
            labels={tag.tag_name: tag.tag_value for tag in sandbox.tags},
            created_at=datetime.fromtimestamp(sandbox.created_at, UTC),
            status="running",
        )

    def _running(self, sandbox_id: str, sandbox: modal.Sandbox) -> ModalSandbox:
        """``sandbox`` as ours; one that has finished is gone, to callers."""
        if sandbox.returncode is not None:
            raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} has finished")
        return self._wrap(sandbox)

    def _op_list(
        self, app_id: str | None, labels: Mapping[str, str] | None, cursor: str | None, limit: int
    ) -> Generator[ListPage, api_pb2.SandboxListResponse, SandboxPage]:
        """Up to ``limit`` running sandboxes of the app carrying ``labels`` (filtered by
        the service), newest first, created before the cursor's time: Modal's own
        ``before_timestamp`` paging, one request per page of the service's. A full page
        has a cursor (the next page may be empty); the cursor is the last sandbox's exact
        creation time, so paging goes on right even if that sandbox is deleted meanwhile."""
        if not app_id:  # an empty app id would list the whole environment
            raise errors.SandboxRuntimeError(f"the Modal app {self.app_name!r} has no id")
        tags = [api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in (labels or {}).items()]
        before = _cursor_time(cursor)
        items: builtins.list[SandboxInfo] = []
        last = 0.0
        while len(items) < limit:
            response = yield ListPage(
                api_pb2.SandboxListRequest(app_id=app_id, before_timestamp=before, tags=tags)
            )
            taken = response.sandboxes[: limit - len(items)]
            if not taken:
                break
            items += [self._info(sandbox) for sandbox in taken]
            last = before = taken[-1].created_at
        return SandboxPage(items=items, next_cursor=repr(last) if len(items) == limit else None)

    def _running_named(self, sandbox: modal.Sandbox | None, labels: Mapping[str, str]) -> ModalSandbox | None:
        """A named sandbox :class:`FindNamed` found, if it runs; one that ended is logged,
        so a caller whose sandbox expired learns why it gets a new, empty one."""
        if sandbox is None:
            return None
        code = sandbox.returncode
        if code is None:
            return self._wrap(sandbox)
        why = {124: "ran out of time (its ttl or idle timeout)", 137: "was terminated"}
        logger.warning(
            "get_or_create: Modal sandbox %s for labels %s %s; creating a new, empty one",
            sandbox.object_id,
            dict(labels),
            why.get(code, f"exited with status {code}"),
        )
        return None

    def _reuse_or_create(
        self, labels: Mapping[str, str], options: dict[str, Any]
    ) -> Generator[Any, Any, ModalSandbox]:
        """The running sandbox named after ``labels`` if it answers, else the base's
        (an unnamed sandbox carrying exactly ``labels``, else a new one), created under that
        name: of two callers creating at once, one wins the name and the other is told
        (``ALREADY_EXISTS``) and hands out the winner."""
        name = options.get("name") or sandbox_name(labels)
        named = self._running_named((yield FindNamed(name)), labels)
        if named is not None and (yield from self._op_is_alive(named)):
            return named
        try:
            return (yield from super()._reuse_or_create(labels, {**options, "name": name}))
        except NameTakenError:
            winner = self._running_named((yield FindNamed(name)), labels)
            if winner is None or not (yield from self._op_is_alive(winner)):
                raise
            return winner

    def _perform(self, request: Any) -> Any:
        """Our own requests (:class:`FindNamed`, :class:`ListPage`) with the SDK's blocking
        API; the rest as the base does."""
        if isinstance(request, ListPage):
            return list_page(self.client, request.request)
        if isinstance(request, FindNamed):
            with contextlib.suppress(errors.SandboxNotFoundError), translate_errors(f"find {request.name}"):
                return modal.Sandbox.from_name(
                    self.app_name, request.name, include_terminated=True, client=self.client
                )
            return None
        return super()._perform(request)

    async def _aperform(self, request: Any) -> Any:
        """Our own requests with the SDK's ``.aio`` API; the rest as the base does."""
        if isinstance(request, ListPage):
            return await list_page.aio(self.client, request.request)
        if isinstance(request, FindNamed):
            with contextlib.suppress(errors.SandboxNotFoundError), translate_errors(f"find {request.name}"):
                return await modal.Sandbox.from_name.aio(
                    self.app_name, request.name, include_terminated=True, client=self.client
                )
            return None
        return await super()._aperform(request)

    def close(self) -> None:
        """Close the Modal client (its connections and background tasks); idempotent.
        Handles from this provider stop working."""
        self.client.close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        await self.client.close.aio()

    # -- sync ---------------------------------------------------------------------------

    def _get_app(self) -> modal.App:
        if self._app is None:
            with translate_errors(f"look up Modal app {self.app_name!r}"):
                self._app = modal.App.lookup(self.app_name, create_if_missing=True, client=self.client)
        return self._app

    def _create(self, *, labels: dict[str, str], **options: Any) -> ModalSandbox:
        args = self._create_args(labels, options)
        app = self._get_app()
        with translate_errors("create Modal sandbox"):
            return self._wrap(modal.Sandbox.create(app=app, **args))

    def _get(self, sandbox_id: str) -> ModalSandbox:
        with translate_errors(f"get sandbox {sandbox_id}"):
            return self._running(sandbox_id, modal.Sandbox.from_id(sandbox_id, client=self.client))

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """Running sandboxes of the app carrying ``labels``, newest first (see :meth:`_op_list`)."""
        _check_limit(limit)
        listing = self._op_list(self._get_app().app_id, labels, cursor, limit)
        with translate_errors("list Modal sandboxes"):
            return self._drive(listing)

    def _delete(self, sandbox_id: str) -> None:
        gone = contextlib.suppress(errors.SandboxNotFoundError)
        with gone, translate_errors(f"delete sandbox {sandbox_id}"):
            modal.Sandbox.from_id(sandbox_id, client=self.client).terminate()

    # -- async (the SDK's .aio API) -------------------------------------------------------

    async def _aget_app(self) -> modal.App:
        if self._app is None:
            with translate_errors(f"look up Modal app {self.app_name!r}"):
                self._app = await modal.App.lookup.aio(
                    self.app_name, create_if_missing=True, client=self.client
                )
        return self._app

    async def _acreate(self, *, labels: dict[str, str], **options: Any) -> ModalSandbox:
        args = self._create_args(labels, options)
        app = await self._aget_app()
        with translate_errors("create Modal sandbox"):
            return self._wrap(await modal.Sandbox.create.aio(app=app, **args))

    async def _aget(self, sandbox_id: str) -> ModalSandbox:
        with translate_errors(f"get sandbox {sandbox_id}"):
            return self._running(sandbox_id, await modal.Sandbox.from_id.aio(sandbox_id, client=self.client))

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """Running sandboxes of the app carrying ``labels``, newest first (see :meth:`_op_list`)."""
        _check_limit(limit)
        listing = self._op_list((await self._aget_app()).app_id, labels, cursor, limit)
        with translate_errors("list Modal sandboxes"):
            return await self._adrive(listing)

    async def _adelete(self, sandbox_id: str) -> None:
        gone = contextlib.suppress(errors.SandboxNotFoundError)
        with gone, translate_errors(f"delete sandbox {sandbox_id}"):
            sandbox = await modal.Sandbox.from_id.aio(sandbox_id, client=self.client)
            await sandbox.terminate.aio()


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise errors.InvalidArgumentError(f"limit must be an int >= 1, not {limit!r}")


def _cursor_time(cursor: str | None) -> float:
    """The creation time a cursor names (0: from the newest)."""
    if cursor is None:
        return 0.0
    try:
        return float(cursor)
    except ValueError:
        raise errors.InvalidArgumentError(f"not a cursor of this provider: {cursor!r}") from None


__all__ = ["DEFAULT_APP_NAME", "MAX_LIFETIME", "ModalProvider", "sandbox_name"]
