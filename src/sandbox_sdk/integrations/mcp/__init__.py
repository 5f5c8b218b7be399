"""An MCP server over one sandbox: ``python -m sandbox_sdk.integrations.mcp``.

Tools ``execute``, ``ls``, ``read_file``, ``write_file``, ``edit_file``,
``glob``, ``grep``, ``upload`` and ``download`` act in the sandbox, and its
files are resources (``sandbox://{+path}``). See docs/mcp.md.
"""

try:
    import mcp as _mcp  # noqa: F401 - only to say which extra is missing
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "sandbox_sdk.integrations.mcp needs the MCP SDK: pip install 'sandbox-sdk-py[mcp]'"
    ) from exc

from sandbox_sdk.integrations.mcp.cli import add_arguments, main, run
from sandbox_sdk.integrations.mcp.server import SandboxSource, create_server

__all__ = ["SandboxSource", "add_arguments", "create_server", "main", "run"]
