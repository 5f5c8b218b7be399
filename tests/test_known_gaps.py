"""The conformance kit's declared gaps, run by pytest itself (in process): a gap
passes as an xfail only when its check fails the way the gap says, so an
unrelated failure in a check with a gap fails the run."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SUITE = """
from sandbox_sdk.testing import Gap, SandboxConformanceTests


class TestDeclaredGaps(SandboxConformanceTests):
    known_gaps = {
        "test_unmet": "the check's assertion fails",
        "test_unrelated_error": "the check's assertion fails",
        "test_its_own_error": Gap("the platform refuses it", raises=PermissionError),
        "test_another_error": Gap("the platform refuses it", raises=PermissionError),
        "test_fixed": "fixed since",
    }

    def test_unmet(self):
        assert 1 == 2

    def test_unrelated_error(self):
        raise TypeError("a bug, not the gap")

    def test_its_own_error(self):
        raise PermissionError("refused")

    def test_another_error(self):
        raise KeyError("a bug, not the gap")

    def test_fixed(self):
        pass
"""


def test_a_gap_is_an_xfail_only_for_the_failure_it_names(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gaps=SUITE)
    ours = ["test_unmet", "test_unrelated_error", "test_its_own_error", "test_another_error", "test_fixed"]
    result = pytester.runpytest(
        *(f"test_gaps.py::TestDeclaredGaps::{name}" for name in ours),  # not the kit's own checks
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    )
    outcomes = result.parseoutcomes()
    assert (outcomes.get("xfailed"), outcomes.get("failed")) == (2, 3), result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*FAILED*test_unrelated_error*TypeError*",
            "*FAILED*test_another_error*KeyError*",
            "*FAILED*test_fixed*XPASS(strict)*",
        ],
        consecutive=False,
    )
