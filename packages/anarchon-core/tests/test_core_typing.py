"""Both type checkers reject a lease option on a claim-only scheduler, and their errors name the option.

The typing files under tests/typing prove *that* calls are rejected (mypy and pyright both fail on an
unneeded `type: ignore`); this test reads the messages a user sees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

USER_CODE = '''\
from anarchon import JobContext, MemoryClaimBackend, Scheduler


async def handler(ctx: JobContext) -> None:
    """A handler."""


scheduler = Scheduler(MemoryClaimBackend.from_url("memory-claim://"))
scheduler.every("sync", "10s", handler, overlap="allow")
scheduler.cron("digest", "0 8 * * 1-5", handler, max_attempts=2)
Scheduler(MemoryClaimBackend.from_url("memory-claim://"), lease="30s")
'''
EXPECTED = {9: "overlap", 10: "max_attempts", 11: "lease"}


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "user_app.py"
    path.write_text(USER_CODE)
    return path


def _run(args: list[str], cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, f"{args[0]} accepted lease options on a claim-only scheduler:\n{done.stdout}"
    return done.stdout


def test_mypy_names_the_lease_option(user_file: Path) -> None:
    out = _run([str(BIN / "mypy"), "--strict", "--no-incremental", str(user_file)], user_file.parent)
    errors = {int(line.split(":")[1]): line for line in out.splitlines() if ": error:" in line}
    assert sorted(errors) == sorted(EXPECTED), out
    for line, option in EXPECTED.items():
        assert f'Argument "{option}"' in errors[line] and "NeedsLeaseBackend" in errors[line], out


def test_pyright_names_the_lease_option(user_file: Path) -> None:
    out = _run([str(BIN / "pyright"), "--outputjson", "--pythonpath", sys.executable, str(user_file)],
               user_file.parent)
    diagnostics = json.loads(out)["generalDiagnostics"]
    named = {d["range"]["start"]["line"] + 1: d["message"] for d in diagnostics
             if d.get("rule") == "reportArgumentType"}
    assert sorted(named) == sorted(EXPECTED), diagnostics
    for line, option in EXPECTED.items():
        assert f'parameter "{option}"' in named[line] and "NeedsLeaseBackend" in named[line], diagnostics
