"""Sandboxes kept as directories on this machine: the state shared by the
``local`` and ``bwrap`` providers.

Layout under a provider's state directory::

    sandboxes/<id>/meta.json    labels, times, options (replaced atomically)
    sandboxes/<id>/last-used    its mtime is the last use (idle timeout)
    sandboxes/<id>/workspace/   the sandbox's files
    locks/<hash>.lock           one flock(2) file per label set

Ids sort by creation time, so the directory names alone give ``list`` its
stable order and cursor: a page reads the names (cheap) and the metadata of
the page's sandboxes only. A sandbox is assembled under a hidden name and
renamed into place, and deleted by renaming it away first, so another process
never sees half of one.
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider, labels_match
from sandbox_sdk.provider_kit.lifetime import check_seconds

#: Environment variable naming the directory under which providers keep state.
HOME_ENV = "SANDBOX_SDK_HOME"
#: Used when neither a ``state_dir`` argument nor ``SANDBOX_SDK_HOME`` is given.
DEFAULT_HOME = Path("~/.sandbox-sdk")
ID_PATTERN = re.compile(r"[a-z]+-[0-9a-f]{24}")
META_FILE = "meta.json"
USAGE_FILE = "last-used"
WORKSPACE_DIR = "workspace"
#: Options every local provider's ``create`` accepts.
COMMON_OPTIONS = frozenset({"ttl", "idle_timeout", "setup"})
SETUP_TIMEOUT = 600.0

SandboxT = TypeVar("SandboxT", bound=BaseSandbox)

logger = logging.getLogger(__name__)
#: The provider lifecycle's logger (as ``create``, ``get`` and ``delete`` log): each sandbox reaped, at INFO.
lifecycle_log = logging.getLogger("sandbox_sdk.lifecycle")


class DamagedRecordError(errors.SandboxNotFoundError):
    """A sandbox whose ``meta.json`` cannot be read as a record (truncated,
    say): that sandbox alone cannot be used. ``list`` skips it (logging a
    warning), ``get`` raises this, and ``reap`` removes it."""


def default_state_dir(provider_name: str) -> Path:
    """``$SANDBOX_SDK_HOME/<provider>``, else ``~/.sandbox-sdk/<provider>``."""
    home = os.environ.get(HOME_ENV) or DEFAULT_HOME
    return Path(home).expanduser() / provider_name


class SandboxRecord(BaseModel):
    """What ``meta.json`` holds about one sandbox."""

    model_config = ConfigDict(frozen=True)

    id: str
    provider: str
    labels: dict[str, str] = Field(default_factory=dict)
    created_at: datetime
    ttl: float | None = Field(default=None, description="seconds from creation until it expires")
    idle_timeout: float | None = Field(default=None, description="seconds unused until it expires")
    options: dict[str, Any] = Field(default_factory=dict, description="provider-specific settings")


def mark_used(sandbox_dir: Path) -> None:
    """Record a use now (the idle clock restarts; a missing usage file is
    made again). A sandbox deleted meanwhile (its directory gone) is a
    :class:`~sandbox_sdk.errors.SandboxNotFoundError`, so a handle to it
    fails typed before running anything."""
    try:
        (sandbox_dir / USAGE_FILE).touch()
    except FileNotFoundError:
        raise errors.SandboxNotFoundError(f"sandbox {sandbox_dir.name} was deleted") from None


def write_atomically(path: Path, data: bytes) -> None:
    """Readers see the old file or the whole new one, never a part."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def remove_tree(path: Path) -> None:
    """``rm -rf`` that also removes what sandboxed code made unreadable or
    unwritable (directories with mode 0, say): on a permission error it opens
    up the directory and its parent and removes what failed afresh."""

    def open_up_and_retry(_function: Any, failed: str, _exc: Any) -> None:
        os.chmod(os.path.dirname(failed), stat.S_IRWXU)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, stat.S_IRWXU)
            shutil.rmtree(failed, onerror=open_up_and_retry)
        else:
            os.unlink(failed)

    shutil.rmtree(path, onerror=open_up_and_retry)


class SandboxStore:
    """The sandboxes of one provider in one state directory."""

    def __init__(self, state_dir: Path, provider_name: str) -> None:
        self.state_dir = state_dir
        self.provider_name = provider_name
        self.sandboxes_dir = state_dir / "sandboxes"
        self.locks_dir = state_dir / "locks"
        for directory in (self.sandboxes_dir, self.locks_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def new_id(self) -> str:
        """Sorts by creation time; the random tail makes concurrent ids distinct."""
        return f"{self.provider_name}-{time.time_ns():016x}{secrets.token_hex(4)}"

    def directory(self, sandbox_id: str) -> Path:
        if not isinstance(sandbox_id, str) or not ID_PATTERN.fullmatch(sandbox_id):
            raise errors.SandboxNotFoundError(
                f"no {self.provider_name} sandbox {sandbox_id!r} (malformed id)"
            )
        return self.sandboxes_dir / sandbox_id

    def add(self, sandbox_id: str, build: Callable[[Path], SandboxRecord]) -> Path:
        """Create the sandbox's directory, let ``build(staging_dir)`` finish it
        and return its record, then publish it under its id in one rename.
        Nothing is left on failure."""
        staging = self.sandboxes_dir / f".new-{sandbox_id}"
        staging.mkdir(mode=0o700)
        try:
            (staging / WORKSPACE_DIR).mkdir()
            (staging / USAGE_FILE).touch()
            record = build(staging)
            write_atomically(staging / META_FILE, record.model_dump_json(indent=1).encode())
            final = self.directory(sandbox_id)
            os.rename(staging, final)
        except BaseException:
            remove_tree(staging)
            raise
        return final

    def load(self, sandbox_id: str) -> SandboxRecord:
        path = self.directory(sandbox_id) / META_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise errors.SandboxNotFoundError(f"no {self.provider_name} sandbox {sandbox_id!r}") from None
        try:
            record = SandboxRecord.model_validate_json(data)
        except ValueError as exc:  # pydantic's ValidationError, for any damage
            raise DamagedRecordError(
                f"{self.provider_name} sandbox {sandbox_id!r} has a damaged {META_FILE}: {exc}"
            ) from None
        if record.provider != self.provider_name:
            raise errors.SandboxNotFoundError(
                f"sandbox {sandbox_id!r} belongs to the {record.provider!r} provider"
            )
        return record

    def last_used(self, sandbox_id: str) -> datetime:
        """The usage file's mtime; without one (lost), the record's, so
        ``list`` and ``get`` agree that the sandbox is there."""
        directory = self.directory(sandbox_id)
        for name in (USAGE_FILE, META_FILE):
            with contextlib.suppress(FileNotFoundError):
                return datetime.fromtimestamp((directory / name).stat().st_mtime, UTC)
        raise errors.SandboxNotFoundError(f"no {self.provider_name} sandbox {sandbox_id!r}")

    def expiry(self, record: SandboxRecord) -> datetime | None:
        """When the sandbox expires (the earlier of TTL and idle timeout), if ever."""
        moments = []
        if record.ttl is not None:
            moments.append(record.created_at.timestamp() + record.ttl)
        if record.idle_timeout is not None:
            moments.append(self.last_used(record.id).timestamp() + record.idle_timeout)
        return datetime.fromtimestamp(min(moments), UTC) if moments else None

    def is_expired(self, record: SandboxRecord, now: float | None = None) -> bool:
        expiry = self.expiry(record)
        return expiry is not None and expiry.timestamp() <= (time.time() if now is None else now)

    def ids(self) -> list[str]:
        """Every published sandbox id, sorted (names only; no metadata is read)."""
        with os.scandir(self.sandboxes_dir) as entries:
            return sorted(entry.name for entry in entries if ID_PATTERN.fullmatch(entry.name))

    def page(
        self, labels: Mapping[str, str] | None, cursor: str | None, limit: int
    ) -> tuple[list[SandboxRecord], str | None]:
        """Up to ``limit`` records after ``cursor`` (an id) carrying ``labels``."""
        if cursor is not None and not (isinstance(cursor, str) and ID_PATTERN.fullmatch(cursor)):
            raise errors.InvalidArgumentError(f"invalid cursor {cursor!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise errors.InvalidArgumentError(f"limit must be a positive int, not {limit!r}")
        ids = self.ids()
        start = 0 if cursor is None else bisect.bisect_right(ids, cursor)
        found: list[SandboxRecord] = []
        for position in range(start, len(ids)):
            try:
                record = self.load(ids[position])
            except DamagedRecordError as exc:
                logger.warning("skipping a sandbox: %s", exc)
                continue
            except errors.SandboxNotFoundError:
                continue  # deleted meanwhile, or another provider's
            if labels_match(record.labels, labels):
                found.append(record)
                if len(found) == limit:
                    more = position + 1 < len(ids)
                    return found, record.id if more else None
        return found, None

    @contextlib.contextmanager
    def locked(self, sandbox_id: str, *, exclusive: bool) -> Iterator[Path]:
        """The sandbox's directory, flocked: shared by ``get``, exclusive by
        ``reap``, so a sandbox is never reaped between a ``get`` finding it
        unexpired and marking it used."""
        path = self.directory(sandbox_id)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise errors.SandboxNotFoundError(f"no {self.provider_name} sandbox {sandbox_id!r}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                still_there = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                still_there = False
            if not still_there:  # deleted (renamed away) while we waited
                raise errors.SandboxNotFoundError(f"no {self.provider_name} sandbox {sandbox_id!r}")
            yield path
        finally:
            os.close(fd)  # releases the lock

    def remove(self, sandbox_id: str, release: Callable[[Path], None] | None = None) -> None:
        """Idempotent: rename the directory away (atomic), let ``release``
        stop what runs for the sandbox (given the renamed directory), then
        delete it."""
        try:
            path = self.directory(sandbox_id)
        except errors.SandboxNotFoundError:
            return
        trash = self.sandboxes_dir / f".trash-{sandbox_id}-{secrets.token_hex(4)}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return
        try:
            if release is not None:
                release(trash)
        finally:
            remove_tree(trash)

    @contextlib.contextmanager
    def label_lock(self, labels: Mapping[str, str]) -> Iterator[None]:
        """Exclusive across threads and processes for one label set."""
        digest = hashlib.sha256(json.dumps(dict(labels), sort_keys=True).encode()).hexdigest()[:32]
        with open(self.locks_dir / f"{digest}.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def run_setup(sandbox: BaseSandbox, setup: str) -> None:
    """Run a new sandbox's ``setup`` command; a non-zero exit is an error carrying its output."""
    response = sandbox.execute(setup, timeout=SETUP_TIMEOUT)
    if response.exit_code != 0:
        raise errors.SandboxRuntimeError(
            f"setup of sandbox {sandbox.id} failed (exit {response.exit_code}): {response.output[-2000:]}"
        )


class HostStateProvider(SandboxProvider[SandboxT]):
    """A provider whose sandboxes are directories in a :class:`SandboxStore`.

    ``create`` options shared by every such provider: ``ttl`` and
    ``idle_timeout`` (seconds; recorded, enforced by ``get`` and :meth:`reap`)
    and ``setup``, a shell command run in the new sandbox whose failure
    deletes it again. Subclasses open a sandbox from its record and directory,
    and may accept more options."""

    #: Options a subclass accepts on top of :data:`COMMON_OPTIONS`.
    extra_options: frozenset[str] = frozenset()

    def __init__(self, state_dir: str | os.PathLike[str] | None = None) -> None:
        path = Path(state_dir).expanduser() if state_dir is not None else default_state_dir(self.name)
        self.store = SandboxStore(path.resolve(), self.name)

    @abstractmethod
    def _open(self, record: SandboxRecord, directory: Path) -> SandboxT:
        """A sandbox object over an existing directory."""

    def _prepare(self, staging_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
        """Finish a new sandbox's directory; return the options to record."""
        return options

    def _release(self, directory: Path) -> None:
        """Stop whatever runs for a sandbox being removed (``directory`` is
        its directory, already renamed away): nothing by default."""

    def _create(self, *, labels: dict[str, str], **options: Any) -> SandboxT:
        ttl, idle_timeout, setup = self._check_options(options)
        sandbox_id = self.store.new_id()

        def build(staging: Path) -> SandboxRecord:
            return SandboxRecord(
                id=sandbox_id,
                provider=self.name,
                labels=labels,
                created_at=datetime.now(UTC),
                ttl=ttl,
                idle_timeout=idle_timeout,
                options=self._prepare(staging, options),
            )

        directory = self.store.add(sandbox_id, build)
        try:
            sandbox = self._open(self.store.load(sandbox_id), directory)
            if setup is not None:
                run_setup(sandbox, setup)
        except BaseException:
            self.store.remove(sandbox_id, self._release)
            raise
        return sandbox

    def _check_options(self, options: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
        """Refuse bad options before anything exists (``create`` checked the labels); take the common
        options out of ``options`` and return them (``ttl``, ``idle_timeout``,
        ``setup``), leaving the subclass's own."""
        unknown = set(options) - COMMON_OPTIONS - self.extra_options
        if unknown:
            raise errors.InvalidArgumentError(
                f"unknown option(s) for the {self.name} provider: {', '.join(sorted(unknown))}"
            )
        ttl = check_seconds("ttl", options.pop("ttl", None))
        idle_timeout = check_seconds("idle_timeout", options.pop("idle_timeout", None))
        setup = options.pop("setup", None)
        if setup is not None and not isinstance(setup, str):
            raise errors.InvalidArgumentError("setup must be a shell command (str)")
        return ttl, idle_timeout, setup

    def _get(self, sandbox_id: str) -> SandboxT:
        with self.store.locked(sandbox_id, exclusive=False) as directory:
            record = self.store.load(sandbox_id)
            if self.store.is_expired(record):
                raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} has expired")
            mark_used(directory)
        return self._open(record, directory)

    def _info(self, record: SandboxRecord) -> SandboxInfo:
        expiry = self.store.expiry(record)
        expired = expiry is not None and expiry.timestamp() <= time.time()
        return SandboxInfo(
            id=record.id,
            labels=record.labels,
            created_at=record.created_at,
            status="expired" if expired else "ready",
            metadata={
                "workspace": str(self.store.directory(record.id) / WORKSPACE_DIR),
                "last_used_at": self.store.last_used(record.id).isoformat(),
                "ttl": record.ttl,
                "idle_timeout": record.idle_timeout,
                "expires_at": None if expiry is None else expiry.isoformat(),
                **record.options,
            },
        )

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """A page of :meth:`SandboxStore.page` as infos. A page whose every
        sandbox was deleted while it was read is skipped for the next one, so
        a page is empty only at the end."""
        while True:
            records, next_cursor = self.store.page(labels, cursor, limit)
            items = self._infos(records)
            if items or next_cursor is None:
                return SandboxPage(items=items, next_cursor=next_cursor)
            cursor = next_cursor

    def _infos(self, records: builtins.list[SandboxRecord]) -> builtins.list[SandboxInfo]:
        """The records' infos, leaving out sandboxes deleted meanwhile."""
        items = []
        for record in records:
            with contextlib.suppress(errors.SandboxNotFoundError):
                items.append(self._info(record))
        return items

    def _delete(self, sandbox_id: str) -> None:
        self.store.remove(sandbox_id, self._release)

    def _label_lock(self, labels: Mapping[str, str]) -> contextlib.AbstractContextManager[object]:
        return self.store.label_lock(labels)

    def reap(self) -> builtins.list[str]:
        """Delete every expired sandbox, and every one whose record is
        damaged (logged); returns their ids."""
        now = time.time()
        return [sandbox_id for sandbox_id in self.store.ids() if self._reap_one(sandbox_id, now)]

    def _reap_one(self, sandbox_id: str, now: float) -> bool:
        """Remove the sandbox if it is expired or damaged, locked against a
        ``get`` that would use it; whether it was removed."""
        try:
            with self.store.locked(sandbox_id, exclusive=True):
                try:
                    record = self.store.load(sandbox_id)
                except DamagedRecordError as exc:
                    logger.warning("reaping a sandbox: %s", exc)
                else:
                    if not self.store.is_expired(record, now):
                        return False
                self.store.remove(sandbox_id, self._release)
                lifecycle_log.info("%s: reaped sandbox %s", self.name, sandbox_id)
                return True
        except errors.SandboxNotFoundError:
            return False

    async def areap(self) -> builtins.list[str]:
        """Async twin of :meth:`reap` (file-system work, in a worker thread)."""
        return await anyio.to_thread.run_sync(self.reap)
