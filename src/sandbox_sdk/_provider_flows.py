"""A provider's lifecycle, written once as flows for the kernel.

A flow yields requests (:class:`Get`, :class:`List`, :class:`Create`,
:class:`Probe`, :class:`Restore`, :class:`Delete`, :class:`Sleep`, and :class:`Lock` /
:class:`Unlock` around a lookup by labels) and receives their replies. ``SandboxProvider`` performs
them with its sync primitives (``get``, ``list``, ``_create``, ``delete``,
``_label_lock``) in ``_perform`` and with the async ones in ``_aperform``, so
``get_or_create`` and ``aget_or_create`` share one body and one set of rules:
all-or-nothing creation, exact label matches, the lock released however the
flow ends. tests/test_provider_flows.py drives the flows with scripted replies.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Generator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, Unpack

from sandbox_sdk import _kernel as kernel
from sandbox_sdk import errors
from sandbox_sdk._core import NativeRequest
from sandbox_sdk._handle import CreateOptions
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse, SandboxInfo, SandboxPage
from sandbox_sdk.network import NetworkPolicy
from sandbox_sdk.snapshots import Snapshot, SnapshotStore

SandboxT = TypeVar("SandboxT", bound=BaseSandbox)
T = TypeVar("T")

#: Sandboxes per ``list`` call when ``get_or_create`` looks for one by labels.
LOOKUP_PAGE_SIZE = 100
#: Each sandbox created, connected to or deleted, at INFO (ids and labels only).
lifecycle_log = logging.getLogger("sandbox_sdk.lifecycle")
#: Seconds between ``list`` calls while a new sandbox is not yet listed (see ``_listing_lag``).
LISTING_POLL = 0.25


@dataclass(frozen=True)
class Get:
    """Connect to a sandbox (``get``); replies with it."""

    sandbox_id: str


@dataclass(frozen=True)
class List:
    """One page of ``list``; replies with a :class:`~sandbox_sdk.models.SandboxPage`."""

    labels: Mapping[str, str] | None
    cursor: str | None
    limit: int


@dataclass(frozen=True)
class Create:
    """Make a sandbox (``_create``); replies with it, not yet checked alive."""

    labels: dict[str, str]
    options: dict[str, Any]


@dataclass(frozen=True)
class Probe:
    """Run the liveness command in a sandbox; replies with its ``ExecuteResponse``."""

    sandbox: BaseSandbox


@dataclass(frozen=True)
class Restore:
    """Put a snapshot's files into a new sandbox (its ``restore``)."""

    sandbox: BaseSandbox
    snapshot: Snapshot | str
    store: SnapshotStore | None


@dataclass(frozen=True)
class Delete:
    """Delete a sandbox (``delete``); idempotent."""

    sandbox_id: str


@dataclass(frozen=True)
class Lock:
    """Enter the provider's ``_label_lock`` for ``labels``; replies with the held lock."""

    labels: Mapping[str, str]


@dataclass(frozen=True)
class Unlock:
    """Leave a lock a :class:`Lock` request entered."""

    held: AbstractContextManager[object]


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before asking again (``time.sleep``, ``anyio.sleep``)."""

    seconds: float


#: A provider's flow may also yield its own requests (subclasses of
#: :class:`~sandbox_sdk.provider_kit.NativeRequest`), which its ``_perform`` /
#: ``_aperform`` override carries out, handing every other request to ``super()``.
Request = Get | List | Create | Probe | Restore | Delete | Lock | Unlock | Sleep | NativeRequest
#: A lifecycle flow returning ``T``.
Flow = Generator[Request, Any, T]


@dataclass
class Listing:
    """How far a walk through ``list`` pages has got: the next cursor, or done.
    Each :meth:`next_page` is a flow of one request, so a lazy iterator can
    run one per page it reaches."""

    labels: Mapping[str, str] | None
    page_size: int
    cursor: str | None = None
    done: bool = False

    def __post_init__(self) -> None:
        if self.labels is not None:
            self.labels = checked_labels(self.labels)

    def next_page(self) -> Flow[builtins.list[SandboxInfo]]:
        """The next page's sandboxes, moving the cursor on (``done`` after the last page)."""
        page: SandboxPage = yield List(self.labels, self.cursor, self.page_size)
        self.cursor, self.done = page.next_cursor, page.next_cursor is None
        return page.items


def checked_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of ``labels`` (``None``: none), or :class:`~sandbox_sdk.errors.InvalidArgumentError`
    before anything is made or looked up: labels select and name sandboxes, so a
    list of names or a number as a value would otherwise fail deep in a provider
    (or, stored, never match again)."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise errors.InvalidArgumentError(
            f"labels must be a mapping of str to str, such as {{'thread': 'a'}},"
            f" not {type(labels).__name__}: {labels!r}"
        )
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise errors.InvalidArgumentError(
                f"labels must map str to str, not {type(key).__name__} to {type(value).__name__}:"
                f" {key!r}: {value!r}"
            )
    return dict(labels)


def with_lifetime(options: dict[str, Any], ttl: float | None, idle_timeout: float | None) -> dict[str, Any]:
    """``options`` with the lifetime every provider takes, where one is given
    (an absent one is the provider's default, as ``None`` is)."""
    given = {"ttl": ttl, "idle_timeout": idle_timeout}
    return {**options, **{key: value for key, value in given.items() if value is not None}}


def locked(labels: Mapping[str, str], flow: Flow[T]) -> Flow[T]:
    """``flow`` under the label lock, released however it ends."""
    held = yield Lock(labels)
    try:
        result = yield from flow
    except BaseException as exc:
        if can_clean_up(exc):
            yield Unlock(held)
        raise
    yield Unlock(held)
    return result


class LifecycleFlows(ABC, Generic[SandboxT]):
    """The derived lifecycle operations, each declared once as ``_op_<name>``
    with the public signature and docstring of ``<name>``.
    scripts/generate_twins.py writes ``<name>`` and ``a<name>`` from them into
    ``sandbox_sdk._provider_lifecycle``; ``SandboxProvider`` performs the
    requests (:meth:`_perform`, :meth:`_aperform`)."""

    #: The name under which the provider is registered (entry point).
    name: ClassVar[str] = ""

    #: Whether ``create`` binds host paths into a sandbox (``mounts=[Mount(...)]``,
    #: docs/policy.md); a provider that cannot refuses the option by name.
    supports_mounts: ClassVar[bool] = False
    #: Whether ``create(network=NetworkPolicy(...))`` is enforced (docs/policy.md).
    supports_network_policy: ClassVar[bool] = False

    #: Seconds a new sandbox may take to show in ``list``. A provider whose
    #: listing lags and whose label lock is not exclusive across clients sets
    #: it, and ``get_or_create`` by labels then converges after creating (see
    #: :meth:`_converge`); 0 (an exact listing or an exclusive lock) skips that.
    _listing_lag: float = 0.0

    def _refuse_unsupported(self, options: Mapping[str, Any]) -> None:
        """Refuse, before anything is made, a policy this provider cannot enforce."""
        if options.get("mounts") and not self.supports_mounts:
            raise errors.InvalidArgumentError(
                f"the {self.name} provider cannot mount host paths into a sandbox (mounts=...): "
                "docs/policy.md lists the providers that can"
            )
        if isinstance(options.get("network"), NetworkPolicy) and not self.supports_network_policy:
            raise errors.UnsupportedError(
                f"the {self.name} provider cannot enforce a NetworkPolicy (egress by name): "
                "docs/policy.md lists the providers that can"
            )

    @abstractmethod
    def _perform(self, request: Request) -> Any:
        """One request of a flow, with the sync primitives."""

    @abstractmethod
    async def _aperform(self, request: Request) -> Any:
        """One request of a flow, with the async primitives."""

    def _drive(self, flow: Flow[T]) -> T:
        """Run a flow with the sync primitives."""
        return kernel.run(flow, self._perform)

    async def _adrive(self, flow: Flow[T]) -> T:
        """Run a flow with the async primitives; clean-up after a cancellation runs shielded."""
        return await kernel.arun(flow, self._aperform)

    def _op_is_alive(self, sandbox: SandboxT) -> Flow[bool]:
        """Whether the sandbox answers a trivial command."""
        try:
            response: ExecuteResponse = yield Probe(sandbox)
        except Exception:  # noqa: BLE001 - any failure means "not usable"
            return False
        return response.exit_code == 0

    def _op_get(self, sandbox_id: str) -> Flow[SandboxT]:
        """Connect to an existing sandbox, or raise
        :class:`~sandbox_sdk.errors.SandboxNotFoundError`. The handle can delete
        its sandbox (``delete_sandbox``, or leaving ``with sandbox:``)."""
        sandbox: SandboxT = yield Get(sandbox_id)
        lifecycle_log.info("%s: got sandbox %s", self.name, sandbox_id)
        return sandbox

    def _op_delete(self, sandbox_id: str) -> Flow[None]:
        """Delete a sandbox; deleting one that does not exist succeeds."""
        yield Delete(sandbox_id)
        lifecycle_log.info("%s: deleted sandbox %s", self.name, sandbox_id)

    def _op_create(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        ttl: float | None = None,
        idle_timeout: float | None = None,
        from_snapshot: Snapshot | str | None = None,
        snapshot_store: SnapshotStore | None = None,
        **options: Unpack[CreateOptions],
    ) -> Flow[SandboxT]:
        """A new sandbox, checked alive; deleted again if the check fails.
        ``with provider.create() as sandbox:`` deletes it on leaving the block.

        Every provider takes ``ttl`` (seconds from creation) and
        ``idle_timeout`` (seconds unused; ``None``: the provider's default);
        ``options`` are the provider's own (docs/lifecycle.md). With
        ``from_snapshot`` (a :class:`~sandbox_sdk.Snapshot` or its id in
        ``snapshot_store``), the new sandbox starts with its files, or is
        deleted again if they cannot be restored (docs/state.md)."""
        wanted, given = checked_labels(labels), with_lifetime(dict(options), ttl, idle_timeout)
        self._refuse_unsupported(given)
        sandbox: SandboxT = yield Create(wanted, given)
        lifecycle_log.info("%s: created sandbox %s labels=%s", self.name, sandbox.id, wanted)
        try:
            if not (yield from self._op_is_alive(sandbox)):
                raise errors.SandboxRuntimeError(f"new sandbox {sandbox.id} failed its health check")
            if from_snapshot is not None:
                yield Restore(sandbox, from_snapshot, snapshot_store)
        except BaseException as exc:
            if can_clean_up(exc):
                with contextlib.suppress(Exception):  # the original failure is the one to report
                    yield from self._op_delete(sandbox.id)
            raise
        return sandbox

    def _op_get_or_create(
        self,
        *,
        sandbox_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl: float | None = None,
        idle_timeout: float | None = None,
        **options: Unpack[CreateOptions],
    ) -> Flow[SandboxT]:
        """With ``sandbox_id``: that sandbox, or ``SandboxNotFoundError`` (never a
        new one). With ``labels``: a live sandbox carrying exactly those labels,
        or a new one with them. With neither: a new sandbox. ``ttl``,
        ``idle_timeout`` and ``options`` are for a new one, as in ``create``."""
        wanted, given = checked_labels(labels), with_lifetime(dict(options), ttl, idle_timeout)
        self._refuse_unsupported(given)
        if sandbox_id is not None:
            return (yield from self._get_live(sandbox_id))
        if not wanted:
            return (yield from self._op_create(**given))
        return (yield from locked(wanted, self._reuse_or_create(wanted, given)))

    def _get_live(self, sandbox_id: str) -> Flow[SandboxT]:
        """That sandbox, checked alive; ``SandboxNotFoundError`` if it is missing or dead."""
        sandbox: SandboxT = yield from self._op_get(sandbox_id)
        if not (yield from self._op_is_alive(sandbox)):
            raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} exists but is not running")
        return sandbox

    def _reuse_or_create(self, labels: Mapping[str, str], options: dict[str, Any]) -> Flow[SandboxT]:
        """The first live sandbox carrying exactly ``labels``, else a new one."""
        wanted = dict(labels)
        listing = Listing(labels, LOOKUP_PAGE_SIZE)
        while not listing.done:
            for info in (yield from listing.next_page()):
                if info.labels != wanted:
                    continue
                try:
                    return (yield from self._get_live(info.id))
                except errors.SandboxNotFoundError as exc:
                    lifecycle_log.warning(
                        "sandbox %s carrying %s is gone or not running: %s", info.id, wanted, exc
                    )
        # A sandbox that expired may have left no trace to look up (E2B's do not):
        # say so rather than hand out a new, empty one silently.
        lifecycle_log.info(
            "get_or_create: no live sandbox carries labels %s, creating a new sandbox"
            " (one with these labels that expired or was deleted is not brought back)",
            wanted,
        )
        created: SandboxT = yield from self._op_create(labels=labels, **options)
        if self._listing_lag > 0:
            return (yield from self._converge(wanted, created))
        return created

    def _converge(self, labels: dict[str, str], mine: SandboxT) -> Flow[SandboxT]:
        """After creating ``mine``: another client may have created a sandbox for
        the same labels meanwhile, unseen in a lagging listing. List until
        ``mine`` shows (up to ``_listing_lag`` seconds; what was created before it
        shows by then too), keep the oldest sandbox carrying exactly ``labels``,
        which every racing client picks alike, and delete ``mine`` if it is not
        that one. Only one's own duplicate is deleted: another client's may
        still be in its health check."""
        waited = 0.0
        while True:
            found = [info for info in (yield from self._listed(labels)) if info.labels == labels]
            if any(info.id == mine.id for info in found) or waited >= self._listing_lag:
                break
            yield Sleep(LISTING_POLL)
            waited += LISTING_POLL
        keeper = min(found, key=lambda info: (info.created_at, info.id), default=None)
        if keeper is None or keeper.id == mine.id:
            return mine
        try:
            kept: SandboxT = yield from self._get_live(keeper.id)
        except errors.SandboxNotFoundError:
            return mine
        lifecycle_log.info(
            "sandbox %s duplicates %s for %s (a concurrent create): deleting it", mine.id, kept.id, labels
        )
        with contextlib.suppress(Exception):  # a duplicate left behind is not the caller's failure
            yield Delete(mine.id)
        return kept

    def _listed(self, labels: Mapping[str, str]) -> Flow[builtins.list[SandboxInfo]]:
        """Every sandbox ``list`` shows for ``labels``, all pages."""
        listing, found = Listing(labels, LOOKUP_PAGE_SIZE), []
        while not listing.done:
            found += yield from listing.next_page()
        return found
