"""Every sandbox-sdk provider as an inspect_ai sandbox environment.

inspect_ai finds this module through its ``inspect_ai`` entry-point group
(declared in pyproject.toml), so once ``sandbox-sdk-py[inspect]`` is installed an
eval can say ``sandbox=SandboxEnvironmentSpec("sandbox_sdk", SandboxSDKConfig(provider="bwrap"))``.
Each sample gets a sandbox of its own, created in ``sample_init`` and deleted
in ``sample_cleanup``; every sandbox carries :data:`LABELS`, by which
``inspect sandbox cleanup sandbox_sdk`` finds the ones left behind.

The bridge is thin: our typed errors already subclass the built-ins inspect
names (``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``,
``TimeoutError``) and pass through; only inspect's own types are raised here:
its ``OutputLimitExceededError`` for its size limits, its ``TimeoutError``
subclass carrying a timed-out command's output, ``SandboxUserUnsupportedError``
and ``SandboxUnavailableError``. ``exec`` is the sandbox's ``run``: stdout
and stderr apart, 128+N for a command killed by signal N. What the SDK
cannot do yet is listed in docs/inspect.md, not patched over here.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, Literal, overload

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import RunResult
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.registry import available_providers, get_provider

try:
    import yaml
    from inspect_ai.util import (
        ExecResult,
        OutputLimitExceededError,
        SandboxEnvironment,
        SandboxEnvironmentConfigType,
        SandboxEnvironmentLimits,
        SandboxUnavailableError,
        SandboxUserUnsupportedError,
        sandboxenv,
    )
    from inspect_ai.util._sandbox import SandboxTimeoutError
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "sandbox_sdk.integrations.inspect needs inspect_ai: pip install 'sandbox-sdk-py[inspect]'"
    ) from exc

__all__ = ["LABELS", "SANDBOX_TYPE", "SandboxSDKConfig", "SandboxSDKEnvironment"]

logger = logging.getLogger(__name__)

#: The sandbox type name an eval gives inspect.
SANDBOX_TYPE = "sandbox_sdk"
#: Labels of every sandbox this integration creates: ``cli_cleanup`` deletes by them.
LABELS = {"sandbox-sdk-integration": "inspect_ai"}


class SandboxSDKConfig(BaseModel):
    """Which provider makes the samples' sandboxes, and how.

    The provider is ``get_provider(provider, **provider_config)``; each sample's
    sandbox is ``provider.create(**options)`` (``ttl``, ``limits``, ``image``...:
    whatever that provider's ``create`` takes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = "bwrap"
    provider_config: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)

    def __hash__(self) -> int:  # inspect keys its caches by the config
        return hash(as_key(self.model_dump()))


def as_key(value: Any) -> str:
    """``value`` as one string, to hash or look up (its dicts are not hashable)."""
    return json.dumps(value, sort_keys=True, default=repr)


def load_config(config: SandboxEnvironmentConfigType | None) -> SandboxSDKConfig:
    """The config inspect hands over: our model, a YAML or JSON file of its
    fields (``sandbox=("sandbox_sdk", "sandbox.yaml")``), or none (bwrap)."""
    if config is None:
        return SandboxSDKConfig()
    if isinstance(config, SandboxSDKConfig):
        return config
    if isinstance(config, str):
        return SandboxSDKConfig.model_validate(yaml.safe_load(Path(config).read_text()) or {})
    return SandboxSDKConfig.model_validate(config.model_dump())


#: One provider per configuration for the life of the process: providers hold
#: clients and check their tools once, so samples share them.
_providers: dict[str, SandboxProvider[Any]] = {}
_providers_lock = threading.Lock()


def provider_for(config: SandboxSDKConfig) -> SandboxProvider[Any]:
    key = as_key([config.provider, config.provider_config])
    with _providers_lock:
        if key not in _providers:
            _providers[key] = get_provider(config.provider, **config.provider_config)
        return _providers[key]


async def aprovider_for(config: SandboxSDKConfig) -> SandboxProvider[Any]:
    """:func:`provider_for` in a worker thread: constructing a provider may block
    (bwrap starts a test jail, cloud SDKs make their clients)."""
    return await anyio.to_thread.run_sync(provider_for, config)


@sandboxenv(name=SANDBOX_TYPE)
class SandboxSDKEnvironment(SandboxEnvironment):
    """One sandbox of any provider, as inspect's ``SandboxEnvironment``."""

    def __init__(self, sandbox: BaseSandbox, provider: SandboxProvider[Any]) -> None:
        super().__init__()
        self.sandbox = sandbox
        self.provider = provider
        self._user: tuple[str, str] | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return SandboxSDKConfig.model_validate(config)

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        """Construct the provider before any sample runs: a missing tool,
        extra or credential fails the task at once."""
        await aprovider_for(load_config(config))

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        settings = load_config(config)
        provider = await aprovider_for(settings)
        sandbox = await provider.acreate(labels=LABELS, **settings.options)
        return {"default": cls(sandbox, provider)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            mine = environment.as_type(SandboxSDKEnvironment)
            await mine.provider.adelete(sandbox_id=mine.sandbox.id)

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """``inspect sandbox cleanup sandbox_sdk [ID]``: delete the sandboxes this
        integration left behind (an eval run with ``--no-sandbox-cleanup``, or
        killed). ``ID`` is a provider name (its leftovers only) or a sandbox id
        (that one); without it, every installed provider's. Providers are made
        with their default configuration (state directory, credentials from the
        environment); one that cannot be made or reached is skipped."""
        names = available_providers()
        chosen = [name for name in names if name == id]
        wanted = None if chosen else id
        for name in chosen or names:
            try:
                provider = await anyio.to_thread.run_sync(get_provider, name)
                leftovers = [info.id async for info in provider.aiter_sandboxes(labels=LABELS)]
            except errors.SandboxError as exc:
                logger.info("sandbox_sdk cleanup: skipping the %s provider: %s", name, exc)
                continue
            for sandbox_id in leftovers:
                if wanted in (None, sandbox_id):
                    await provider.adelete(sandbox_id=sandbox_id)
                    print(f"deleted {name} sandbox {sandbox_id}")

    # -- operations --------------------------------------------------------------------------

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        """``cmd`` (an argument vector, run without a shell) through the sandbox's
        ``run``. ``timeout=None`` is the
        sandbox's default timeout; ``timeout_retry`` is ignored, because a
        command that timed out was killed and may not be safe to run twice."""
        if user is not None:
            await self._check_user(user)
        response = await self.sandbox.arun(cmd, cwd=cwd, env=env, stdin=input, timeout=timeout)
        return exec_result(response, self.sandbox, timeout)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        await self.sandbox.awrite(file, contents, overwrite=True)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """The whole file, up to inspect's ``MAX_READ_FILE_SIZE``; text is
        strict UTF-8 (``UnicodeDecodeError`` otherwise) with newlines as stored."""
        try:
            data = await self.sandbox.aread_bytes(file, max_bytes=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE)
        except errors.OutputLimitExceededError as exc:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None) from exc
        return data.decode("utf-8") if text else data

    async def _check_user(self, user: str) -> None:
        """Our sandboxes have one user: ``user`` may only name it (by name or uid)."""
        if self._user is None:
            response = await self.sandbox.arun("id -un; id -u")
            name, uid, *_ = [*response.output.split(), "", ""]
            self._user = (name, uid)
        if user not in self._user:
            raise SandboxUserUnsupportedError(
                f"sandbox {self.sandbox.id} runs commands as {self._user[0]!r} only, not as {user!r}"
            )


def exec_result(response: RunResult, sandbox: BaseSandbox, timeout: int | None) -> ExecResult[str]:
    """inspect's view of a finished command: its stdout and stderr, apart. A
    timeout raises inspect's ``TimeoutError`` (with the output so far),
    output cut by the sandbox or past inspect's limit its
    ``OutputLimitExceededError``."""
    if response.timed_out:
        after = "the sandbox's default timeout" if timeout is None else f"{timeout} seconds"
        raise SandboxTimeoutError(f"Command timed out after {after}", response.output or None)
    if response.exit_code is None:
        raise SandboxUnavailableError(f"sandbox {sandbox.id}: the command did not finish")
    if response.truncated:
        raise OutputLimitExceededError(
            f"{sandbox.limits.max_output_bytes} bytes (the sandbox's)", response.output
        )
    if (
        len(response.output.encode("utf-8", "surrogateescape"))
        > SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
    ):
        raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, response.output)
    return ExecResult(
        success=response.exit_code == 0,
        returncode=response.exit_code,
        stdout=response.stdout,
        stderr=response.stderr,
    )
