"""End to end: a real deepagents agent, driven by a scripted chat model (no
network, no API key), works in one of our sandboxes through DeepAgentsBackend."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents")

from deepagents import create_deep_agent
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import Field

from sandbox_sdk.integrations.deepagents import DeepAgentsBackend
from sandbox_sdk.providers.local import LocalSandbox

SCRIPT = "print('hello from', __import__('os').getcwd())\n"


class ScriptedChatModel(GenericFakeChatModel):
    """Answers with the given messages in turn and accepts tools, recording their names."""

    bound_tools: list[str] = Field(default_factory=list)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        self.bound_tools = [tool.name if isinstance(tool, BaseTool) else str(tool) for tool in tools]
        return self


def tool_call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]
    )


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[LocalSandbox]:
    root = tmp_path / "sandbox"
    root.mkdir()
    yield LocalSandbox(root)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_agent_writes_and_executes_inside_the_sandbox(sandbox: LocalSandbox, mode: str) -> None:
    script_path = f"{sandbox.root_dir}/work/hello.py"
    model = ScriptedChatModel(
        messages=iter(
            [
                tool_call("write_file", "call-write", file_path=script_path, content=SCRIPT),
                tool_call("execute", "call-exec", command="python3 work/hello.py | tee work/out.txt"),
                AIMessage(content="Wrote and ran the script."),
            ]
        )
    )
    agent = create_deep_agent(model=model, backend=DeepAgentsBackend(sandbox))
    if mode == "sync":
        result = agent.invoke({"messages": [HumanMessage("write hello.py and run it")]})
    else:
        result = await agent.ainvoke({"messages": [HumanMessage("write hello.py and run it")]})

    assert {"write_file", "execute"} <= set(model.bound_tools)
    messages: list[BaseMessage] = result["messages"]
    tool_results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert tool_results["call-write"].status == "success", tool_results["call-write"].content
    # The command ran in the sandbox (its working directory is the sandbox root),
    # and its output came back to the agent.
    expected = f"hello from {sandbox.root_dir}"
    assert expected in str(tool_results["call-exec"].content)
    assert messages[-1].content == "Wrote and ran the script."
    # The file the agent wrote, and the one its command wrote, are in the sandbox.
    assert sandbox.read_bytes(script_path) == SCRIPT.encode()
    assert sandbox.read_bytes("work/out.txt").decode().strip() == expected
    assert (sandbox.root_dir / "work" / "hello.py").read_text() == SCRIPT


async def test_the_model_reads_one_error_prefix_from_every_tool(sandbox: LocalSandbox) -> None:
    """deepagents' ls, read_file and glob tools put ``Error: `` before a
    result's error, the others pass it on: either way the model reads it once."""
    missing = f"{sandbox.root_dir}/missing"
    model = ScriptedChatModel(
        messages=iter(
            [
                tool_call("ls", "call-ls", path=missing),
                tool_call("read_file", "call-read", file_path=f"{missing}/a.txt"),
                tool_call("glob", "call-glob", pattern="*.py", path=missing),
                tool_call(
                    "edit_file", "call-edit", file_path=f"{missing}/a.txt", old_string="a", new_string="b"
                ),
                AIMessage(content="Done."),
            ]
        )
    )
    agent = create_deep_agent(model=model, backend=DeepAgentsBackend(sandbox))
    result = await agent.ainvoke({"messages": [HumanMessage("look around")]})
    contents = {m.tool_call_id: str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)}
    assert set(contents) == {"call-ls", "call-read", "call-glob", "call-edit"}
    for call_id, content in contents.items():
        assert content.startswith("Error: ") and "Error: Error" not in content, (call_id, content)
