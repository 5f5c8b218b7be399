"""Adapters that let agent and evaluation frameworks use any sandbox-sdk sandbox.

Each adapter lives in its own module and needs its framework installed (an
optional extra): :mod:`~sandbox_sdk.integrations.deepagents` for LangChain's
``deepagents`` (``[deepagents]``), :mod:`~sandbox_sdk.integrations.inspect` for
inspect_ai sandbox environments (``[inspect]``),
:mod:`~sandbox_sdk.integrations.openai_agents` for the OpenAI Agents SDK's
``SandboxAgent`` (``[openai-agents]``) and
:mod:`~sandbox_sdk.integrations.mcp`, a Model Context Protocol server (``[mcp]``).
What the model reads (``Error: ...`` texts, listings) is worded once, in
``_texts``, for all of them.
"""
