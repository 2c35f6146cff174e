"""The README's install lines, run as written against a local package index of `make dist`'s files.

`make dist` builds every distribution in isolated build environments. This module serves those files
on loopback as a PEP 503 simple index (`scripts/dists.py index`), and in a fresh venv per line runs each
`pip install` line of the README's Install section exactly as written, with pip pointed at that index
and at PyPI for the third-party dependencies (`PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`; no pip
configuration file, no find-links). Every anarchon distribution must come from the local index. Then
the README's first job runs in that venv on the line's store. A venv holding every distribution runs
the quick start, the CLI, the typing checks, the plugins and the dashboard from the wheels.
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from anarchon.testing import require_service

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "VERSION").read_text().strip()
DISTRIBUTIONS = {"anarchon-core", "anarchon-sqlite", "anarchon-redis", "anarchon-postgres",
                 "anarchon-rabbitmq", "anarchon-nats", "anarchon-prometheus", "anarchon-opentelemetry",
                 "anarchon-dashboard", "anarchon-conformance", "anarchon-testkit"}
PYPI = "https://pypi.org/simple"


def _service(name: str, default: str) -> str:
    return os.environ.get(f"ANARCHON_{name}_URL", default)


# Where the README's first job runs for each driver's line: each store as the driver tests reach it,
# with a table, prefix or bucket of its own so that no other test's jobs meet this one.
STORES = {
    "anarchon-postgres": ("PostgreSQL", 5432, _service("POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
                          + "?table=anarchon_readme"),
    "anarchon-redis": ("Redis", 6379, _service("REDIS", "redis://127.0.0.1:6379/0")
                       + "?prefix=anarchon-readme"),
    "anarchon-sqlite": ("SQLite", 0, "sqlite:///jobs.db"),
    "anarchon-nats": ("NATS", 4222, _service("NATS", "nats://127.0.0.1:4222").replace("nats://", "nats-kv://")
                      + "?bucket=anarchon_readme&lease=30s"),
    "anarchon-rabbitmq": ("RabbitMQ", 5672, _service("RABBITMQ", "amqp://guest:guest@127.0.0.1:5672/")
                          + "?prefix=anarchon-readme"),
}

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    """The environment without the checkout (make exports MYPYPATH) or the machine's pip settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MYPYPATH", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    if "PIP_CERT" in os.environ:
        env["PIP_CERT"] = os.environ["PIP_CERT"]
    return env


def _run(args: list[str | Path], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def readme_install_lines() -> list[list[str]]:
    """Each `pip install` line of the README's Install section, as its words (comments left out)."""
    section = (ROOT / "README.md").read_text().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.split("#", 1)[0].strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)
             for line in block.splitlines()]
    lines += re.findall(r"`(pip install [^`]+)`", section)
    return [shlex.split(line) for line in lines if line.startswith("pip install ")]


def readme_first_job() -> str:
    """The README's first Python example."""
    match = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert match, "README.md has no Python example"
    return match.group(1)


class Index:
    """`dist/` as a simple index on a loopback port, recording which files pip fetched."""

    def __init__(self, root: Path) -> None:
        self.fetched: list[str] = []
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                index.fetched.append(self.path)

        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _build_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make dist` into a folder that every pytest-xdist worker of this run shares: built once."""
    shared = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        shared = shared.parent
    root = shared / "release-index"
    root.mkdir(exist_ok=True)
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "simple" / "index.html").exists():
            started = time.monotonic()
            _run(["make", "-s", "dist", f"DIST={root / 'dist'}"], ROOT, timeout=600)
            print(f"make dist: {time.monotonic() - started:.0f} s")
            _run([sys.executable, ROOT / "scripts/dists.py", "index", root / "dist", root / "simple"], ROOT)
    return root


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """`make dist`'s files, served as a PEP 503 index for the module's tests."""
    root = _build_once(tmp_path_factory)
    dist = root / "dist"
    files = sorted(dist.iterdir())
    wheels = {re.sub(r"-[^-]+-py3-none-any\.whl$", "", f.name).replace("_", "-") for f in files
              if f.suffix == ".whl"}
    assert wheels == DISTRIBUTIONS, wheels
    assert len([f for f in files if f.name.endswith(".tar.gz")]) == len(DISTRIBUTIONS), files
    served = Index(root / "simple")
    try:
        yield served
    finally:
        served.close()


def _venv(where: Path) -> Path:
    _run([sys.executable, "-m", "venv", where], where.parent)
    return where


def _pip_env(index: Index) -> dict[str, str]:
    return _env(PIP_INDEX_URL=index.url, PIP_EXTRA_INDEX_URL=PYPI)


def _installed(venv: Path) -> dict[str, str]:
    out = _run([venv / "bin" / "python", "-m", "pip", "list", "--format", "json"], venv)
    return {row["name"].lower().replace("_", "-"): row["version"] for row in json.loads(out)}


def _run_first_job(venv: Path, cwd: Path, url: str) -> str:
    """The README's first job with `DATABASE_URL=url`, until its first run, then SIGTERM; its output."""
    (cwd / "app.py").write_text(readme_first_job())
    proc = subprocess.Popen([venv / "bin" / "python", "app.py"], cwd=cwd, env=_env(DATABASE_URL=url),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        deadline = time.monotonic() + 40
        while not any(line.startswith("sync ") for line in lines):
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
    return output


def test_the_readme_has_a_line_for_every_driver() -> None:
    lines = readme_install_lines()
    assert lines[0] == ["pip", "install", "anarchon-core", "anarchon-postgres"], lines
    named = {word for line in lines for word in line[2:]}
    assert set(STORES) | {"anarchon-core"} <= named, lines


@pytest.mark.parametrize("line", readme_install_lines(), ids=lambda line: " ".join(line[2:]))
def test_a_readme_install_line_in_a_fresh_venv(index: Index, line: list[str], tmp_path: Path) -> None:
    """`pip install ...` exactly as the README says: the anarchon distributions from the local index, the
    rest from PyPI; then the README's first job on the line's store."""
    asked = set(line[2:])
    driver = next((d for d in line[2:] if d in STORES), None)
    if driver and STORES[driver][1]:
        name, port, url = STORES[driver]
        require_service(name, url, port)
    venv = _venv(tmp_path / "venv")
    before = len(index.fetched)
    _run([venv / "bin" / line[0], *line[1:]], tmp_path, env=_pip_env(index))
    fetched = index.fetched[before:]
    installed = {name: v for name, v in _installed(venv).items() if name.startswith("anarchon-")}
    assert set(installed) == asked | {"anarchon-core"}, installed
    assert set(installed.values()) == {VERSION}, installed
    for name in installed:  # each wheel came from the local index, not from another index
        wheel = f"/{name}/{name.replace('-', '_')}-{VERSION}-py3-none-any.whl"
        assert wheel in fetched, (wheel, fetched)
    if driver:
        output = _run_first_job(venv, tmp_path, STORES[driver][2])
        assert re.search(r"^sync \S+ attempt 1$", output, re.M), output


@pytest.fixture(scope="module")
def venv(index: Index, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding every distribution, from the local index."""
    env = _venv(tmp_path_factory.mktemp("everything") / "venv")
    _run([env / "bin" / "pip", "install", *sorted(DISTRIBUTIONS)], env.parent, env=_pip_env(index))
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
    assert _run([venv / "bin" / "anarchon", "--version"], tmp_path).strip() == f"anarchon {VERSION}"


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
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "opentelemetry-sdk==1.45.2"], tmp_path,
         env=_env(PIP_INDEX_URL=PYPI))
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
