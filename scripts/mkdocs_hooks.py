"""mkdocs hooks (mkdocs.yml ``hooks``): the docstrings' Sphinx cross-reference
roles, ``:meth:`close``` or ``:class:`~sandbox_sdk.errors.SandboxError```,
rendered as the code they name instead of as raw role text. A leading ``~``
shows the last part of the name, as Sphinx does."""

from __future__ import annotations

import re
from typing import Any

#: A role as the Markdown renderer leaves it: its name, then the target in ``<code>``.
ROLE = re.compile(r":(?:meth|class|func|attr|data|mod|exc|obj|const|py:\w+):<code>(~?)([^<]*)</code>")


def shown(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rpartition('.')[2] if tilde else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(shown, html)
