"""scripts/dists.py: one version and index-ready metadata for every distribution, and a bump that moves
them all together."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _dists(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / "scripts" / "dists.py"), *args], capture_output=True,
                          text=True, timeout=60, check=False)


def _copy(tmp_path: Path) -> Path:
    """What dists.py reads, copied: each distribution's pyproject, README, LICENSE and py.typed markers."""
    copy = tmp_path / "repo"
    for name in ("VERSION", "LICENSE", "CHANGELOG.md", "scripts/dists.py"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    for pyproject in [*ROOT.glob("packages/*/pyproject.toml"), ROOT / "conformance" / "pyproject.toml"]:
        folder = pyproject.parent
        target = copy / folder.relative_to(ROOT)
        for marker in folder.glob("src/*/py.typed"):
            (target / marker.relative_to(folder)).parent.mkdir(parents=True)
            shutil.copy(marker, target / marker.relative_to(folder))
            (target / marker.relative_to(folder)).with_name("__init__.py").touch()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy(folder / name, target / name)
    return copy


def test_every_distribution_is_ready_for_an_index() -> None:
    done = _dists(ROOT, "check")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"11 distributions at {(ROOT / 'VERSION').read_text().strip()}"


def test_a_bump_moves_every_version_and_bound_and_opens_a_changelog_section(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    done = _dists(copy, "bump", "9.8.7")
    assert done.returncode == 0, done.stderr
    assert _dists(copy, "check").returncode == 0
    assert (copy / "VERSION").read_text() == "9.8.7\n"
    bounds = set()
    for pyproject in copy.rglob("pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        assert project["version"] == "9.8.7", pyproject
        after_urls = pyproject.read_text().split("[project.urls]")[1]
        bounds |= set(re.findall(r'"anarchon-[a-z]+([^"]*)"', after_urls))
        bounds |= {d.removeprefix("anarchon-core") for d in project["dependencies"] if "anarchon-" in d}
    assert bounds == {"~=9.8.7"}, bounds
    changelog = (copy / "CHANGELOG.md").read_text()
    assert re.search(r"^## \[Unreleased\]\n\n## \[9\.8\.7\] - \d{4}-\d\d-\d\d$", changelog, re.M), changelog
    assert "[9.8.7]: https://" in changelog


def test_a_stray_bound_or_version_is_named(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    path = copy / "packages" / "anarchon-redis" / "pyproject.toml"
    path.write_text(path.read_text().replace('"anarchon-core~=', '"anarchon-core>=', 1))
    path = copy / "packages" / "anarchon-nats" / "pyproject.toml"
    path.write_text(re.sub(r'^version = ".*"$', 'version = "0.0.1"', path.read_text(), flags=re.M))
    done = _dists(copy, "check")
    assert done.returncode == 1
    assert "packages/anarchon-redis/pyproject.toml: 'anarchon-core>=" in done.stderr, done.stderr
    assert "packages/anarchon-nats/pyproject.toml: version '0.0.1'" in done.stderr, done.stderr
    assert _dists(copy, "bump", "1.2").returncode != 0
