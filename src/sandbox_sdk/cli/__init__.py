"""The ``sbx`` command: sandboxes from a shell, built on the SDK's public API.

``sbx providers``, ``create``, ``list``, ``exec``, ``shell``, ``cp``, ``ls``,
``rm`` and ``reap``; see docs/cli.md. Argument parsing (click) and progress
bars (rich) come with the ``cli`` extra, so the library itself stays lean;
without them the command says which extra to install instead of failing on
an import.
"""

from __future__ import annotations

import sys

#: What installs the command's own dependencies.
INSTALL_HINT = "pip install 'sandbox-sdk-py[cli]'"


def main() -> None:
    """Run the ``sbx`` command line (also ``python -m sandbox_sdk``)."""
    try:
        from sandbox_sdk.cli._commands import cli
    except ModuleNotFoundError as exc:
        if exc.name not in ("click", "rich"):
            raise
        sys.exit(f"sbx needs the cli extra ({exc.name} is not installed): {INSTALL_HINT}")
    cli()
