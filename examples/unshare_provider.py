"""A complete provider: each command runs in its own directory with no network."""

from __future__ import annotations

import shutil
import tempfile
from datetime import UTC, datetime
from typing import Any

from sandbox_sdk import BaseSandbox, ExecuteResponse, SandboxInfo, SandboxNotFoundError, SandboxPage
from sandbox_sdk.provider import SandboxProvider, labels_match
from sandbox_sdk.provider_kit.host_process import run_process


class UnshareSandbox(BaseSandbox):
    def __init__(self, root: str, labels: dict[str, str]) -> None:
        self.root, self.labels, self.created_at = root, labels, datetime.now(UTC)

    @property
    def id(self) -> str:
        return self.root.rsplit("/", 1)[-1]

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return run_process(
            ["unshare", "--net", "--map-root-user", "bash", "-c", command],
            cwd=self.root,
            env={"PATH": "/usr/bin:/bin", "HOME": self.root},
            timeout=timeout or 60,
            max_output_bytes=self.max_output_bytes,
        )


class UnshareProvider(SandboxProvider[UnshareSandbox]):
    def __init__(self) -> None:
        self.sandboxes: dict[str, UnshareSandbox] = {}

    def _create(self, *, labels: dict[str, str], **options: Any) -> UnshareSandbox:
        sandbox = UnshareSandbox(tempfile.mkdtemp(prefix="unshare-"), labels)
        self.sandboxes[sandbox.id] = sandbox
        return sandbox

    def get(self, sandbox_id: str) -> UnshareSandbox:
        if sandbox_id not in self.sandboxes:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}")
        return self.sandboxes[sandbox_id]

    def list(self, *, labels: Any = None, cursor: str | None = None, limit: int = 100) -> SandboxPage:
        ids = sorted(i for i, s in self.sandboxes.items() if labels_match(s.labels, labels))
        start = int(cursor or 0)
        infos = [
            SandboxInfo(
                id=i, labels=self.sandboxes[i].labels, created_at=self.sandboxes[i].created_at, status="up"
            )
            for i in ids[start : start + limit]
        ]
        return SandboxPage(items=infos, next_cursor=str(start + limit) if start + limit < len(ids) else None)

    def delete(self, *, sandbox_id: str) -> None:
        if sandbox := self.sandboxes.pop(sandbox_id, None):
            shutil.rmtree(sandbox.root, ignore_errors=True)
