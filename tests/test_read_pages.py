"""``read`` pages are sized to the provider's output limit, and actually fit in it."""

from __future__ import annotations

from pathlib import Path

from sandbox_sdk.providers.local import LocalSandbox


def test_pages_fill_the_output_budget_without_overflowing(tmp_path: Path) -> None:
    sandbox = LocalSandbox(tmp_path, max_output_bytes=64 * 1024)
    lines = [f"{i:05d} " + "x" * 1000 + "\n" for i in range(300)]
    sandbox.write("big.txt", "".join(lines))
    pages = []
    offset = 0
    while True:
        page = sandbox.read("big.txt", offset=offset)
        assert page.start_line == offset + 1
        pages.append(page.content)
        offset = page.end_line
        if not page.has_more:
            break
    assert "".join(pages) == "".join(lines)
    # Each full page uses most of the budget: a few pages, not one per line.
    assert 3 < len(pages) < 10
