"""Start-up: a replica imports only what it runs; the rest of the core is imported on first use.

Each test runs a fresh interpreter and reads `sys.modules`: no timing is asserted here (the CPU a
start-up costs is measured by bench/startup.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

LAZY = ("anarchon._decorators", "anarchon._thread", "anarchon.cli", "anarchon.inspect", "croniter")
"""Modules a replica that registers `every` jobs with `scheduler.every(...)` never needs."""

# Builds and runs a scheduler as a replica does (10 jobs, started and stopped), prints which of LAZY
# it imported, then runs argv[1] and prints which of LAZY are imported after it.
_REPLICA = textwrap.dedent("""
    import asyncio, json, sys
    import anarchon

    lazy = json.loads(sys.argv[2])
    scheduler = anarchon.Scheduler(anarchon.MemoryBackend())

    async def handler() -> None: ...

    for i in range(10):
        scheduler.every(f"j{i}", "1s", handler)

    async def run() -> None:
        async with scheduler:
            await asyncio.sleep(0.05)

    asyncio.run(run())
    print(json.dumps([m for m in lazy if m in sys.modules]))
    exec(sys.argv[1])
    print(json.dumps([m for m in lazy if m in sys.modules]))
""")


def _imported(then: str) -> tuple[list[str], list[str]]:
    """Which of LAZY a replica imported, and which are imported once it has run `then`."""
    env = {k: v for k, v in os.environ.items() if k != "ANARCHON_DISABLE_PLUGIN_AUTOLOAD"}
    done = subprocess.run([sys.executable, "-c", _REPLICA, then, json.dumps(LAZY)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.split("\n")[-3:-1]
    return json.loads(before), json.loads(after)


def test_a_replica_imports_neither_the_decorators_nor_the_thread_runner() -> None:
    before, _ = _imported("pass")
    assert before == []


def test_the_decorators_are_imported_when_used() -> None:
    code = textwrap.dedent("""
        from anarchon import every, MemoryBackend, Scheduler

        class Service:
            @every("tick", "1s")
            async def tick(self) -> None: ...

        assert "tick" in Scheduler(MemoryBackend()).register(Service()).jobs
    """)
    _, after = _imported(code)
    assert after == ["anarchon._decorators"]


def test_the_thread_runner_is_imported_when_a_scheduler_starts_in_a_thread() -> None:
    code = textwrap.dedent("""
        s = anarchon.Scheduler(anarchon.MemoryBackend())
        s.start_in_thread()
        assert s.stop_thread()
    """)
    _, after = _imported(code)
    assert after == ["anarchon._thread"]
