"""``python -m sandbox_sdk.runner``: the runner, and its ``coordinator`` subcommand.

::

    python -m sandbox_sdk.runner --listen 127.0.0.1:8765 [--backend bwrap|local] [--root DIR]
    python -m sandbox_sdk.runner --connect wss://coordinator.example/runner/laptop
    python -m sandbox_sdk.runner coordinator --listen 0.0.0.0:443 --tokens runners.txt \\
        --certfile cert.pem --keyfile key.pem

The runner's two tokens come from ``--client-token`` (what its clients
present) and ``--runner-token`` (its own at a coordinator, for
``--connect``) or, better (a command line is visible to every user of the
machine), the ``SANDBOX_SDK_CLIENT_TOKEN`` and ``SANDBOX_SDK_RUNNER_TOKEN``
environment variables. Each command is ``add_*_arguments`` plus ``run_*``, so a larger CLI
can mount them as subcommands; :func:`main` dispatches between the two.
When ready, each prints one line to stdout (``listening on ws://HOST:PORT``,
``registered at URL``); logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

from sandbox_sdk import errors
from sandbox_sdk.provider_kit.host_state import default_state_dir
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.local import LocalProvider
from sandbox_sdk.runner.service import (
    DEFAULT_MAX_CONCURRENT,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TIMEOUT,
    Runner,
)
from sandbox_sdk.runner.workers import Backend
from sandbox_sdk.wire import security

log = logging.getLogger("sandbox_sdk.runner")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["coordinator"]:
        parser = argparse.ArgumentParser(prog="python -m sandbox_sdk.runner coordinator")
        add_coordinator_arguments(parser)
        return run_coordinator(parser.parse_args(args[1:]))
    parser = argparse.ArgumentParser(
        prog="python -m sandbox_sdk.runner",
        description="Serve sandboxes on this machine to remote clients (or run `... coordinator -h`).",
    )
    add_runner_arguments(parser)
    return run_runner(parser.parse_args(args))


def host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {value!r}")
    return host.strip("[]"), int(port)


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--certfile", help="TLS certificate (PEM) for the listening side")
    parser.add_argument("--keyfile", help="its private key, if not in the certificate file")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--listen", type=host_port, metavar="HOST:PORT", help="take clients directly")
    where.add_argument("--connect", metavar="URL", help="dial a coordinator: ws[s]://HOST/runner/<id>")
    parser.add_argument(
        "--client-token", help=f"the secret clients present (default: ${security.CLIENT_TOKEN_ENV})"
    )
    parser.add_argument(
        "--runner-token",
        help=f"this runner's own secret at the coordinator, for --connect (default: ${security.TOKEN_ENV})",
    )
    parser.add_argument(
        "--backend",
        choices=["bwrap", "local"],
        default="bwrap",
        help="bwrap (isolated; the default) or local (unisolated: trusted code only)",
    )
    parser.add_argument("--root", type=Path, help="workspace root (default: ~/.sandbox-sdk/runner-<backend>)")
    parser.add_argument("--network", action="store_true", help="let bwrap jails reach the network")
    parser.add_argument("--cafile", help="CA certificates to trust for a wss:// coordinator")
    parser.add_argument(
        "--max-concurrent", type=int, default=DEFAULT_MAX_CONCURRENT, help="requests in flight per connection"
    )
    parser.add_argument(
        "--default-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds a command may run when its request names no timeout",
    )
    add_common_arguments(parser)


def add_coordinator_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", type=host_port, metavar="HOST:PORT", required=True)
    parser.add_argument(
        "--tokens",
        type=Path,
        required=True,
        help="file of lines `<runner-id> <runner-token> <client-token>` (# comments allowed)",
    )
    add_common_arguments(parser)


def run_runner(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    client_token = args.client_token or os.environ.get(security.CLIENT_TOKEN_ENV, "")
    runner_token = args.runner_token or os.environ.get(security.TOKEN_ENV) or None
    try:
        runner = Runner(
            make_backend(args.backend, args.root, args.network),
            client_token,
            runner_token=runner_token if args.connect else None,
            runner_id=args.connect.rstrip("/").rsplit("/", 1)[-1] if args.connect else "runner",
            max_output_bytes=DEFAULT_MAX_OUTPUT_BYTES,
            max_concurrent=args.max_concurrent,
            default_timeout=args.default_timeout,
        )
        if args.connect:
            tls = security.client_context(args.connect, args.cafile)
            return run_until_stopped(runner.connect(args.connect, tls=tls, ready=announce))
        host, port = args.listen
        tls = security.server_context(args.certfile, args.keyfile)
        return run_until_stopped(runner.listen(host, port, tls=tls, ready=announce))
    except (errors.SandboxError, OSError) as exc:
        log.error("%s", exc)
        return 2


def run_coordinator(args: argparse.Namespace) -> int:
    from sandbox_sdk.runner.coordinator import Coordinator, serve_coordinator

    configure_logging(args.log_level)
    try:
        coordinator = Coordinator(read_tokens(args.tokens))
        host, port = args.listen
        tls = (args.certfile, args.keyfile) if args.certfile else None
        return run_until_stopped(serve_coordinator(coordinator, host, port, tls=tls, ready=announce))
    except (errors.SandboxError, OSError) as exc:
        log.error("%s", exc)
        return 2


def make_backend(name: str, root: Path | None, network: bool) -> Backend:
    """The provider commands run through; ``root`` is its state directory."""
    options: dict[str, Any] = {
        "state_dir": root or default_state_dir(f"runner-{name}"),
        "max_output_bytes": DEFAULT_MAX_OUTPUT_BYTES,
    }
    if name == "local":
        log.warning("backend local: commands run unisolated, as this user; the root is advisory")
        return Backend(LocalProvider, options)
    return Backend(BwrapProvider, {**options, "network": network})


def read_tokens(path: Path) -> dict[str, security.RunnerTokens]:
    tokens = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            fields = line.split()
            if len(fields) != 3:
                raise errors.InvalidArgumentError(
                    f"{path}:{number}: expected `<runner-id> <runner-token> <client-token>` "
                    "(a runner and its clients have separate tokens; see docs/remote.md)"
                )
            tokens[fields[0]] = security.RunnerTokens(fields[1], fields[2])
    return tokens


def announce(line: str) -> None:
    print(line, flush=True)


def configure_logging(level: str) -> None:
    logging.getLogger("websockets").setLevel(logging.WARNING)  # a line per connection is ours to write
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )


def run_until_stopped(service: Awaitable[None]) -> int:
    """Run ``service`` until it ends or SIGINT/SIGTERM stops it (cleanly: the
    commands in flight are killed); 0 when stopped."""

    async def supervised() -> None:
        task = asyncio.ensure_future(service)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(supervised())
    return 0
