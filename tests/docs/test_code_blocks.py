"""Every Python block of README.md and docs/: type-checked by mypy --strict and pyright strict, and run
where it is a complete program.

Each block is checked as a module of its own, as a user would paste it. What a block leaves to the
reader is given in HTML comments right above it, which neither GitHub nor the site shows:

    <!-- context
    async def send_digest(key: str) -> None: ...
    -->                                  names the block uses (prepended to it for the checks)
    <!-- module my_app/mail.py
    class Mailer: ...
    -->                                  a module of the reader's project that the block imports
    <!-- as app.py -->                   the block is that module (another block imports it)
    <!-- context async ... -->           the block runs inside `async def example() -> None:` (it awaits)

Where a third-party library's own types are partial (asyncpg's API, one overload of django-stubs'
`staff_member_required`), the context holds a `# pyright:` line that turns off only the report of
those unknown types, for that block alone.

A complete program is one that runs something at its top level (`scheduler.run()`, `asyncio.run(...)`
or an `if __name__ == "__main__":` block): it is also run, in an empty folder with
`DATABASE_URL=sqlite:///jobs.db`, until it prints a line (or for 8 s), then stopped with
SIGTERM, and must exit 0.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMENT = re.compile(r"<!-- (context|module|as)\b[ \t]*([^\n]*?)(?:\n(.*?))?-->\n", re.S)


@dataclass
class Block:
    """One ```python block of a page, with what its comments give it."""

    page: Path
    line: int  # the page's line of the block's first code line
    code: str
    context: str = ""
    modules: dict[str, str] = field(default_factory=dict)
    path: str = ""  # where the checks see it, relative to their folder
    wrap: bool = False  # the block awaits at its top level: it goes inside an async function

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def source(self) -> str:
        if not self.wrap:
            return self.context + self.code
        lines = self.code.splitlines(keepends=True)
        body = "".join(f"    {line}" if line.strip() else line for line in lines)
        return f"{self.context}async def example() -> None:\n{body}"

    def page_line(self, line: int) -> int:
        """The page's line for a line of `source` (the context's lines map to the fence)."""
        return self.line + max(line - 1 - self.context.count("\n") - self.wrap, -1)


def blocks(page: Path) -> list[Block]:
    """The page's Python blocks, each with the comments directly above its fence."""
    text = page.read_text()
    found = []
    for fence in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        block = Block(page, text.count("\n", 0, fence.start()) + 2, fence.group(1))
        above = text[:fence.start()]
        while (m := _last_comment(above)) is not None:
            kind, arg, body = m.group(1), m.group(2).strip(), m.group(3) or ""
            if kind == "context":
                block.context = body + block.context
                block.wrap = block.wrap or arg == "async"
            elif kind == "module":
                block.modules[arg] = body
            else:
                block.path = arg
            above = above[:m.start()]
        found.append(block)
    return found


def _last_comment(text: str) -> re.Match[str] | None:
    """The check comment that ends `text` (blank lines after it allowed), if any."""
    stripped = text.rstrip("\n") + "\n"
    start = stripped.rfind("<!-- ")
    if start < 0:
        return None
    m = COMMENT.match(stripped, start)
    return m if m and m.end() == len(stripped) else None


def all_blocks() -> list[Block]:
    found = [b for page in PAGES for b in blocks(page)]
    for i, b in enumerate(found):
        b.path = b.path or f"block_{i:03d}_{re.sub(r'[^a-z0-9]+', '_', b.name.lower())}.py"
    return found


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Block]]:
    """Every block (and the modules the comments give) written out as one folder of modules."""
    where = tmp_path_factory.mktemp("docs-code")
    found = all_blocks()
    modules: dict[str, list[str]] = {}
    for b in found:
        for path, body in b.modules.items():
            if body not in modules.setdefault(path, []):
                modules[path].append(body)
    files = {**{p: "\n".join(bodies) for p, bodies in modules.items()}, **{b.path: b.source for b in found}}
    assert len(files) == len(modules) + len(found), "a block's `as` path is also a module comment's path"
    for path, body in files.items():
        target = where / path
        target.parent.mkdir(parents=True, exist_ok=True)
        for package in target.relative_to(where).parents:
            if package != Path(".") and not (where / package / "__init__.py").exists():
                (where / package / "__init__.py").write_text(files.get(f"{package}/__init__.py", ""))
        target.write_text(body)
    return where, found


# Where the checkers find the packages of this repository.
SOURCES = [*map(str, sorted(ROOT.glob("packages/*/src"))), str(ROOT / "conformance" / "src")]


def _env() -> dict[str, str]:
    return {**os.environ, "MYPYPATH": os.pathsep.join(SOURCES)}


def _where(found: list[Block], path: str, line: int) -> str:
    block = next((b for b in found if b.path == path), None)
    return f"{block.page.relative_to(ROOT)}:{block.page_line(line)}" if block else f"{path}:{line}"


def test_the_blocks_are_found() -> None:
    found = all_blocks()
    assert len(found) >= 30, [b.name for b in found]
    assert any(b.page.name == "README.md" for b in found)


def test_every_block_type_checks_under_mypy_strict(checked: tuple[Path, list[Block]]) -> None:
    where, found = checked
    done = subprocess.run([str(BIN / "mypy"), "--strict", "--cache-dir", str(where / ".mypy"),
                           "--python-version", "3.11", "--explicit-package-bases", "."],
                          cwd=where, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    errors = [f"{_where(found, m.group(1), int(m.group(2)))}: {m.group(3)}"
              for m in re.finditer(r"^(.+?\.py):(\d+): error: (.*)$", done.stdout, re.M)]
    assert done.returncode == 0 and not errors, "\n".join(errors) or done.stdout + done.stderr


def test_every_block_type_checks_under_pyright_strict(checked: tuple[Path, list[Block]]) -> None:
    where, found = checked
    (where / "pyrightconfig.json").write_text(json.dumps({
        "typeCheckingMode": "strict", "pythonVersion": "3.11", "extraPaths": SOURCES,
        "reportUnnecessaryTypeIgnoreComment": "error", "exclude": [".mypy"]}))
    done = subprocess.run([str(BIN / "pyright"), "--outputjson", "--pythonpath", sys.executable],
                          cwd=where, capture_output=True, text=True, timeout=600, check=False)
    report = json.loads(done.stdout)
    errors = [f"{_where(found, str(Path(d['file']).relative_to(where)), d['range']['start']['line'] + 1)}: "
              f"{d['message']} ({d.get('rule', '')})"
              for d in report["generalDiagnostics"] if d["severity"] in ("error", "warning")]
    assert not errors, "\n".join(errors)
    assert report["summary"]["filesAnalyzed"] >= len(found)


def _is_program(source: str) -> bool:
    """Does the module run something at its top level (a scheduler, an event loop, a main block)?"""
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            called = ast.unparse(node.value.func)
            if called == "asyncio.run" or (called.endswith(".run") and not node.value.args):
                return True
    return False


def programs() -> list[Block]:
    return [b for b in all_blocks() if _is_program(b.source)]


def test_complete_programs_are_found() -> None:
    names = [b.page.name for b in programs()]
    assert "README.md" in names and "index.md" in names, names


@pytest.mark.slow
@pytest.mark.parametrize("block", programs(), ids=lambda b: b.name)
def test_a_complete_program_runs(block: Block, tmp_path: Path) -> None:
    (tmp_path / "program.py").write_text(block.source)
    for path, body in block.modules.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(body)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    proc = subprocess.Popen([sys.executable, "program.py"], cwd=tmp_path,
                            env={**env, "DATABASE_URL": "sqlite:///jobs.db", "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        deadline = time.monotonic() + 8
        lines: list[str] = []
        while not lines and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            lines += proc.stdout.readlines()
        printed = "".join(lines)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err, f"{block.name}:\n{printed}{out}\n{err}"
