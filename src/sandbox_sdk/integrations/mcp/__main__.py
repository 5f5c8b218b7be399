"""``python -m sandbox_sdk.integrations.mcp``: serve one sandbox over MCP."""

from sandbox_sdk.integrations.mcp.cli import main

raise SystemExit(main())
