"""The command line: ``python -m sandbox_sdk.integrations.mcp [options]``.

:func:`add_arguments` and :func:`run` let another command line mount the same
options as a subcommand; :func:`main` parses and runs them alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import uvicorn
from mcp.server import MCPServer
from starlette.applications import Starlette
from starlette.types import StatelessLifespan

from sandbox_sdk import errors, get_provider, registry
from sandbox_sdk.integrations.mcp.server import SandboxSource, create_server

#: Environment variable naming this server's provider when ``--provider`` is not
#: given; it wins over ``SANDBOX_SDK_PROVIDER``, which every tool of the SDK reads.
PROVIDER_ENV = "SANDBOX_SDK_MCP_PROVIDER"
DEFAULT_PORT = 8000


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's options: provider, which sandbox, transport."""
    parser.add_argument(
        "--provider",
        help=f"sandbox provider (default: ${PROVIDER_ENV}, else ${registry.PROVIDER_ENV},"
        f" else {registry.DEFAULT_PROVIDER}); 'local' is not isolated",
    )
    parser.add_argument(
        "--state-dir",
        help="where the local and bwrap providers keep their sandboxes "
        "(default: $SANDBOX_SDK_HOME/<provider>, else ~/.sandbox-sdk/<provider>)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--sandbox-id", help="work in this existing sandbox (kept at exit)")
    which.add_argument(
        "--label",
        dest="labels",
        action="append",
        type=_label,
        default=[],
        metavar="KEY=VALUE",
        help="work in the sandbox carrying exactly these labels, made if missing (kept at exit); repeatable",
    )
    parser.add_argument("--keep", action="store_true", help="keep the session's new sandbox at exit")
    parser.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="streamable HTTP: the address to bind")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="streamable HTTP: the port (0: any free one)"
    )


def provider_name(given: str | None) -> str:
    """The provider to serve: ``--provider``, else ``$SANDBOX_SDK_MCP_PROVIDER``
    (this server's own, for a client that sets one provider for its other tools),
    else ``$SANDBOX_SDK_PROVIDER`` (as ``get_provider()`` and ``sbx`` read it),
    else ``bwrap``. An empty value counts as unset."""
    return (
        given
        or os.environ.get(PROVIDER_ENV)
        or os.environ.get(registry.PROVIDER_ENV)
        or registry.DEFAULT_PROVIDER
    )


def run(args: argparse.Namespace) -> int:
    """Serve until the client goes (stdio) or a signal; 1 if the provider cannot be used."""
    config = {"state_dir": args.state_dir} if args.state_dir else {}
    name = provider_name(args.provider)
    try:
        provider = get_provider(name, **config)
    except (errors.SandboxError, TypeError) as exc:  # TypeError: a provider without a state dir
        print(f"sandbox-sdk mcp: {exc}", file=sys.stderr)
        return 1
    source = SandboxSource(provider, sandbox_id=args.sandbox_id, labels=dict(args.labels), keep=args.keep)
    server = create_server(source, name=f"sandbox-{name}")
    if args.transport == "stdio":
        anyio.run(_serve_stdio, server, source)
    else:
        anyio.run(_serve_http, server, source, args.host, args.port)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sandbox_sdk.integrations.mcp``: serve one sandbox over stdio; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m sandbox_sdk.integrations.mcp",
        description="Serve one sandbox over the Model Context Protocol.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


async def _serve_stdio(server: MCPServer[Any], source: SandboxSource) -> None:
    """Until stdin closes, or a signal."""
    async with source, anyio.create_task_group() as group:
        group.start_soon(_die_of_signal_after_cleanup, source)
        await server.run_stdio_async()
        group.cancel_scope.cancel()


async def _die_of_signal_after_cleanup(source: SandboxSource) -> None:
    """On SIGTERM or SIGINT, delete the session's sandbox, then die of the signal
    as if it had not been caught: cancelling the server would wait for the thread
    reading stdin, which only the end of stdin releases."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            await source.aclose()
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)


async def _serve_http(server: MCPServer[Any], source: SandboxSource, host: str, port: int) -> None:
    """Until SIGTERM or SIGINT, which uvicorn handles. The sandbox lives as long
    as the app, so it is closed at the app's shutdown, before uvicorn re-raises
    the signal that stopped it."""
    app = server.streamable_http_app(host=host)
    app.router.lifespan_context = _closing_at_shutdown(app.router.lifespan_context, source)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family) as sock:
        url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{sock.getsockname()[1]}/mcp"
        print(f"sandbox-sdk mcp: serving {url}", file=sys.stderr, flush=True)
        await uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock])


def _closing_at_shutdown(lifespan: Any, source: SandboxSource) -> StatelessLifespan[Starlette]:
    @contextlib.asynccontextmanager
    async def combined(app: Starlette) -> AsyncIterator[None]:
        async with source, lifespan(app):
            yield

    return combined
