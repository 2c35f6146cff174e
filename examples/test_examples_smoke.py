"""Smoke tests: each example starts as written (in a copy, on a fresh SQLite file), runs a job, stops."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from anarchon.testing import unused_port

HERE = Path(__file__).resolve().parent


class Process:
    """A subprocess whose merged output is collected line by line."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, env={**_env(), **(env or {})})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{self.output}"
            time.sleep(0.05)

    def stop(self, sig: signal.Signals, timeout: float = 10) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._reader.join(2)


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANARCHON_URL", "PYTEST_", "DJANGO_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextmanager
def running(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> Iterator[Process]:
    p = Process(args, cwd, env)
    try:
        yield p
    finally:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def copy(example: str, tmp_path: Path) -> Path:
    target = tmp_path / example
    shutil.copytree(HERE / example, target, ignore=shutil.ignore_patterns("*.db*", "__pycache__"))
    return target


def get_json(url: str, timeout: float = 5) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_worker(tmp_path: Path) -> None:
    cwd = copy("worker", tmp_path)
    with running([sys.executable, "-m", "anarchon.cli", "run", "worker:scheduler"], cwd) as p:
        p.wait_for("tick ran: ")
        assert p.stop(signal.SIGTERM) == 0, p.output
    assert "stopping (signal SIGTERM)" in p.output


def test_fastapi(tmp_path: Path) -> None:
    cwd = copy("fastapi", tmp_path)
    port = unused_port()
    with running([sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)], cwd) as p:
        p.wait_for("refresh-cache ran: ")
        rows = get_json(f"http://127.0.0.1:{port}/jobs")
        assert isinstance(rows, list) and {r["job"] for r in rows} >= {"refresh-cache"}
        home = get_json(f"http://127.0.0.1:{port}/")
        assert isinstance(home, dict) and home["running"] is True
        # uvicorn shuts down gracefully, then re-raises the signal (recent releases) or exits 0.
        assert p.stop(signal.SIGTERM) in (0, -signal.SIGTERM), p.output
    assert "Application shutdown complete" in p.output


def test_fastapi_with_its_store_down_fails_with_one_exception(tmp_path: Path) -> None:
    cwd = copy("fastapi", tmp_path)
    url = f"postgresql://postgres:s3cret@127.0.0.1:{unused_port()}/test"
    with running([sys.executable, "-m", "uvicorn", "app:app", "--port", str(unused_port())], cwd,
                 {"ANARCHON_URL": url}) as p:
        assert p.proc.wait(30) != 0, p.output
        p._reader.join(2)
    out = p.output
    assert out.count("Traceback") == 1 and "direct cause" not in out and "During handling" not in out, out
    errors = [line for line in p.lines if line.startswith("anarchon.BackendUnavailable: ")]
    assert len(errors) == 1 and "is PostgreSQL up and reachable?" in errors[0], out
    assert "s3cret" not in out and "postgres:***@" in errors[0], out
    assert len(p.lines) < 25, out


@pytest.mark.parametrize("command", ["runserver", "anarchon-run"])
def test_django(tmp_path: Path, command: str) -> None:
    cwd = copy("django", tmp_path)
    if command == "runserver":
        port = unused_port()
        args = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    else:
        args = [sys.executable, "manage.py", "anarchon", "run"]
    with running(args, cwd) as p:
        p.wait_for("heartbeat ran: ")
        if command == "runserver":
            rows = get_json(f"http://127.0.0.1:{port}/jobs")
            assert isinstance(rows, list) and "heartbeat" in {r["job"] for r in rows}
            assert p.stop(signal.SIGINT) == 0, p.output
        else:
            assert p.stop(signal.SIGTERM) == 0, p.output
    status = subprocess.run([sys.executable, "manage.py", "anarchon", "status", "--json"], cwd=cwd,
                            capture_output=True, text=True, env=_env(), timeout=30, check=False)
    assert status.returncode == 0, status.stderr
    assert "heartbeat" in {r["job"] for r in json.loads(status.stdout)}
