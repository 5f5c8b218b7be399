"""Sandbox providers shipped with the SDK, importable as ``sandbox_sdk.providers.<name>``."""
