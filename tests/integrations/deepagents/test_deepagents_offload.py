"""Large ``execute`` output left in a file in the sandbox (deepagents 0.7.32's
capture at source): ``DeepAgentsBackend.execute_with_offload`` by the contract of
deepagents' ``BaseSandbox.execute_with_offload``, and its middleware using it
for our backend, end to end with a scripted model. Under a deepagents without
the hook (0.6), the backend says so instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents")

from deepagents import create_deep_agent
from deepagents.backends import CompositeBackend
from deepagents.backends.sandbox import BaseSandbox as ReferenceSandbox
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from sandbox_sdk.integrations.deepagents import CAPTURE_OFFLOAD, PROTOCOL_0_7, DeepAgentsBackend
from sandbox_sdk.providers.local import LocalSandbox
from tests.integrations.deepagents.test_deepagents_agent import ScriptedChatModel, tool_call

#: 20000 numbered lines, 108894 bytes: far over the inline budgets used here.
LINES = 20_000
BIG = f"seq 1 {LINES}"
BIG_OUTPUT = "".join(f"{n}\n" for n in range(1, LINES + 1))

offload_only = pytest.mark.skipif(not CAPTURE_OFFLOAD, reason="deepagents < 0.7.32 has no capture offload")


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[LocalSandbox]:
    root = tmp_path / "sandbox"
    root.mkdir()
    yield LocalSandbox(root)


async def offload(backend: DeepAgentsBackend, mode: str, command: str, path: str, **options: Any) -> Any:
    if mode == "sync":
        return backend.execute_with_offload(command, path, **options)
    return await backend.aexecute_with_offload(command, path, **options)


def test_the_backend_is_a_capture_sandbox_exactly_when_deepagents_has_the_hook(sandbox: LocalSandbox) -> None:
    backend = DeepAgentsBackend(sandbox)
    assert isinstance(backend, ReferenceSandbox) is CAPTURE_OFFLOAD
    assert CAPTURE_OFFLOAD is hasattr(ReferenceSandbox, "execute_with_offload")
    if PROTOCOL_0_7 and hasattr(ReferenceSandbox, "enable_capture_offload"):
        assert CAPTURE_OFFLOAD
    if not CAPTURE_OFFLOAD:
        with pytest.raises(NotImplementedError, match=r"0\.7\.32"):
            backend.execute_with_offload("true", f"{sandbox.root_dir}/out", max_inline_bytes=10)
    # Registered, not subclassed: nothing of deepagents' own sandbox runs in ours.
    assert ReferenceSandbox not in type(backend).__mro__


@offload_only
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_small_output_comes_back_whole_and_leaves_no_file(sandbox: LocalSandbox, mode: str) -> None:
    path = f"{sandbox.root_dir}/large_tool_results/call-1"
    result = await offload(
        DeepAgentsBackend(sandbox), mode, "echo hi; echo err >&2; exit 3", path, **{"max_inline_bytes": 1000}
    )
    assert not result.offloaded
    assert result.response.output == "hi\nerr\n"
    assert result.response.exit_code == 3
    assert not result.response.truncated
    assert not Path(path).exists()


@offload_only
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_large_output_stays_in_the_sandbox_with_a_preview(sandbox: LocalSandbox, mode: str) -> None:
    path = f"{sandbox.root_dir}/large_tool_results/call-2"
    result = await offload(DeepAgentsBackend(sandbox), mode, f"{BIG}; exit 7", path, max_inline_bytes=1000)
    assert result.offloaded
    assert result.response.exit_code == 7
    assert not result.response.truncated
    assert result.preview_has_truncation_marker
    preview = result.response.output
    assert preview.startswith("1\n2\n3\n4\n5\n")
    assert f"... [{LINES - 10} lines truncated] ..." in preview
    assert preview.endswith(f"{LINES - 1}\n{LINES}\n")
    assert sandbox.read_bytes(path) == BIG_OUTPUT.encode()


@offload_only
def test_the_capture_cap_keeps_the_exit_status_and_says_the_file_is_incomplete(sandbox: LocalSandbox) -> None:
    path = f"{sandbox.root_dir}/out/call-3"
    result = DeepAgentsBackend(sandbox).execute_with_offload(
        f"{BIG}; exit 4", path, max_inline_bytes=100, max_capture_bytes=5000
    )
    assert result.offloaded
    assert result.response.truncated
    assert result.response.exit_code == 4  # the command ran to its end: not killed by the cap
    assert sandbox.read_bytes(path) == BIG_OUTPUT.encode()[:5000]


@offload_only
def test_an_output_over_the_sandboxs_budget_is_offloaded_not_cut(tmp_path: Path) -> None:
    """deepagents' inline budget (80 KB by default) can exceed what the sandbox
    returns from one command: the budget is lowered to fit, so the output is
    offloaded whole instead of coming back cut."""
    root = tmp_path / "small"
    root.mkdir()
    sandbox = LocalSandbox(root, max_output_bytes=32 * 1024)
    path = f"{root}/large_tool_results/call-4"
    result = DeepAgentsBackend(sandbox).execute_with_offload(BIG, path, max_inline_bytes=1024 * 1024)
    assert result.offloaded
    assert not result.response.truncated
    assert sandbox.read_bytes(path) == BIG_OUTPUT.encode()


@offload_only
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_where_the_file_cannot_be_made_the_whole_output_comes_back(
    sandbox: LocalSandbox, mode: str
) -> None:
    """deepagents' wrapper alone would report an empty output there (its
    redirection fails, and an empty file looks like a quiet command)."""
    sandbox.write("file.txt", "not a directory")
    path = f"{sandbox.root_dir}/file.txt/call-5"
    result = await offload(DeepAgentsBackend(sandbox), mode, f"{BIG}; exit 2", path, max_inline_bytes=100)
    assert not result.offloaded
    assert result.response.output == BIG_OUTPUT
    assert result.response.exit_code == 2


@offload_only
def test_turned_off_the_command_runs_unwrapped(sandbox: LocalSandbox) -> None:
    backend = DeepAgentsBackend(sandbox)
    backend.enable_capture_offload = False
    path = f"{sandbox.root_dir}/large_tool_results/call-6"
    result = backend.execute_with_offload(BIG, path, max_inline_bytes=100)
    assert not result.offloaded
    assert result.response.output == BIG_OUTPUT
    assert not Path(path).exists()


@offload_only
def test_a_command_killed_at_its_timeout_says_so_and_leaves_no_file(sandbox: LocalSandbox) -> None:
    path = f"{sandbox.root_dir}/large_tool_results/call-7"
    # The command waits on a pipe nothing writes to: only the timeout ends it.
    result = DeepAgentsBackend(sandbox).execute_with_offload(
        "echo started; mkfifo f; cat f", path, max_inline_bytes=100, timeout=1
    )
    assert not result.offloaded
    assert result.response.exit_code == 124
    assert "Error: Command timed out after 1 seconds and was killed." in result.response.output
    assert not Path(path).exists()


@offload_only
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_agents_execute_tool_offloads_through_our_backend(sandbox: LocalSandbox, mode: str) -> None:
    """A real agent: its middleware sees our backend as a capture sandbox, the
    output stays in the sandbox, and the model gets a preview and the path."""
    model = ScriptedChatModel(
        messages=iter([tool_call("execute", "call-big", command=BIG), AIMessage(content="Done.")])
    )
    root = str(sandbox.root_dir)
    backend = CompositeBackend(default=DeepAgentsBackend(sandbox), routes={}, artifacts_root=root)
    agent = create_deep_agent(model=model, backend=backend)
    if mode == "sync":
        result = agent.invoke({"messages": [HumanMessage("count")]})
    else:
        result = await agent.ainvoke({"messages": [HumanMessage("count")]})
    (message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    content = str(message.content)
    path = f"{root}/large_tool_results/call-big"
    assert path in content
    assert "[Command succeeded with exit code 0]" in content
    assert f"... [{LINES - 10} lines truncated] ..." in content
    assert len(content) < 10_000
    assert sandbox.read_bytes(path) == BIG_OUTPUT.encode()
