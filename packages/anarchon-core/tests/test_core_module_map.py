"""The module map of docs/how-it-works.md is the code's: every module is listed, and no module imports
(at its top) a module of a higher layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "packages" / "anarchon-core" / "src" / "anarchon"
DOC = ROOT / "docs" / "how-it-works.md"


def modules() -> dict[str, Path]:
    """Every module and package of `anarchon` (Django's app internals aside), by dotted name under it."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[:2] == ["integrations", "django"] and len(parts) > 2:
            continue  # the Django app's files (apps, management commands) belong to the integration
        found[".".join(parts) or "anarchon"] = path
    return found


def layers() -> dict[str, int]:
    """The map's table: module -> layer."""
    text = DOC.read_text()
    table = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| `([\w.]+)` \| (\d) ", table, re.M)}


def top_level_imports(name: str, path: Path) -> set[str]:
    """The `anarchon` modules that `path` imports at its top (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if name == "anarchon":
        package = []
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("anarchon"):
                module = (node.module or "").removeprefix("anarchon").lstrip(".")
            else:
                continue
            if node.module or node.level == 0:  # (`from . import x` imports x, not the package)
                found.add(module or "anarchon")
            found.update(f"{module}.{a.name}" if module else a.name for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("anarchon.") for a in node.names
                         if a.name.startswith("anarchon."))
    return found


def test_every_module_is_on_the_map_and_nothing_else() -> None:
    assert sorted(modules()) == sorted(layers()), "docs/how-it-works.md's module map is out of date"


def test_no_module_imports_a_higher_layer() -> None:
    layer = layers()
    known = modules()
    upward = []
    for name, path in known.items():
        for target in top_level_imports(name, path):
            if target in known and target != name and layer[target] > layer[name]:
                upward.append(f"{name} (layer {layer[name]}) imports {target} (layer {layer[target]})")
    assert not upward, "\n".join(upward)


def test_the_check_finds_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "_planner.py"
    bad.write_text("from ._engine import Engine\n")
    assert "_engine" in top_level_imports("_planner", bad)
    assert layers()["_engine"] > layers()["_planner"]
