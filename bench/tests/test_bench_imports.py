"""The bench scripts import one another without a cycle: `page.py` takes the tables from `run.py`, which
imports nothing of the page."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent


def bench_imports() -> dict[str, set[str]]:
    """Each bench module and the bench modules it imports, anywhere in its body."""
    modules = {path.stem: path for path in BENCH.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
        graph[name] = found & set(modules) - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_bench_modules_import_one_another_without_a_cycle() -> None:
    graph = bench_imports()
    assert "analysis" in graph["run"] and "run" in graph["page"], graph  # the graph is read at all
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_a_cycle_is_found() -> None:
    assert cycle({"run": {"page"}, "page": {"report", "run"}, "report": set()}) == ["page", "run", "page"]
    assert cycle({"run": {"page", "report"}, "page": {"report"}, "report": set()}) is None
