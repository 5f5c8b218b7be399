"""The ``sbx`` commands (click), one function each, on the public API only.

Every command that reaches sandboxes takes ``--provider`` (else
``$SANDBOX_SDK_PROVIDER``, else ``bwrap``, the embedded default). The SDK's
typed errors and local ``OSError`` s become one ``Error: ...`` line and exit
status 1; a usage mistake is click's message and status 2; ``exec`` and
``shell`` exit with the command's own status.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol, TextIO, get_args, runtime_checkable

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sandbox_sdk import (
    FileInfo,
    ProviderUnavailableError,
    SandboxError,
    SandboxNotFoundError,
    SandboxProvider,
    available_providers,
    get_provider,
)
from sandbox_sdk.cli._copy import copy
from sandbox_sdk.cli._shell import run_shell
from sandbox_sdk.cli._terminal import (
    Signalled,
    exec_with_stdin,
    hangup_interrupts,
    interrupted_status,
    terminal_shell,
)
from sandbox_sdk.cli._text import shown
from sandbox_sdk.provider_kit.host_state import ID_PATTERN, HostStateProvider
from sandbox_sdk.registry import DEFAULT_PROVIDER, PROVIDER_ENV, install_hint
from sandbox_sdk.transfer import SymlinkPolicy


@runtime_checkable
class Reaper(Protocol):
    """A provider whose expired sandboxes only it deletes: the local ones,
    docker, kubernetes, and a remote runner's (the cloud platforms expire theirs
    themselves)."""

    def reap(self) -> list[str]: ...


#: ``ls`` shows each entry's type as ``stat.filemode`` does.
TYPE_BITS = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK, "other": 0}


class SandboxCommands(click.Group):
    """Turns the SDK's typed errors (and local ``OSError`` s, a missing local
    file, say) into one clear line and exit status 1: never a traceback for
    bad input."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SandboxNotFoundError as exc:
            provider = ctx.meta.get("sbx.provider", DEFAULT_PROVIDER)
            raise click.ClickException(
                f"{describe(exc)} (provider {provider!r}: choose another with --provider or ${PROVIDER_ENV})"
            ) from exc
        except (SandboxError, OSError) as exc:
            raise click.ClickException(describe(exc)) from exc


def describe(exc: BaseException) -> str:
    """An error as one line: the SDK's message, or an ``OSError`` with its
    path; escaped (:func:`shown`), as either may name what a sandbox chose."""
    if isinstance(exc, OSError) and not isinstance(exc, SandboxError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    return shown(text)


def parse_labels(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> dict[str, str]:
    """``--label key=value`` (repeatable) as a dict; anything else is a usage error."""
    labels: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {value!r}", ctx=ctx, param=param)
        labels[key] = text
    return labels


def remember_provider(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """The chosen provider, kept for the not-found message."""
    ctx.meta["sbx.provider"] = value
    return value


provider_option = click.option(
    "--provider",
    "-p",
    envvar=PROVIDER_ENV,
    default=DEFAULT_PROVIDER,
    show_default=True,
    show_envvar=True,
    callback=remember_provider,
    help="The provider to use.",
)
label_option = click.option(
    "--label",
    "-l",
    "labels",
    multiple=True,
    callback=parse_labels,
    metavar="KEY=VALUE",
    help="A label (repeatable).",
)


@contextlib.contextmanager
def opened(name: str) -> Iterator[SandboxProvider[Any]]:
    """The provider named ``name``, closed (its clients released) afterwards."""
    with get_provider(name) as provider:
        yield provider


@click.group(cls=SandboxCommands, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Create sandboxes, run commands in them and move files in and out."""


@cli.command()
def providers() -> None:
    """The installed providers and whether each can be used here."""
    table = Table("provider", "status", "detail", box=None, pad_edge=False)
    for name in sorted(set(available_providers())):
        status, detail = probe(name)
        table.add_row(Text(name), status, Text(detail))  # Text: brackets are not markup
    Console(soft_wrap=True).print(table)


def probe(name: str) -> tuple[str, str]:
    """Whether provider ``name`` can be constructed here with its defaults
    (bwrap starts a jail; the cloud providers find their credentials)."""
    try:
        provider = get_provider(name)
    except ProviderUnavailableError as exc:
        if isinstance(exc.__cause__, ImportError):
            return "not installed", install_hint(name)
        return "unavailable", str(exc)
    except SandboxError as exc:  # missing credentials, say
        return "unavailable", str(exc)
    provider.close()
    return "available", ""


@cli.command()
@provider_option
@label_option
@click.option("--ttl", type=float, metavar="SECONDS", help="Seconds from creation after which it expires.")
@click.option("--idle-timeout", type=float, metavar="SECONDS", help="Seconds unused after which it expires.")
def create(provider: str, labels: dict[str, str], ttl: float | None, idle_timeout: float | None) -> None:
    """Create a sandbox and print its id."""
    with opened(provider) as sandboxes:
        sandbox = sandboxes.create(labels=labels, ttl=ttl, idle_timeout=idle_timeout)
    click.echo(shown(sandbox.id))


@cli.command("list")
@provider_option
@label_option
@click.option("--json", "as_json", is_flag=True, help="One JSON array, for scripts.")
def list_sandboxes(provider: str, labels: dict[str, str], as_json: bool) -> None:
    """List the sandboxes carrying every given label."""
    with opened(provider) as sandboxes:
        infos = list(sandboxes.iter_sandboxes(labels=labels))
    if as_json:
        click.echo(json.dumps([info.model_dump(mode="json") for info in infos], indent=2))
        return
    table = Table("id", "status", "created", "labels", box=None, pad_edge=False)
    for info in infos:
        labels_text = " ".join(f"{key}={value}" for key, value in sorted(info.labels.items()))
        created = f"{info.created_at:%Y-%m-%d %H:%M:%S}"
        table.add_row(Text(shown(info.id)), Text(shown(info.status)), created, Text(shown(labels_text)))
    Console(soft_wrap=True).print(table)


@cli.command("exec", context_settings={"allow_interspersed_args": False})
@provider_option
@click.option("--timeout", type=float, metavar="SECONDS", help="Kill the command after this long.")
@click.option(
    "--no-stdin",
    "-n",
    is_flag=True,
    help="Do not forward stdin (as when it is a terminal): the command reads none.",
)
@click.argument("sandbox_id", metavar="ID")
@click.argument("command", nargs=-1, required=True)
@click.pass_context
def exec_command(
    ctx: click.Context,
    provider: str,
    timeout: float | None,
    no_stdin: bool,
    sandbox_id: str,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND in sandbox ID, its output live, and exit with its status.

    One argument is a shell command line as it stands (pipes, $VARS); several
    are one command and its arguments, quoted: `sbx exec ID -- ls -la`.
    Stdin is forwarded unless it is a terminal (or -n). Ctrl-C kills the
    command and exits 130 (so do SIGHUP and SIGTERM, with 129 and 143)."""
    if command[0] == "--":  # parsing stopped at ID, so the separator is still there
        command = command[1:]
    if not command:
        raise click.UsageError("no COMMAND after ID")
    line = command[0] if len(command) == 1 else shlex.join(command)
    with opened(provider) as sandboxes, hangup_interrupts():
        sandbox = sandboxes.get(sandbox_id)
        if not (no_stdin or sys.stdin.isatty()):
            ctx.exit(exec_with_stdin(sandbox, line, timeout))
        try:
            result = sandbox.run(
                line, timeout=timeout, on_stdout=live(sys.stdout), on_stderr=live(sys.stderr)
            )
        except KeyboardInterrupt as interruption:  # run killed the command before this
            ctx.exit(interrupted_status(interruption))
    if result.truncated:
        click.echo("sbx: the output was cut at the provider's limit", err=True)
    if result.timed_out:
        click.echo("sbx: the command was killed at its timeout", err=True)
    ctx.exit(1 if result.exit_code is None else result.exit_code)


def live(stream: TextIO) -> Callable[[str], None]:
    """A ``run`` callback writing text to ``stream`` as it arrives."""

    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return write


@cli.command()
@provider_option
@click.option(
    "--lines",
    is_flag=True,
    help="Line mode even on a terminal: each line a new shell, what the sandbox prints escaped.",
)
@click.argument("sandbox_id", metavar="ID")
@click.pass_context
def shell(ctx: click.Context, provider: str, lines: bool, sandbox_id: str) -> None:
    """A shell in sandbox ID: on a terminal, bash on a terminal in the sandbox
    (every key, Ctrl-C included, goes to it; its exit status is sbx's).

    Without a terminal (or with --lines), lines are read from stdin and run
    one at a time, each in a new shell in the directory the previous one
    ended in, until `exit` or end of input."""
    with opened(provider) as sandboxes, hangup_interrupts():
        sandbox = sandboxes.get(sandbox_id)
        if not lines and sys.stdin.isatty() and sys.stdout.isatty():
            ctx.exit(terminal_shell(sandbox))
        try:
            ctx.exit(run_shell(sandbox))
        except Signalled as hangup:  # the line's command was killed before this, as by Ctrl-C
            ctx.exit(interrupted_status(hangup))


@cli.command()
@provider_option
@click.option(
    "--no-recursive", is_flag=True, help="Only the directory's own entries, not its subdirectories'."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event (FileEvent), for scripts.")
@click.argument("sandbox_id", metavar="ID")
@click.argument("path")
@click.pass_context
def watch(
    ctx: click.Context, provider: str, no_recursive: bool, as_json: bool, sandbox_id: str, path: str
) -> None:
    """Print the changes under directory PATH of sandbox ID as they happen,
    one line each (`created PATH`, `moved PATH -> DEST`, ...), until Ctrl-C."""
    with opened(provider) as sandboxes, hangup_interrupts():
        events = sandboxes.get(sandbox_id).watch(path, recursive=not no_recursive)
        try:
            for event in events:
                if as_json:
                    click.echo(event.model_dump_json(exclude_none=True))
                elif event.kind == "watching":
                    click.echo(f"sbx: watching {shown(event.path)} ({event.method})", err=True)
                else:
                    dest = "" if event.dest is None else f" -> {shown(event.dest)}"
                    click.echo(f"{event.kind} {shown(event.path)}{dest}")
        except KeyboardInterrupt as interruption:
            events.close()  # ends the watcher in the sandbox
            ctx.exit(interrupted_status(interruption))


@cli.command()
@provider_option
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option(
    "--exclude",
    "-x",
    multiple=True,
    metavar="PATTERN",
    help="Leave out of a directory's copy what matches (a name or a relative path; repeatable).",
)
@click.option(
    "--symlinks",
    type=click.Choice(get_args(SymlinkPolicy)),
    default="skip",
    show_default=True,
    help="What a directory's copy does with a symlink pointing outside the tree.",
)
@click.argument("source")
@click.argument("dest")
def cp(
    provider: str, quiet: bool, exclude: tuple[str, ...], symlinks: SymlinkPolicy, source: str, dest: str
) -> None:
    """Copy a file or directory into a sandbox (LOCAL ID:PATH) or out of one (ID:PATH LOCAL).

    Like cp -r: into DEST if it is an existing directory, else as DEST. A
    progress bar shows on a terminal once a copy takes more than a moment. A
    symlink pointing outside a copied tree is left out and named on stderr
    (--symlinks skip), fails the copy before anything is written (refuse), or
    is replaced by a copy of the file it points to (copy-inside)."""
    with opened(provider) as sandboxes:
        copy(sandboxes, source, dest, exclude, symlinks, Console(stderr=True, quiet=quiet))


@cli.command("ls")
@provider_option
@click.option("--json", "as_json", is_flag=True, help="One JSON array, for scripts.")
@click.argument("sandbox_id", metavar="ID")
@click.argument("path", default=".")
def ls(provider: str, as_json: bool, sandbox_id: str, path: str) -> None:
    """List a directory of sandbox ID (its working directory by default)."""
    with opened(provider) as sandboxes:
        entries = sandboxes.get(sandbox_id).ls(path)
    if as_json:
        click.echo(json.dumps([entry.model_dump(mode="json") for entry in entries], indent=2))
        return
    for entry in entries:
        click.echo(long_line(entry))


def long_line(entry: FileInfo) -> str:
    """One ``ls -l`` style line: mode, size, modification time, name."""
    mode = stat.filemode(TYPE_BITS[entry.type] | entry.mode)
    when = datetime.fromtimestamp(entry.mtime)
    suffix = "/" if entry.type == "dir" else ""
    return f"{mode} {entry.size:>12} {when:%Y-%m-%d %H:%M} {shown(entry.name)}{suffix}"


@cli.command("rm")
@provider_option
@click.argument("sandbox_ids", metavar="ID...", nargs=-1, required=True)
@click.pass_context
def remove(ctx: click.Context, provider: str, sandbox_ids: tuple[str, ...]) -> None:
    """Delete sandboxes (one that does not exist is no error, as in the API).

    Without --provider or $SANDBOX_SDK_PROVIDER, a local provider's id
    (local-..., bwrap-...) chooses its provider. An id that cannot be the
    provider's own is refused before anything is deleted: deleting it would
    succeed and delete nothing."""
    chosen = ctx.get_parameter_source("provider") is not click.core.ParameterSource.DEFAULT
    owners = {
        sandbox_id: provider if chosen else id_owner(sandbox_id) or provider for sandbox_id in sandbox_ids
    }
    with contextlib.ExitStack() as stack:
        providers = {name: stack.enter_context(opened(name)) for name in dict.fromkeys(owners.values())}
        for sandbox_id, name in owners.items():
            check_own_id(providers[name], sandbox_id)
        for sandbox_id, name in owners.items():
            providers[name].delete(sandbox_id=sandbox_id)
            click.echo(shown(sandbox_id))


def id_owner(sandbox_id: str) -> str | None:
    """The registered provider a local provider's id names (``bwrap-<hex>``: bwrap), if any."""
    prefix = sandbox_id.partition("-")[0]
    if ID_PATTERN.fullmatch(sandbox_id) and prefix in available_providers():
        return prefix
    return None


def check_own_id(provider: SandboxProvider[Any], sandbox_id: str) -> None:
    """A usage error (exit status 2) for an id a local provider cannot have made;
    a cloud platform's ids have no form to check here."""
    if not isinstance(provider, HostStateProvider) or (
        ID_PATTERN.fullmatch(sandbox_id) and sandbox_id.startswith(f"{provider.name}-")
    ):
        return
    owner = id_owner(sandbox_id)
    hint = f"it is a {owner} sandbox's (--provider {owner})" if owner else "give its provider with --provider"
    raise click.UsageError(
        f"{shown(sandbox_id)!r} is not a {provider.name} sandbox id ({provider.name}-<24 hex digits>): {hint}"
    )


@cli.command()
@provider_option
def reap(provider: str) -> None:
    """Delete every expired sandbox and print their ids (on a remote runner's
    machine too: what it keeps, nothing else expires)."""
    with opened(provider) as sandboxes:
        if not isinstance(sandboxes, Reaper):
            raise click.ClickException(
                f"provider {provider!r} has nothing to reap: its platform removes expired sandboxes itself"
            )
        for sandbox_id in sandboxes.reap():
            click.echo(shown(sandbox_id))
