#!/usr/bin/env python3
"""Every distribution of this repository, released together at one version.

    python scripts/dists.py check              # the metadata a package index needs, one version everywhere
    python scripts/dists.py bump 0.2.0         # VERSION, every pyproject.toml, the bounds, CHANGELOG.md
    python scripts/dists.py list               # the distribution folders, one a line (make dist)
    python scripts/dists.py index DIST OUT     # DIST's files as a PEP 503 simple index under OUT

`VERSION` at the root is the one place a version is decided. `bump` writes it into each distribution's
`pyproject.toml` (an sdist must carry its own version) and into the bound every distribution puts on
its siblings (`anarchon-core~=X.Y.Z`, the same everywhere); `check` fails while any of them disagree.
Standard library only: `make dist` runs it before any venv exists.
"""

from __future__ import annotations

import datetime
import hashlib
import html
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION_FILE = ROOT / "VERSION"
CHANGELOG = ROOT / "CHANGELOG.md"
REPOSITORY = "https://github.com/anarchon/anarchon"
DOCUMENTATION = "https://anarchon.github.io/anarchon/"
CLASSIFIERS = {
    "Development Status :: 3 - Alpha", "Framework :: AsyncIO", "Intended Audience :: Developers",
    "Programming Language :: Python :: 3", "Programming Language :: Python :: 3 :: Only",
    "Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13", "Topic :: System :: Distributed Computing", "Typing :: Typed",
}
URLS = {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
SIBLING = re.compile(r'"(anarchon-[a-z]+)(\[[a-z,]+\])?([^"]*)"')
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+((a|b|rc)\d+)?$")


def folders() -> list[Path]:
    """The folder of every distribution: packages/* and the conformance kit."""
    return [*sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml")), ROOT / "conformance"]


def version() -> str:
    """The version every distribution is released at."""
    return VERSION_FILE.read_text().strip()


def problems() -> list[str]:
    """What a package index, or releasing every distribution together, would trip on."""
    want = version()
    found: list[str] = []
    if not VERSION_RE.match(want):
        found.append(f"VERSION holds {want!r}: use X.Y.Z (or X.Y.ZrcN)")
    license_text = (ROOT / "LICENSE").read_text()
    names = set()
    for folder in folders():
        where = folder.relative_to(ROOT)
        text = (folder / "pyproject.toml").read_text()
        project = tomllib.loads(text)["project"]
        name = project["name"]
        names.add(name)

        def bad(what: str, where: Path = where) -> None:
            found.append(f"{where}/pyproject.toml: {what}")

        if project.get("version") != want:
            bad(f"version {project.get('version')!r}, not VERSION's {want!r} (scripts/dists.py bump {want})")
        readme = folder / str(project.get("readme", ""))
        if project.get("readme") != "README.md" or not readme.is_file():
            bad("readme must be its own README.md")
        elif not readme.read_text().startswith(f"# {name}\n") or len(readme.read_text().split()) < 40:
            bad(f"README.md must start with '# {name}' and say what it is, how to install and use it")
        if project.get("license") != "MIT" or project.get("license-files") != ["LICENSE"]:
            bad('needs license = "MIT" and license-files = ["LICENSE"]')
        copy = folder / "LICENSE"
        if not copy.is_file() or copy.read_text() != license_text:
            bad("LICENSE must be a copy of the root LICENSE")
        classifiers = set(project.get("classifiers", []))
        if missing := CLASSIFIERS - classifiers:
            bad(f"classifiers lack {sorted(missing)}")
        if any(c.startswith("License ::") for c in classifiers):
            bad("a License :: classifier beside a license expression is refused by the index (PEP 639)")
        if missing := URLS - set(project.get("urls", {})):
            bad(f"[project.urls] lacks {sorted(missing)}")
        if not 20 <= len(project.get("description", "")) <= 200:
            bad("description must be one line of 20-200 characters")
        requires = tomllib.loads(text)["build-system"]["requires"]
        if requires != ["setuptools>=77"]:
            bad(f"build-system requires {requires}: setuptools>=77 reads the license expression")
        extras = project.get("optional-dependencies", {}).values()
        deps = [*project.get("dependencies", []), *(d for ds in extras for d in ds)]
        for dep in deps:
            m = re.match(r"(anarchon-[a-z]+)(\[[a-z,]+\])?(.*)$", dep)
            if m and m.group(3) != f"~={want}":
                bad(f"{dep!r}: every sibling is required as '{m.group(1)}~={want}'")
        for package in (folder / "src").glob("*/__init__.py"):
            if not (package.parent / "py.typed").is_file():
                bad(f"{package.parent.relative_to(folder)}/py.typed is missing (Typing :: Typed)")
    if len(names) != len(folders()):
        found.append("two distributions share a name")
    return found


def bump(new: str) -> None:
    """Set every distribution, and the bounds between them, to `new`; open its CHANGELOG section."""
    if not VERSION_RE.match(new):
        raise SystemExit(f"invalid version {new!r}: use X.Y.Z (or X.Y.ZrcN)")
    old = version()
    for folder in folders():
        path = folder / "pyproject.toml"
        text = re.sub(r'^version = "[^"]*"$', f'version = "{new}"', path.read_text(), count=1, flags=re.M)
        text = "".join(line if line.startswith("name = ") else
                       SIBLING.sub(lambda m: f'"{m.group(1)}{m.group(2) or ""}~={new}"', line)
                       for line in text.splitlines(keepends=True))
        path.write_text(text)
    VERSION_FILE.write_text(new + "\n")
    if CHANGELOG.exists():
        log = CHANGELOG.read_text()
        if f"## [{new}]" not in log:
            today = datetime.date.today().isoformat()
            log = log.replace("## [Unreleased]\n", f"## [Unreleased]\n\n## [{new}] - {today}\n", 1)
            link = f"[Unreleased]: {REPOSITORY}/compare/v{new}...HEAD\n[{new}]: {REPOSITORY}/"
            link += f"compare/v{old}...v{new}\n" if f"[{old}]:" in log else f"releases/tag/v{new}\n"
            log = re.sub(r"^\[Unreleased\]: .*\n", link, log, count=1, flags=re.M)
            CHANGELOG.write_text(log)
    print(f"{old} -> {new}: VERSION, {len(folders())} pyproject.toml files and CHANGELOG.md")


def index(dist: Path, out: Path) -> None:
    """Write `out/<project>/index.html` (and `out/index.html`) linking each of `dist`'s files, with hashes."""
    projects: dict[str, list[Path]] = {}
    for f in sorted(dist.iterdir()):
        if f.suffix == ".whl" or f.name.endswith(".tar.gz"):
            stem = f.name.removesuffix(".tar.gz") if f.name.endswith(".tar.gz") else f.name
            project = re.sub(r"[-_.]+", "-", stem.split("-")[0]).lower()
            projects.setdefault(project, []).append(f)
    out.mkdir(parents=True, exist_ok=True)
    page = "<!DOCTYPE html>\n<html><body>\n{}</body></html>\n"
    (out / "index.html").write_text(page.format("".join(f'<a href="{p}/">{p}</a>\n' for p in projects)))
    for project, files in projects.items():
        (out / project).mkdir(exist_ok=True)
        links = []
        for f in files:
            (out / project / f.name).write_bytes(f.read_bytes())
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            links.append(f'<a href="{html.escape(f.name)}#sha256={digest}" data-requires-python="&gt;=3.11">'
                         f"{html.escape(f.name)}</a>\n")
        (out / project / "index.html").write_text(page.format("".join(links)))


def main(argv: list[str]) -> int:
    """Run one command; the exit status is 1 when `check` finds problems."""
    match argv:
        case ["check"]:
            found = problems()
            for line in found:
                print(line, file=sys.stderr)
            if not found:
                print(f"{len(folders())} distributions at {version()}")
            return 1 if found else 0
        case ["bump", new]:
            bump(new)
            return 0
        case ["list"]:
            print("\n".join(str(f.relative_to(ROOT)) for f in folders()))
            return 0
        case ["index", dist, out]:
            index(Path(dist), Path(out))
            return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
