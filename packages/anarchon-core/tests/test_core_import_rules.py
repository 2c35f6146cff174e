"""The import rules between distributions: none imports another's private modules, and the core imports
no status page (the CLI finds one through the `anarchon.page` entry-point group)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SOURCES = sorted(p for p in [*ROOT.glob("packages/*/src"), ROOT / "conformance" / "src"] if p.is_dir())


def _packages() -> dict[str, str]:
    """Each importable top-level package, and the distribution folder that ships it."""
    found: dict[str, str] = {}
    for src in SOURCES:
        for pkg in src.iterdir():
            if (pkg / "__init__.py").is_file():
                found[pkg.name] = src.parent.name
    return found


PACKAGES = _packages()


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in `path`, `from a import b` giving both `a` and `a.b`,
    and the literal argument of `importlib.import_module(...)` calls."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def violations(src: Path, root: Path = ROOT) -> list[str]:
    """The imports under `src` that break the rules, as `file:line: what` (one per line)."""
    own = src.parent.name
    bad: list[str] = []
    for path in sorted(src.rglob("*.py")):
        seen: set[int] = set()
        for line, module in _imports(path):
            if line in seen:
                continue
            parts = module.split(".")
            owner = PACKAGES.get(parts[0])
            if owner is None or owner == own:
                continue
            where = f"{path.relative_to(root)}:{line}"
            if own == "anarchon-core" and owner == "anarchon-dashboard":
                bad.append(f"{where}: the core imports the page ({module})")
                seen.add(line)
            elif any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                bad.append(f"{where}: imports {module}, a private module of {owner}")
                seen.add(line)
    return bad


def test_the_rules_see_every_distribution() -> None:
    assert {"anarchon", "anarchon_dashboard", "anarchon_prometheus", "anarchon_conformance"} <= set(PACKAGES)


@pytest.mark.parametrize("src", SOURCES, ids=[s.parent.name for s in SOURCES])
def test_no_distribution_imports_another_ones_private_modules(src: Path) -> None:
    assert violations(src) == []


def test_the_check_catches_a_private_import_and_the_core_importing_the_page(tmp_path: Path) -> None:
    """The rule can fail: a page that reaches into the core's privates, and a core that imports the page."""
    page = tmp_path / "anarchon-dashboard" / "src" / "anarchon_dashboard"
    page.mkdir(parents=True)
    (page / "__init__.py").write_text("from anarchon._controls import trigger_key\n"
                                      "from anarchon import _history\nimport anarchon.inspect\n")
    core = tmp_path / "anarchon-core" / "src" / "anarchon"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("import importlib\nimportlib.import_module('anarchon_dashboard')\n")
    page_bad = violations(page.parent, tmp_path)
    core_bad = violations(core.parent, tmp_path)
    assert len(page_bad) == 2 and "anarchon._controls" in page_bad[0] and "anarchon._history" in page_bad[1]
    assert core_bad == [
        "anarchon-core/src/anarchon/__init__.py:2: the core imports the page (anarchon_dashboard)"]
