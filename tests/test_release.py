"""The release, as far as it can be tried offline: the workflow's structure
(.github/workflows/release.yml), the changelog's convention, and ``scripts/dist``,
which builds and ``twine check``s what the workflow uploads and refuses a tag
that does not match the version and its changelog section.

The upload itself (trusted publishing) needs the index and a tag push; it is
the one step not run here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
VERSION: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
#: What ``scripts/dist`` needs of the tree to build: copied into a temporary one per test.
TREE = ("pyproject.toml", "README.md", "CHANGELOG.md", "src", "scripts")


def workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def steps(job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow()["jobs"][job]["steps"]
    return found


def uses(job: str) -> list[str]:
    return [step["uses"].partition("@")[0] for step in steps(job) if "uses" in step]


def test_the_workflow_runs_on_version_tags_with_read_only_defaults() -> None:
    flow = workflow()
    # PyYAML reads the key `on` as the boolean True (YAML 1.1).
    assert flow[True] == {"push": {"tags": ["v*"]}}
    assert flow["permissions"] == {"contents": "read"}
    assert set(flow["jobs"]) == {"build", "publish"}


def test_the_distribution_is_built_once_and_the_same_files_are_published() -> None:
    jobs = workflow()["jobs"]
    assert uses("build") == ["actions/checkout", "actions/setup-python", "actions/upload-artifact"]
    (build,) = [step for step in steps("build") if "scripts/dist" in step.get("run", "")]
    assert build["run"].split() == ["scripts/dist", "dist"]
    assert build["env"]["RELEASE_TAG"] == "${{ github.ref_name }}"
    (upload,) = [s for s in steps("build") if s.get("uses", "").startswith("actions/upload-artifact")]
    # publish: no checkout, no build; what build uploaded, downloaded where the action looks (dist/).
    assert jobs["publish"]["needs"] == "build"
    assert uses("publish") == ["actions/download-artifact", "pypa/gh-action-pypi-publish"]
    assert not any("run" in step for step in steps("publish"))
    (download,) = [s for s in steps("publish") if s.get("uses", "").startswith("actions/download-artifact")]
    assert download["with"]["name"] == upload["with"]["name"]
    assert download["with"]["path"].rstrip("/") == upload["with"]["path"].rstrip("/") == "dist"
    assert upload["with"]["if-no-files-found"] == "error"


def test_only_the_publishing_job_may_ask_for_an_identity_token() -> None:
    jobs = workflow()["jobs"]
    assert jobs["publish"]["permissions"] == {"id-token": "write"}
    assert jobs["publish"]["environment"] == "pypi"
    assert "permissions" not in jobs["build"]  # the read-only default
    (publish,) = [s for s in steps("publish") if s.get("uses", "").startswith("pypa/gh-action-pypi-publish")]
    assert "with" not in publish  # no password, no token: trusted publishing


def test_the_changelog_keeps_an_unreleased_section_and_dated_versions() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert headings[0] == "[Unreleased]"
    for heading in headings[1:]:
        assert re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", heading), heading
    assert "### Added" in text
    assert re.search(rf"\b{re.escape(VERSION)}\b", text)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the build reads, to release from without touching the checkout."""
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in TREE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, copy / name)
    return copy


def dist(tree: Path, out: Path, tag: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}
    if tag is not None:
        env["RELEASE_TAG"] = tag
    return subprocess.run(
        [tree / "scripts" / "dist", "--no-isolation", out],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_a_tag_that_is_not_the_version_builds_nothing(tree: Path, tmp_path: Path) -> None:
    done = dist(tree, tmp_path / "out", "v9.9.9")
    assert done.returncode != 0
    assert f"the tag v9.9.9 is not v{VERSION}, the version in pyproject.toml" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_version_without_its_changelog_section_builds_nothing(tree: Path, tmp_path: Path) -> None:
    done = dist(tree, tmp_path / "out", f"v{VERSION}")
    assert done.returncode != 0
    assert f"CHANGELOG.md has no '## [{VERSION}] - YYYY-MM-DD' section" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_release_builds_both_files_and_twine_passes_them(tree: Path, tmp_path: Path) -> None:
    """The changelog renamed as a release does it; the files are the ones the
    workflow would upload, checked by ``twine check --strict``."""
    changelog = tree / "CHANGELOG.md"
    changelog.write_text(
        changelog.read_text().replace("## [Unreleased]", f"## [Unreleased]\n\n## [{VERSION}] - 2026-11-28", 1)
    )
    done = dist(tree, tmp_path / "out", f"v{VERSION}")
    assert done.returncode == 0, done.stdout + done.stderr
    built = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert built == [f"sandbox_sdk_py-{VERSION}-py3-none-any.whl", f"sandbox_sdk_py-{VERSION}.tar.gz"]
    assert done.stdout.count("PASSED") == 2
    assert not list((tree / "src").glob("*.egg-info"))  # built in a copy of the tree


def test_twine_check_fails_a_description_the_index_cannot_render(tree: Path, tmp_path: Path) -> None:
    """``--strict`` is what makes the check worth running: a README the index
    would show as broken fails the build (here: a reStructuredText description
    with an error, declared as such)."""
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'readme = "README.md"', 'readme = {file = "README.rst", content-type = "text/x-rst"}'
        )
    )
    (tree / "README.rst").write_text("Title\n==\n\n`unclosed\n")
    done = dist(tree, tmp_path / "out", None)
    assert done.returncode != 0
    assert "FAILED" in done.stdout + done.stderr
