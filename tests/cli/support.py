"""The ``sbx`` command as the tests run it: the installed entry point, with
a private state directory."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: The console script installed next to this interpreter.
SBX = Path(sys.executable).with_name("sbx")


@dataclass
class Sbx:
    """Runs ``sbx`` with a private state directory and a chosen provider."""

    home: Path
    provider: str
    env: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        ours = ("SANDBOX_SDK_", "FORCE_COLOR", "TTY_")  # the caller's choices of provider and terminal
        env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
        return {**env, "SANDBOX_SDK_HOME": str(self.home), "SANDBOX_SDK_PROVIDER": self.provider, **self.env}

    def __call__(
        self, *args: str | Path, stdin: str = "", check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [SBX, *map(str, args)],
            check=False,
            input=stdin,
            capture_output=True,
            text=True,
            env=self.environment(),
            timeout=300,
        )
        assert "Traceback" not in done.stderr, done.stderr
        if check:
            assert done.returncode == 0, done.stderr
        return done

    def create(self, *args: str) -> str:
        sandbox_id = self("create", *args).stdout.strip()
        assert sandbox_id.startswith(f"{self.provider}-"), sandbox_id
        return sandbox_id
