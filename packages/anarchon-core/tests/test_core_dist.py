"""`make dist`, then a fresh venv with those wheels only: the quick start, the CLI and the typing check.

Installing the wheels (not the editable checkout) catches what a user would hit first: a module, a
`py.typed` marker or an entry point missing from a distribution. Built once per run; pip's own cache
serves the third-party dependencies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DISTRIBUTIONS = ["anarchon-core", "anarchon-sqlite", "anarchon-redis", "anarchon-postgres",
                 "anarchon-rabbitmq", "anarchon-nats", "anarchon-prometheus", "anarchon-opentelemetry",
                 "anarchon-dashboard", "anarchon-conformance", "anarchon-testkit"]

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    """The environment without anything that points at the checkout (make exports MYPYPATH)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("MYPYPATH", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _run(args: list[str | Path], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding the wheels that `make dist` built, and their dependencies from PyPI."""
    root = tmp_path_factory.mktemp("wheels")
    dist = root / "dist"
    _run(["make", "-s", "dist", f"DIST={dist}"], ROOT)
    wheels = sorted(dist.glob("*.whl"))
    names = {re.sub(r"-[^-]+-py3-none-any\.whl$", "", w.name).replace("_", "-") for w in wheels}
    assert names == set(DISTRIBUTIONS), names
    assert len(list(dist.glob("*.tar.gz"))) == len(DISTRIBUTIONS)
    env = root / "venv"
    _run([sys.executable, "-m", "venv", env], root)
    _run([env / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", *wheels], root)
    return env


def test_the_wheels_are_what_is_imported(venv: Path, tmp_path: Path) -> None:
    code = "import anarchon, anarchon_sqlite; print(anarchon.__file__); print(anarchon_sqlite.__file__)"
    where = _run([venv / "bin" / "python", "-c", code], tmp_path)
    assert all(Path(line).is_relative_to(venv) for line in where.split()), where


def test_the_quick_start_runs_from_the_wheels(venv: Path, tmp_path: Path) -> None:
    """docs/quickstart.md's jobs.py, run as it says: `anarchon run jobs:scheduler`, then `anarchon status`."""
    page = (ROOT / "docs" / "quickstart.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    jobs = next(b for b in blocks if "scheduler =" in b)
    (tmp_path / "jobs.py").write_text(jobs)
    proc = subprocess.Popen([venv / "bin" / "anarchon", "run", "jobs:scheduler"], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        deadline = time.monotonic() + 30
        while not any(line.startswith("tick ") for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
            lines += proc.stdout.readlines()
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines) + rest
    assert proc.returncode == 0, output
    assert "tick slot=" in output and "won attempt=1" in output, output
    status = _run([venv / "bin" / "anarchon", "status", "sqlite:///jobs.db"], tmp_path)
    assert "tick" in {line.split()[0] for line in status.splitlines()[1:]}, status


def test_the_cli_lists_every_driver(venv: Path, tmp_path: Path) -> None:
    rows = json.loads(_run([venv / "bin" / "anarchon", "backends", "--json"], tmp_path))
    schemes = {s for row in rows for s in row["schemes"]}
    assert {"sqlite://", "redis://", "redis+stream://", "valkey://", "postgresql://", "amqp://", "nats://",
            "nats-kv://", "memory://"} <= schemes, rows
    assert _run([venv / "bin" / "anarchon", "--version"], tmp_path).strip() == "anarchon 0.1.0"


def test_the_typing_checks_pass_against_the_wheels(venv: Path, tmp_path: Path) -> None:
    """The typing files, checked by mypy --strict and pyright strict against the installed wheels."""
    for path in sorted(ROOT.glob("packages/*/tests/typing/*.py")):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(
        {"typeCheckingMode": "strict", "reportUnnecessaryTypeIgnoreComment": "error"}))
    python = venv / "bin" / "python"
    bin_dir = Path(sys.executable).parent
    _run([bin_dir / "mypy", "--strict", "--python-executable", python, "--cache-dir", tmp_path / ".mypy",
          "."], tmp_path)
    _run([bin_dir / "pyright", "--pythonpath", python, "."], tmp_path)


def test_the_metrics_and_tracing_plugins_load_from_the_wheels(venv: Path, tmp_path: Path) -> None:
    """anarchon-prometheus and anarchon-opentelemetry are found through the entry-point group, and a run
    reaches both: a counter in prometheus_client's registry and a span from the global tracer provider."""
    code = """if True:
        import asyncio, anarchon
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from prometheus_client import REGISTRY
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        scheduler = anarchon.Scheduler.from_url("memory://")
        scheduler.every("tick", "200ms", lambda: None, catch_up=0)
        async def main():
            async with scheduler:
                while not exporter.get_finished_spans():
                    await asyncio.sleep(0.05)
        asyncio.run(main())
        names = sorted(n for n, _ in anarchon.plugin_manager().list_name_plugin())
        print(names, anarchon.plugin_errors())
        print(REGISTRY.get_sample_value("anarchon_runs_total",
                                        {"namespace": "anarchon", "job_name": "tick", "outcome": "done"}))
        print(exporter.get_finished_spans()[0].name)
    """
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
          "opentelemetry-sdk==1.45.2"], tmp_path)
    out = _run([venv / "bin" / "python", "-c", code], tmp_path).splitlines()
    assert "'opentelemetry'" in out[0] and "'prometheus'" in out[0] and out[0].endswith(" []"), out
    assert float(out[1]) >= 1, out
    assert out[2] == "run tick", out


def test_the_dashboard_serves_its_page_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    """anarchon-dashboard's page, script and style are package data: a wheel without them serves 500s."""
    code = """if True:
        import asyncio, anarchon_dashboard
        dashboard = anarchon_dashboard.app("memory://", namespace="wheel")
        for path in ("/", "/app.js", "/app.css", "/api/state"):
            reply = asyncio.run(dashboard.respond("GET", path))
            print(path, reply.status, reply.content_type.split(";")[0], len(reply.body) > 100)
    """
    out = _run([venv / "bin" / "python", "-c", code], tmp_path).splitlines()
    assert out == ["/ 200 text/html True", "/app.js 200 text/javascript True", "/app.css 200 text/css True",
                   "/api/state 200 application/json True"], out
    assert "anarchon dashboard" in _run([venv / "bin" / "anarchon", "dashboard", "--help"], tmp_path)
