"""Adapters that let agent frameworks use any sandbox-sdk sandbox.

Each adapter lives in its own module and needs its framework installed
(an optional extra): :mod:`sandbox_sdk.integrations.deepagents` for LangChain's
``deepagents`` (``pip install 'sandbox-sdk[deepagents]'``).
"""
