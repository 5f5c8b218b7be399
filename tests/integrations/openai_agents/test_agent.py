"""A ``SandboxAgent`` run end to end by the Agents SDK's ``Runner`` on bwrap
and local sandboxes, its model the SDK's own ``ScriptedModel``
(``agents.testing``: a ``Model`` that returns scripted tool calls, no
network): the SDK's shell and ``apply_patch`` tools act on the sandbox, and
the model sees what they did."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest
from agents import RunConfig, Runner, function_tool
from agents.run_state import RunState
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.entries import File
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseCustomToolCall

from sandbox_sdk.integrations.openai_agents import SandboxSDKClient
from sandbox_sdk.provider import SandboxProvider
from tests.integrations.openai_agents.conftest import sandbox_id, sandbox_ids
from tests.test_docs import BLOCKS, Block
from tests.test_docs import test_block_runs_or_parses as check_block

#: The guide's blocks that need this extra, which tests/test_docs.py leaves to this file.
GUIDE_BLOCKS = [
    block
    for block in BLOCKS
    if block.page.name == "openai-agents.md"
    and "test_agent.py runs it" in block.page.read_text().splitlines()[block.line - 2]
]
MANIFEST = Manifest(entries={"app/greet.py": File(content=b"print('hello')\n")})
PATCH = """*** Begin Patch
*** Update File: app/greet.py
-print('hello')
+print('hello from the patch')
*** Add File: app/notes.md
+written by apply_patch
*** End Patch
"""


def script() -> ScriptedModel:
    """Look, patch, run, answer: one tool call a turn."""
    return ScriptedModel(
        [
            [function_call("exec_command", {"cmd": "ls app && python3 app/greet.py"}, call_id="look")],
            [
                ResponseCustomToolCall(
                    type="custom_tool_call", name="apply_patch", call_id="patch", input=PATCH
                )
            ],
            [
                function_call(
                    "exec_command", {"cmd": "python3 greet.py; cat notes.md", "workdir": "app"}, call_id="run"
                )
            ],
            [function_call("exec_command", {"cmd": "exit 7"}, call_id="fail")],
            [assistant_message("patched and ran it")],
        ]
    )


def tool_outputs(model: ScriptedModel) -> dict[str, str]:
    """What the model was told each tool call returned, by call id."""
    last = model.last_call
    assert last is not None
    return {
        item["call_id"]: item["output"]
        for item in last.input
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output")
    }


def agent(model: ScriptedModel) -> SandboxAgent[Any]:
    return SandboxAgent(
        name="patcher", instructions="Fix the greeting.", model=model, default_manifest=MANIFEST
    )


async def test_a_sandbox_agent_patches_and_runs_code_in_a_sandbox_the_runner_makes_and_deletes(
    client: SandboxSDKClient, provider: SandboxProvider[Any], snapshot_home: Path
) -> None:
    model = script()
    result = await Runner.run(
        agent(model),
        "Fix the greeting.",
        run_config=RunConfig(tracing_disabled=True, sandbox=SandboxRunConfig(client=client)),
    )
    assert result.final_output == "patched and ran it"
    model.assert_complete()
    outputs = tool_outputs(model)
    assert outputs["look"].endswith("Process exited with code 0\nOutput:\ngreet.py\nhello\n")
    assert "Updated app/greet.py" in outputs["patch"] and "Created app/notes.md" in outputs["patch"]
    assert outputs["run"].endswith("Output:\nhello from the patch\nwritten by apply_patch")
    assert "Process exited with code 7" in outputs["fail"]
    assert sandbox_ids(provider) == []  # the runner deleted the sandbox it made
    # ... after persisting its workspace into the default local snapshot
    (snapshot,) = snapshot_home.glob("openai-agents-python/sandbox/snapshots/*.tar")
    with tarfile.open(snapshot) as tar:
        greet = tar.extractfile("app/greet.py")
        assert greet is not None and greet.read() == b"print('hello from the patch')\n"


async def test_a_sandbox_agent_works_in_a_live_session_the_caller_keeps(
    client: SandboxSDKClient, provider: SandboxProvider[Any]
) -> None:
    session = await client.create(manifest=MANIFEST)
    async with session:
        model = script()
        result = await Runner.run(
            agent(model),
            "Fix the greeting.",
            run_config=RunConfig(tracing_disabled=True, sandbox=SandboxRunConfig(session=session)),
        )
        assert result.final_output == "patched and ran it"
        patched = await session.read(Path("app/greet.py"))
        assert patched.read() == b"print('hello from the patch')\n"
        patched.close()
    assert sandbox_ids(provider) == [sandbox_id(session)]
    await client.delete(session)
    assert sandbox_ids(provider) == []


@pytest.mark.parametrize("block", GUIDE_BLOCKS, ids=lambda block: block.name)
def test_the_guides_example_runs_as_written(block: Block, tmp_path: Path) -> None:
    """docs/openai-agents.md's runnable example, checked as tests/test_docs.py checks
    every block (it runs there only where the extra is installed: here)."""
    check_block(block, tmp_path)


async def test_a_paused_run_resumes_in_a_new_sandbox_restored_from_its_snapshot(
    client: SandboxSDKClient, provider: SandboxProvider[Any]
) -> None:
    """A tool that needs approval pauses the run: the runner persists the
    workspace and deletes the sandbox; the run state, through JSON, resumes
    the session with ``client.resume``, which makes a new sandbox that the SDK
    restores from the snapshot."""

    def deploy_app() -> str:
        """Deploy the application."""
        return "deployed"

    deploy = function_tool(deploy_app, name_override="deploy", needs_approval=True)

    def paused_agent(model: ScriptedModel) -> SandboxAgent[Any]:
        return SandboxAgent(
            name="deployer", instructions="Deploy.", model=model, default_manifest=MANIFEST, tools=[deploy]
        )

    first_model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": "echo built > app/build.txt"}, call_id="build")],
            [function_call("deploy", {}, call_id="deploy")],
        ]
    )
    config = RunConfig(tracing_disabled=True, sandbox=SandboxRunConfig(client=client))
    first = await Runner.run(paused_agent(first_model), "Deploy.", run_config=config)
    assert len(first.interruptions) == 1
    assert sandbox_ids(provider) == []
    saved = first.to_state().to_json()
    first_sandbox = saved["sandbox"]["session_state"]["sandbox_id"]

    second_model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": "cat app/build.txt app/greet.py"}, call_id="check")],
            [assistant_message("deployed and checked")],
        ]
    )
    second_agent = paused_agent(second_model)
    state = await RunState.from_json(second_agent, saved)
    state.approve(state.get_interruptions()[0])
    second = await Runner.run(second_agent, state, run_config=config)
    assert second.final_output == "deployed and checked"
    outputs = tool_outputs(second_model)
    assert outputs["deploy"] == "deployed"
    assert outputs["check"].endswith("Output:\nbuilt\nprint('hello')\n")
    resumed_in = second.to_state().to_json()["sandbox"]["session_state"]["sandbox_id"]
    assert resumed_in != first_sandbox
    assert sandbox_ids(provider) == []
