"""Logging: one line per event whatever prints it, `--log-level` obeyed, each run's end with its
duration, and a failing handler's traceback cut to the user's frames."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import pytest

import anarchon
from anarchon import JobContext, MemoryBackend, Scheduler
from anarchon.testing import VirtualClock

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def anarchon_logger() -> Iterator[logging.Logger]:
    """The `anarchon` logger, its handlers and level restored afterwards (`log=True` changes both)."""
    log = logging.getLogger("anarchon")
    handlers, level = log.handlers[:], log.level
    yield log
    log.handlers[:] = handlers
    log.setLevel(level)


def _once_at(when: float) -> Scheduler[MemoryBackend]:
    scheduler = Scheduler(MemoryBackend(), log=True)
    scheduler.at("once", when, lambda: None, jitter=0)
    return scheduler


def _serve(scheduler: Scheduler[MemoryBackend], seconds: float) -> None:
    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(seconds)

    asyncio.run(main())


@pytest.mark.usefixtures("anarchon_logger")
def test_log_true_prints_each_event_once_with_or_without_the_apps_logging(
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = io.StringIO()
    app_handler = logging.StreamHandler(app)
    app_handler.setFormatter(logging.Formatter("app %(name)s: %(message)s"))
    with mock.patch.object(logging.root, "handlers", []):
        # A script: nothing else prints, so log=True's handler does, on stderr.
        _serve(_once_at(time.time() + 0.1), 0.4)
        alone = capsys.readouterr().err
        # The app set up logging (a root handler): the lines go there only.
        logging.root.addHandler(app_handler)
        _serve(_once_at(time.time() + 0.1), 0.4)
    beside = capsys.readouterr().err
    assert re.search(r"^anarchon: once slot=\S+ won attempt=1 ", alone, re.M), alone
    assert re.search(r"^anarchon: once slot=\S+ done in \d+ ms$", alone, re.M), alone
    assert beside == "", beside
    lines = app.getvalue().splitlines()
    assert [line.split(" slot=")[0] for line in lines] == ["app anarchon: once"] * 2, lines
    assert "won attempt=1" in lines[0] and re.search(r"done in \d+ ms$", lines[1]), lines


def _failing_handlers(scheduler: Scheduler[MemoryBackend], when: float) -> None:
    def helper() -> None:
        raise ValueError("boom")

    def sync_fails() -> None:
        helper()

    async def async_fails(ctx: JobContext) -> None:
        helper()

    scheduler.at("sync-fails", when, sync_fails, jitter=0)
    scheduler.at("async-fails", when, async_fails, jitter=0)


def _tracebacks(level: int) -> dict[str, str]:
    """Each failing job's logged error, formatted by a real handler on a logger at `level`."""
    out = io.StringIO()
    log = logging.getLogger(f"test-tracebacks-{level}")
    log.propagate = False
    log.setLevel(level)
    handler = logging.StreamHandler(out)
    log.addHandler(handler)
    try:
        scheduler = Scheduler(MemoryBackend(), log=log)
        _failing_handlers(scheduler, time.time() + 0.1)
        _serve(scheduler, 0.5)
    finally:
        log.removeHandler(handler)
    blocks = re.split(r"^(?=\S+ slot=)", out.getvalue(), flags=re.M)
    return {b.split()[0]: b for b in blocks if " failed after " in b}


def test_a_failing_handlers_traceback_has_only_the_users_frames() -> None:
    package = os.path.dirname(anarchon.__file__)
    for job, text in _tracebacks(logging.INFO).items():
        frames = re.findall(r'^  File "([^"]+)", line \d+, in (\S+)$', text, re.M)
        assert frames == [(__file__, job.replace("-", "_")), (__file__, "helper")], text
        assert re.match(rf"{job} slot=\S+ attempt=1 failed after \d+ ms: ValueError: boom\n", text), text
        assert text.rstrip().endswith("ValueError: boom"), text
    # At DEBUG the whole traceback is there, the scheduler's frames included.
    whole = _tracebacks(logging.DEBUG)
    assert set(whole) == {"sync-fails", "async-fails"}
    for text in whole.values():
        assert f'File "{package}{os.sep}_runs.py"' in text, text


# -- through the CLI, as the quick start runs it ----------------------------------------------------


def _quickstart(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "quickstart.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    (tmp_path / "jobs.py").write_text(next(b for b in blocks if "scheduler =" in b))


def _run_until(tmp_path: Path, args: list[str], pattern: str) -> list[str]:
    """`anarchon run jobs:scheduler ARGS` until a line matches `pattern`, then SIGTERM; every line."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "anarchon.cli", "run", "jobs:scheduler", *args]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        deadline = time.monotonic() + 30
        while not any(re.search(pattern, line) for line in lines):
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
    return output.splitlines()


def test_the_quick_start_through_the_cli_logs_each_event_once(tmp_path: Path) -> None:
    _quickstart(tmp_path)
    lines = _run_until(tmp_path, [], r"^anarchon: tick slot=\S+ done in \d+ ms$")
    logged = [line for line in lines if line.startswith("anarchon: ")]
    assert logged and all(n == 1 for n in Counter(logged).values()), lines
    ticks = [line for line in lines if line.startswith("tick ")]
    won = [line for line in logged if re.match(r"anarchon: tick slot=\S+ won attempt=1 ", line)]
    done = [line for line in logged if re.match(r"anarchon: tick slot=\S+ done in \d+ ms$", line)]
    # (A slot won as the stop begins is handed back unrun: one more won line than ticks at most.)
    assert ticks and len(ticks) <= len(won) <= len(ticks) + 1 and len(done) >= 1, lines
    assert any(re.search(r"stopping \(signal SIG(INT|TERM)\): .* a second signal exits at once$", line)
               for line in logged), lines


def test_log_level_warning_silences_the_info_lines(tmp_path: Path) -> None:
    _quickstart(tmp_path)
    lines = _run_until(tmp_path, ["--log-level", "WARNING"], r"^tick ")
    assert [line for line in lines if line.startswith("anarchon")] == [], lines


# -- structured fields --------------------------------------------------------------------------------

_FIELDS = ("job", "slot", "attempt", "instance", "outcome")


class _JsonLines(logging.Formatter):
    """A JSON formatter that knows nothing of anarchon's text: it reads the record's attributes."""

    def format(self, record: logging.LogRecord) -> str:
        found = {k: getattr(record, k) for k in _FIELDS if hasattr(record, k)}
        return json.dumps({"message": record.getMessage(), **found})


def test_run_lines_carry_job_slot_attempt_instance_and_outcome_as_record_fields() -> None:
    clock = VirtualClock(datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC))
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(_JsonLines())
    log = logging.getLogger("test-structured-fields")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock, instance_id="i1", log=log,
                          stop_timeout="1s")
    slot = clock.now_ms() + 10_000

    async def bad() -> None:  # async: a worker thread would end in real, not virtual, time
        raise ValueError("boom")

    async def long(ctx: JobContext) -> None:
        await asyncio.sleep(60)  # ignores its signal: cancelled after stop_timeout, handed over

    scheduler.at("ok", slot / 1000, lambda: None, jitter=0)
    scheduler.at("bad", slot / 1000, bad, jitter=0)
    scheduler.at("long", slot / 1000, long, jitter=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(15)

    try:
        clock.run(main())
    finally:
        log.removeHandler(handler)
    records = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    by = {(r.get("job"), r.get("outcome")): {k: r[k] for k in _FIELDS if k in r} for r in records}
    for job, outcome in [("ok", "won"), ("ok", "done"), ("bad", "won"), ("bad", "failed"), ("long", "won"),
                         ("long", "handover")]:
        assert by.get((job, outcome)) == {"job": job, "slot": slot, "attempt": 1, "instance": "i1",
                                          "outcome": outcome}, records
    assert not [r for r in records if "slot=" in r["message"] and "job" not in r], records


def test_a_handlers_logger_is_named_for_its_job_and_made_only_when_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A logger made per job stays for the life of the process: only a handler that uses `ctx.logger`
    # gets one.
    clock = VirtualClock(datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC))
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock)
    quiet, chatty = f"quiet-{os.getpid()}", f"chatty-{os.getpid()}"
    ran: list[str] = []

    async def silent(ctx: JobContext) -> None:
        ran.append(ctx.name)

    async def talks(ctx: JobContext) -> None:
        ran.append(ctx.name)
        ctx.logger.warning("from %s", ctx.name)

    scheduler.every(quiet, "1s", silent)
    scheduler.every(chatty, "1s", talks)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(3.5)

    with caplog.at_level(logging.WARNING):
        clock.run(main())
    assert ran.count(quiet) >= 3 and ran.count(chatty) >= 3
    loggers = logging.Logger.manager.loggerDict
    assert f"anarchon.job.{quiet}" not in loggers
    assert f"anarchon.job.{chatty}" in loggers
    said = [r for r in caplog.records if r.getMessage() == f"from {chatty}"]
    assert len(said) == ran.count(chatty)
    assert {r.name for r in said} == {f"anarchon.job.{chatty}"}
