"""The Modal provider; see the package docstring."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict

try:
    import modal
    import modal.exception
    from modal.config import config as modal_config
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the modal provider needs the modal SDK: pip install 'sandbox-sdk-py[modal]'") from exc

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.provider_kit import Lifetime, NativeRequest, can_clean_up
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


#: The tag holding when this provider created a sandbox (wall-clock seconds):
#: ``modal.Sandbox.list`` yields sandboxes without their creation time
#: (``_Sandbox._list``, ``modal/sandbox/_sandbox.py:1458`` in modal 1.6.4, keeps
#: only the id and handle metadata of each listed ``SandboxInfo``), and no
#: public method returns it. Not a label: ``list`` and ``get_or_create`` leave it out.
CREATED_TAG = "sandbox-sdk.created-at"


@dataclass
class _Walk:
    """One walk through ``modal.Sandbox.list(app_id=..., tags=...)``, newest first:
    the SDK's generator, opened by the first :class:`NextListed`."""

    app_id: str
    tags: dict[str, str]
    listing: Any = field(default=None)


@dataclass(frozen=True)
class NextListed(NativeRequest):
    """The walk's next running sandbox (a ``modal.Sandbox``), or ``None`` at its end."""

    walk: _Walk


@dataclass(frozen=True)
class CloseWalk(NativeRequest):
    """Close the walk's generator (its remaining pages are never fetched)."""

    walk: _Walk


@dataclass(frozen=True)
class TagsOf(NativeRequest):
    """A listed sandbox's tags: ``Sandbox.get_tags()``, one request."""

    sandbox: modal.Sandbox


@dataclass(frozen=True)
class _Cursor:
    """Where a page of ``list`` ended: its last sandbox, and when that was created."""

    created_at: float
    sandbox_id: str

    @classmethod
    def parse(cls, cursor: str | None) -> _Cursor | None:
        if cursor is None:
            return None
        created, _, sandbox_id = cursor.partition("/")
        try:
            if not sandbox_id:
                raise ValueError(cursor)
            return cls(float(created), sandbox_id)
        except ValueError:
            raise errors.InvalidArgumentError(f"not a cursor of this provider: {cursor!r}") from None

    def __str__(self) -> str:
        return f"{self.created_at!r}/{self.sandbox_id}"


def _created_at(tags: Mapping[str, str]) -> float:
    """When this provider created the sandbox; 0 (the epoch) for one made without it."""
    try:
        return float(tags.get(CREATED_TAG, 0.0))
    except ValueError:
        return 0.0


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
    the app, newest first, through the SDK's public ``modal.Sandbox.list``
    (see :meth:`_op_list` for what that costs). ``get_or_create(labels=...)`` names the sandbox it
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
        if CREATED_TAG in labels:
            raise errors.InvalidArgumentError(f"the label {CREATED_TAG!r} is reserved")
        return {
            "tags": {**labels, CREATED_TAG: repr(time.time())},
            "workdir": self.workdir,
            "client": self.client,
            # without a ttl, the platform's maximum: the SDK's default is five minutes
            "timeout": MAX_LIFETIME if lifetime.ttl is None else math.ceil(lifetime.ttl),
            "idle_timeout": None if lifetime.idle_timeout is None else math.ceil(lifetime.idle_timeout),
            **options,
        }

    @staticmethod
    def _info(sandbox_id: str, tags: Mapping[str, str]) -> SandboxInfo:
        return SandboxInfo(
            id=sandbox_id,
            labels={key: value for key, value in tags.items() if key != CREATED_TAG},
            created_at=datetime.fromtimestamp(_created_at(tags), UTC),
            status="running",
        )

    def _running(self, sandbox_id: str, sandbox: modal.Sandbox) -> ModalSandbox:
        """``sandbox`` as ours; one that has finished is gone, to callers."""
        if sandbox.returncode is not None:
            raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} has finished")
        return self._wrap(sandbox)

    def _op_list(
        self, app_id: str, labels: Mapping[str, str] | None, cursor: str | None, limit: int
    ) -> Generator[NativeRequest, Any, SandboxPage]:
        """Up to ``limit`` running sandboxes of the app carrying ``labels``, newest first,
        after the cursor's sandbox, through the SDK's public API alone:
        ``modal.Sandbox.list(app_id=..., tags=...)`` (the service filters the tags and
        orders; the SDK fetches its pages as the walk goes on) and ``get_tags()`` for
        each sandbox of the page (the listing yields ids only).

        That costs a tag request per sandbox listed, and a page after the first walks
        again from the newest to the cursor's sandbox (``Sandbox.list`` always starts
        there; only the SDK's internals take a ``before_timestamp``), without a tag
        request for those it passes. If the cursor's sandbox was deleted meanwhile, a
        second walk passes those created at or after the cursor's time, asking each
        one's tags."""
        after = _Cursor.parse(cursor)
        tags = dict(labels or {})
        page = yield from self._walk_page(_Walk(app_id, tags), after, limit, by_time=False)
        if page is None:
            page = yield from self._walk_page(_Walk(app_id, tags), after, limit, by_time=True)
        items = page or []
        last = items[-1] if items else None
        next_cursor = None
        if last is not None and len(items) == limit:
            next_cursor = str(_Cursor(last.created_at.timestamp(), last.id))
        return SandboxPage(items=items, next_cursor=next_cursor)

    def _walk_page(
        self, walk: _Walk, after: _Cursor | None, limit: int, *, by_time: bool
    ) -> Generator[NativeRequest, Any, builtins.list[SandboxInfo] | None]:
        """One walk: the sandboxes past ``after`` (all when None), up to ``limit``;
        None when the walk by id never met the cursor's sandbox."""
        items: builtins.list[SandboxInfo] = []
        passed = after is None
        try:
            while len(items) < limit:
                sandbox = yield NextListed(walk)
                if sandbox is None:
                    break
                if not passed and not by_time:
                    assert after is not None
                    passed = sandbox.object_id == after.sandbox_id
                    continue
                info = self._info(sandbox.object_id, (yield TagsOf(sandbox)))
                if not passed:
                    assert after is not None
                    passed = info.created_at.timestamp() < after.created_at and info.id != after.sandbox_id
                    if not passed:
                        continue
                items.append(info)
        except BaseException as exc:
            if can_clean_up(exc):
                yield CloseWalk(walk)
            raise
        yield CloseWalk(walk)
        return items if passed else None

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
        """Our own requests (:class:`FindNamed`, the listing's) with the SDK's blocking
        API; the rest as the base does."""
        if isinstance(request, NextListed):
            walk = request.walk
            if walk.listing is None:
                listing = modal.Sandbox.list(app_id=walk.app_id, tags=walk.tags, client=self.client)
                walk.listing = iter(listing)
            return next(walk.listing, None)
        if isinstance(request, TagsOf):
            return request.sandbox.get_tags()
        if isinstance(request, CloseWalk):
            if request.walk.listing is not None:
                request.walk.listing.close()
            return None
        if isinstance(request, FindNamed):
            with contextlib.suppress(errors.SandboxNotFoundError), translate_errors(f"find {request.name}"):
                return modal.Sandbox.from_name(
                    self.app_name, request.name, include_terminated=True, client=self.client
                )
            return None
        return super()._perform(request)

    async def _aperform(self, request: Any) -> Any:
        """Our own requests with the SDK's ``.aio`` API; the rest as the base does."""
        if isinstance(request, NextListed):
            walk = request.walk
            if walk.listing is None:
                walk.listing = modal.Sandbox.list.aio(app_id=walk.app_id, tags=walk.tags, client=self.client)
            return await anext(walk.listing, None)
        if isinstance(request, TagsOf):
            return await request.sandbox.get_tags.aio()
        if isinstance(request, CloseWalk):
            if request.walk.listing is not None:
                await request.walk.listing.aclose()
            return None
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
        listing = self._op_list(_checked_app_id(self._get_app(), self.app_name), labels, cursor, limit)
        with translate_errors("list Modal sandboxes"):
            return self._drive(listing)

    def iter_sandboxes(
        self, *, labels: Mapping[str, str] | None = None, page_size: int = 100
    ) -> Iterator[SandboxInfo]:
        """Every running sandbox of the app carrying ``labels``, newest first, in one
        walk through ``modal.Sandbox.list`` (not page by page, each of which would walk
        again from the newest: see :meth:`_op_list`); a tag request per sandbox. The
        service's own pages set the pace: ``page_size`` is only checked."""
        _check_limit(page_size)
        walk = _Walk(_checked_app_id(self._get_app(), self.app_name), dict(labels or {}))
        try:
            while True:
                with translate_errors("list Modal sandboxes"):
                    sandbox = self._perform(NextListed(walk))
                    if sandbox is None:
                        return
                    tags = self._perform(TagsOf(sandbox))
                yield self._info(sandbox.object_id, tags)
        finally:
            with translate_errors("list Modal sandboxes"):
                self._perform(CloseWalk(walk))

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
        app_id = _checked_app_id(await self._aget_app(), self.app_name)
        listing = self._op_list(app_id, labels, cursor, limit)
        with translate_errors("list Modal sandboxes"):
            return await self._adrive(listing)

    async def aiter_sandboxes(
        self, *, labels: Mapping[str, str] | None = None, page_size: int = 100
    ) -> AsyncIterator[SandboxInfo]:
        """Async twin of :meth:`iter_sandboxes`."""
        _check_limit(page_size)
        walk = _Walk(_checked_app_id(await self._aget_app(), self.app_name), dict(labels or {}))
        try:
            while True:
                with translate_errors("list Modal sandboxes"):
                    sandbox = await self._aperform(NextListed(walk))
                    if sandbox is None:
                        return
                    tags = await self._aperform(TagsOf(sandbox))
                yield self._info(sandbox.object_id, tags)
        finally:
            with translate_errors("list Modal sandboxes"):
                await self._aperform(CloseWalk(walk))

    async def _adelete(self, sandbox_id: str) -> None:
        gone = contextlib.suppress(errors.SandboxNotFoundError)
        with gone, translate_errors(f"delete sandbox {sandbox_id}"):
            sandbox = await modal.Sandbox.from_id.aio(sandbox_id, client=self.client)
            await sandbox.terminate.aio()


def _checked_app_id(app: modal.App, name: str) -> str:
    """The app's id; never empty, which would list the whole environment."""
    if not app.app_id:
        raise errors.SandboxRuntimeError(f"the Modal app {name!r} has no id")
    return app.app_id


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise errors.InvalidArgumentError(f"limit must be an int >= 1, not {limit!r}")


__all__ = ["DEFAULT_APP_NAME", "MAX_LIFETIME", "ModalProvider", "sandbox_name"]
