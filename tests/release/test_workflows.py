"""The GitHub Actions workflows: valid by GitHub's workflow schema, running .ci/run, publishing by trust.

They cannot run here; `make lint` validates them with check-jsonschema's vendored copy of the schema
(no network), and these tests check that the validation can fail and that the workflows do what
docs/releasing.md says.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CHECK = [str(Path(sys.executable).parent / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows"]


def _load(name: str) -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def test_the_workflows_are_valid() -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["ci.yml", "release.yml"]
    done = subprocess.run([*CHECK, *map(str, files)], capture_output=True, text=True, timeout=99, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_broken_workflow_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text((WORKFLOWS / "ci.yml").read_text().replace("    steps:\n", "    step:\n", 1))
    done = subprocess.run([*CHECK, str(broken)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "$.jobs.checks" in done.stdout, done.stdout + done.stderr


def test_ci_runs_what_ci_runs_here() -> None:
    ci = _load("ci.yml")
    assert set(ci["on"]) == {"push", "pull_request", "workflow_call"}
    runs = [step.get("run", "") for step in ci["jobs"]["checks"]["steps"]]
    assert any(run.endswith("bash .ci/run") for run in runs), runs


def test_a_tag_is_checked_built_and_published_by_trust() -> None:
    release = _load("release.yml")
    assert release["on"] == {"push": {"tags": ["v*.*.*"]}}
    jobs = release["jobs"]
    assert jobs["checks"]["uses"] == "./.github/workflows/ci.yml"
    assert jobs["dist"]["needs"] == "checks" and jobs["pypi"]["needs"] == "dist"
    assert any(step.get("run") == "make dist" for step in jobs["dist"]["steps"])
    pypi = jobs["pypi"]
    assert pypi["permissions"] == {"id-token": "write"} and pypi["environment"]["name"] == "pypi"
    publish = [s for s in pypi["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi-publish@")]
    assert len(publish) == 1 and "with" not in publish[0], publish  # no password or token: trusted publishing
    assert release["permissions"] == {"contents": "read"}
