"""A real Prometheus (Debian's `prometheus`) scrapes a process after a real missed slot on SQLite: the
missed-slots counter and the last-success gauge arrive, and the alert rules in docs/operations.md load
(promtool checks them) and fire."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, start_http_server

import anarchon
from anarchon import JobContext, Scheduler
from anarchon.testing import unused_port
from anarchon_prometheus import Metrics

DOCS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
RULES_MARK = "<!-- alert-rules:"


def binary(name: str) -> str:
    """The path of Debian's `name`; skip without it (fail under ANARCHON_REQUIRE_SERVICES=1)."""
    found = shutil.which(name)
    if found is None:
        reason = f"no {name} on PATH (apt-get install prometheus)"
        if os.environ.get("ANARCHON_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason}; ANARCHON_REQUIRE_SERVICES=1 forbids skipping", pytrace=False)
        pytest.skip(reason)
    return found


def alert_rules() -> str:
    """The YAML rules block that follows the alert-rules mark in docs/operations.md."""
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(re.escape(RULES_MARK) + r".*?\n```yaml\n(.*?)```", text, re.S)
    assert found, f"no ```yaml block after {RULES_MARK!r} in {DOCS}"
    return found.group(1)


def test_the_documented_alert_rules_pass_promtool(tmp_path: Path) -> None:
    promtool = binary("promtool")
    rules = tmp_path / "anarchon.rules.yml"
    rules.write_text(alert_rules())
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 2 rules found" in done.stdout


@pytest.fixture
def registry() -> Iterator[tuple[CollectorRegistry, int]]:
    """A registry fed by a `Metrics` plugin of its own, served over HTTP on a free port."""
    registry = CollectorRegistry()
    mine = Metrics(registry)
    anarchon.plugin_manager().register(mine, name=f"test-prometheus-{uuid.uuid4().hex[:6]}")
    port = unused_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield registry, port
    finally:
        anarchon.plugin_manager().unregister(mine)
        server.shutdown()
        thread.join(5)


@pytest.fixture
def prometheus(tmp_path: Path, registry: tuple[CollectorRegistry, int]) -> Iterator[str]:
    """A Prometheus server that scrapes the registry every 500 ms and evaluates the docs' rules as often;
    its base URL."""
    exe = binary("prometheus")
    (tmp_path / "anarchon.rules.yml").write_text(alert_rules())
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 500ms\n  evaluation_interval: 500ms\n"
        "rule_files: [anarchon.rules.yml]\n"
        "scrape_configs:\n  - job_name: app\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{registry[1]}']\n")
    port = unused_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen([exe, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "Prometheus did not become ready in 30 s"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    """The instant vector `expr` evaluates to now."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as reply:
        body = json.loads(reply.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def wait_for(base: str, expr: str, within_s: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + within_s
    while True:
        found = query(base, expr)
        if found:
            return found
        assert time.monotonic() < deadline, f"{expr!r} gave nothing within {within_s} s"
        time.sleep(0.3)


def test_a_real_scrape_after_a_real_missed_slot(tmp_path: Path, prometheus: str) -> None:
    namespace = f"prom-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path}/jobs.db"
    ran: dict[str, asyncio.Event] = {}
    counts: dict[str, int] = {}

    def make(instance: str) -> Scheduler[Any]:
        ran[instance] = asyncio.Event()
        scheduler = Scheduler.from_url(url, namespace=namespace, instance_id=instance, lease="2s",
                                       heartbeat="500ms")

        @scheduler.every("tick", "1s", catch_up=0)
        async def tick(ctx: JobContext) -> None:
            counts[instance] = counts.get(instance, 0) + 1
            if counts[instance] >= (2 if instance == "first" else 1):
                ran[instance].set()

        return scheduler

    async def main() -> None:
        first = make("first")
        async with first:
            await asyncio.wait_for(ran["first"].wait(), 20)
        await asyncio.sleep(3.5)  # no replica: three or four slots go by unclaimed
        second = make("second")
        async with second:
            await asyncio.wait_for(ran["second"].wait(), 20)
            await asyncio.sleep(1.5)  # scraped while it runs

    started = time.time()
    asyncio.run(main())
    missed = wait_for(prometheus, f'anarchon_slots_missed_total{{namespace="{namespace}"}}')
    assert len(missed) == 1 and missed[0]["metric"]["job_name"] == "tick"
    assert 3 <= float(missed[0]["value"][1]) <= 5, missed
    success = wait_for(prometheus, f'anarchon_last_success_timestamp_seconds{{namespace="{namespace}"}}')
    assert started <= float(success[0]["value"][1]) <= time.time(), success
    alerts = wait_for(prometheus, f'ALERTS{{alertname="AnarchonSlotsMissed",namespace="{namespace}"}}')
    assert alerts[0]["metric"]["job_name"] == "tick" and alerts[0]["metric"]["alertstate"] == "firing"
