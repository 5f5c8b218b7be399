"""Worked examples referenced from the docs (and tested in tests/)."""
