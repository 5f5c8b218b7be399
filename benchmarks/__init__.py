"""Benchmarks: run each file as a script (see its docstring)."""
