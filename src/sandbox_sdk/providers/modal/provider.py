"""The Modal provider; see the package docstring."""

from __future__ import annotations

import builtins
import contextlib
import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

try:
    import modal
    import modal.exception
    from modal.config import config as modal_config
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the modal provider needs the modal SDK: pip install 'sandbox-sdk-py[modal]'") from exc

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider, labels_match
from sandbox_sdk.provider_kit import Lifetime
from sandbox_sdk.providers.modal._errors import translate_errors
from sandbox_sdk.providers.modal.sandbox import DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_TIMEOUT, ModalSandbox

#: The Modal app sandboxes are created in (and listed from) unless told otherwise.
DEFAULT_APP_NAME = "sandbox-sdk"
#: Tag recording when we created a sandbox: Modal's list API does not return creation times.
CREATED_AT_TAG = "sandbox-sdk.created-at"
#: Modal's longest sandbox lifetime (``timeout``), also the longest idle timeout: 24 hours
#: ("a timeout of up to 24 hours", https://modal.com/docs/guide/sandboxes, Timeouts).
MAX_LIFETIME = 24 * 3600
#: Options of ``create`` passed straight to ``modal.Sandbox.create`` (Modal's own names and
#: units), besides ``ttl`` and ``idle_timeout`` (:class:`~sandbox_sdk.provider_kit.Lifetime`).
SANDBOX_OPTIONS = frozenset(
    {
        "image",
        "cpu",
        "memory",
        "region",
        "cloud",
        "env",
        "block_network",
        "secrets",
    }
)


class ModalProvider(SandboxProvider[ModalSandbox]):
    """Modal sandboxes in one app.

    ``create(labels=..., ttl=7200, idle_timeout=600, image=modal.Image...)``:
    ``ttl`` (Modal's ``timeout``, default and maximum 24 hours) and
    ``idle_timeout`` (default an hour, maximum 24 hours) are seconds, rounded
    up to whole ones; other options of :data:`SANDBOX_OPTIONS` go to
    ``modal.Sandbox.create`` unchanged. ``list`` shows running sandboxes of
    the app, newest first. :meth:`close` closes the Modal client.
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
            if not isinstance(key, str) or not isinstance(value, str) or key == CREATED_AT_TAG:
                raise errors.InvalidArgumentError(f"invalid label {key!r}={value!r}")
        tags = {**labels, CREATED_AT_TAG: f"{datetime.now(UTC).timestamp():.6f}"}
        return {
            "tags": tags,
            "workdir": self.workdir,
            "client": self.client,
            # without a ttl, the platform's maximum: the SDK's default is five minutes
            "timeout": MAX_LIFETIME if lifetime.ttl is None else math.ceil(lifetime.ttl),
            "idle_timeout": None if lifetime.idle_timeout is None else math.ceil(lifetime.idle_timeout),
            **options,
        }

    @staticmethod
    def _info(sandbox_id: str, tags: Mapping[str, str]) -> SandboxInfo:
        labels = {k: v for k, v in tags.items() if k != CREATED_AT_TAG}
        try:
            created = float(tags.get(CREATED_AT_TAG, "0"))
        except ValueError:
            created = 0.0  # not made by us: Modal does not tell
        return SandboxInfo(
            id=sandbox_id,
            labels=labels,
            created_at=datetime.fromtimestamp(created, UTC),
            status="running",
        )

    def _running(self, sandbox_id: str, sandbox: modal.Sandbox) -> ModalSandbox:
        """``sandbox`` as ours; one that has finished is gone, to callers."""
        if sandbox.returncode is not None:
            raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} has finished")
        return self._wrap(sandbox)

    def _list_query(self, app: modal.App, labels: Mapping[str, str] | None) -> dict[str, Any]:
        return {"app_id": app.app_id, "tags": dict(labels or {}), "client": self.client}

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
        """Running sandboxes of the app carrying ``labels``, newest first, over Modal's own
        (``before_timestamp``) paging. The cursor names the last sandbox handed out and when it
        was created, so paging goes on correctly even if that sandbox is deleted meanwhile."""
        query = self._list_query(self._get_app(), labels)
        page = _Page(cursor, limit, labels)
        with translate_errors("list Modal sandboxes"):
            for _ in page.passes():
                for sandbox in modal.Sandbox.list(**query):
                    if not page.takes_another():
                        break
                    if page.looks_at(sandbox.object_id):
                        page.offer(self._info(sandbox.object_id, sandbox.get_tags()))
        return page.result()

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
        query = self._list_query(await self._aget_app(), labels)
        page = _Page(cursor, limit, labels)
        with translate_errors("list Modal sandboxes"):
            for _ in page.passes():
                async for sandbox in modal.Sandbox.list.aio(**query):
                    if not page.takes_another():
                        break
                    if page.looks_at(sandbox.object_id):
                        page.offer(self._info(sandbox.object_id, await sandbox.get_tags.aio()))
        return page.result()

    async def _adelete(self, sandbox_id: str) -> None:
        gone = contextlib.suppress(errors.SandboxNotFoundError)
        with gone, translate_errors(f"delete sandbox {sandbox_id}"):
            sandbox = await modal.Sandbox.from_id.aio(sandbox_id, client=self.client)
            await sandbox.terminate.aio()


class _Page:
    """One page of ``list``: the sandboxes after the cursor, up to ``limit``.

    A cursor is ``<created-at>/<id>`` of the last sandbox of the previous page. The
    listing is first walked by id (no extra requests for the sandboxes before it); if
    that sandbox is gone, it is walked again comparing creation times instead."""

    def __init__(self, cursor: str | None, limit: int, labels: Mapping[str, str] | None) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise errors.InvalidArgumentError(f"limit must be an int >= 1, not {limit!r}")
        self.after_id: str | None = None
        self.after_time = 0.0
        if cursor is not None:
            created, _, sandbox_id = cursor.partition("/")
            try:
                self.after_time = float(created)
            except ValueError:
                raise errors.InvalidArgumentError(f"not a cursor of this provider: {cursor!r}") from None
            self.after_id = sandbox_id
        self.passed = cursor is None
        self.by_creation_time = False
        self.limit = limit
        self.labels = labels
        self.items: builtins.list[SandboxInfo] = []
        self.more = False

    def passes(self) -> Iterator[None]:
        """Walk the listing by id; if the cursor's sandbox was not in it, once more by creation time."""
        yield
        if not self.passed:
            self.passed = self.by_creation_time = True
            yield

    def takes_another(self) -> bool:
        """Whether the page has room for one more sandbox; if not, there is a next page."""
        self.more = len(self.items) >= self.limit
        return not self.more

    def looks_at(self, sandbox_id: str) -> bool:
        """Whether ``sandbox_id`` may come after the cursor: walking by id, the ones after
        it do; by creation time, :meth:`offer` decides."""
        if not self.passed and sandbox_id == self.after_id:
            self.passed = True
            return False
        return self.passed

    def offer(self, info: SandboxInfo) -> None:
        if self.by_creation_time and info.created_at.timestamp() >= self.after_time:
            return
        if labels_match(info.labels, self.labels):
            self.items.append(info)

    def result(self) -> SandboxPage:
        last = self.items[-1] if self.more and self.items else None
        next_cursor = None if last is None else f"{last.created_at.timestamp():.6f}/{last.id}"
        return SandboxPage(items=self.items, next_cursor=next_cursor)


__all__ = ["CREATED_AT_TAG", "DEFAULT_APP_NAME", "MAX_LIFETIME", "ModalProvider"]
