"""docs/inspect.md's example task, run end to end by ``inspect_ai.eval`` on
bubblewrap, with inspect's mock model scripted to call the ``bash`` tool."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval
from inspect_ai.model import ModelOutput, ModelUsage, get_model

from sandbox_sdk import get_provider
from sandbox_sdk.integrations.inspect import LABELS

pytestmark = pytest.mark.filterwarnings(
    # inspect_ai's own model retry still passes tenacity's deprecated `initial`.
    "ignore:The 'initial' parameter is deprecated:DeprecationWarning"
)

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "inspect.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
WRITE_HELLO = "printf 'print(\"hello, sandbox\")\\n' > hello.py && python3 hello.py"
#: Usage given, the mock model counts no tokens (which would fetch tiktoken's tables).
USAGE = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)


def example_task_module(directory: Path) -> ModuleType:
    """The guide's first Python block, saved as hello_sandbox.py and imported."""
    path = directory / "hello_sandbox.py"
    path.write_text(PYTHON_BLOCK.findall(GUIDE.read_text())[0])
    spec = importlib.util.spec_from_file_location("hello_sandbox", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guide_example_runs_on_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_SDK_HOME", str(tmp_path / "home"))  # bwrap's default state directory
    model = get_model(
        "mockllm/model",
        custom_outputs=[
            output.model_copy(update={"usage": USAGE})
            for output in [
                ModelOutput.for_tool_call("mockllm/model", "bash", {"command": WRITE_HELLO}),
                ModelOutput.from_content("mockllm/model", "hello.py is written."),
            ]
        ],
    )
    task = example_task_module(tmp_path).hello_sandbox()
    [log] = inspect_eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")

    assert log.status == "success", log.error
    assert log.results is not None
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    assert log.samples is not None
    [tool_message] = [m for m in log.samples[0].messages if m.role == "tool"]
    assert tool_message.text == "hello, sandbox\n"
    # The sample's sandbox was bwrap's, and sample_cleanup deleted it.
    assert (tmp_path / "home").is_dir()
    assert get_provider("bwrap").list(labels=LABELS).items == []
