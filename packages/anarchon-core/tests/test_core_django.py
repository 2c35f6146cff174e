"""The Django integration, with real Django: settings, AppConfig, `manage.py anarchon status`."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from anarchon import ConfigError
from anarchon.integrations import django as integration

JOBS = '''
import threading
from anarchon import JobContext, every

seen = []

@every("dj-tick", "100ms", jitter=0, catch_up=0)
def tick(ctx: JobContext) -> None:
    seen.append((ctx.slot, threading.current_thread().name))
'''


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder: Path = tmp_path_factory.mktemp("djangoapp")
    (folder / "dj_anarchon_jobs.py").write_text(JOBS)
    sys.path.insert(0, str(folder))
    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["anarchon.integrations.django"],
            ANARCHON={
                "URL": "memory://",
                "OPTIONS": {"namespace": "djtest", "lease": "2s", "heartbeat": "0.5s"},
                "JOBS": ["dj_anarchon_jobs"],
            },
        )
        django.setup()  # runs AnarchonConfig.ready(): not started under pytest ("auto")
    yield
    integration.reset()
    sys.path.remove(str(folder))


def test_the_app_config_is_installed_and_did_not_start_under_pytest(configured: None) -> None:
    from django.apps import apps

    config = apps.get_app_config("anarchon")
    assert type(config).__name__ == "AnarchonConfig"
    assert not integration.get_scheduler().running


def test_settings_build_the_scheduler_and_start_runs_it_in_a_thread(configured: None) -> None:
    import dj_anarchon_jobs  # type: ignore[import-not-found]

    scheduler = integration.get_scheduler()
    assert integration.get_scheduler() is scheduler
    assert scheduler.namespace == "djtest" and list(scheduler.jobs) == ["dj-tick"]
    integration.start()
    try:
        deadline = time.monotonic() + 5
        while len(dj_anarchon_jobs.seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        assert integration.stop(timeout=5)
    assert len(dj_anarchon_jobs.seen) >= 2
    assert all(name != "MainThread" for _, name in dj_anarchon_jobs.seen)

    out = io.StringIO()
    call_command("anarchon", "status", "--json", stdout=out)
    rows = json.loads(out.getvalue())
    assert [r["job"] for r in rows] == ["dj-tick"]
    assert rows[0]["status"] in ("done", "running") and rows[0]["attempt"] == 1
    out = io.StringIO()
    call_command("anarchon", "status", stdout=out)
    assert out.getvalue().split()[:3] == ["JOB", "LAST", "SLOT"] and "dj-tick" in out.getvalue()


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["gunicorn", "myproject.wsgi"], {}, True),
        (["uvicorn", "myproject.asgi:application"], {}, True),
        (["manage.py", "migrate"], {}, False),
        (["manage.py", "anarchon", "run"], {}, False),
        (["manage.py", "runserver"], {}, False),  # the autoreloader's watcher
        (["manage.py", "runserver"], {"RUN_MAIN": "true"}, True),  # its serving child
        (["manage.py", "runserver", "--noreload"], {}, True),
        (["celery", "-A", "proj", "worker"], {}, False),
        (["gunicorn", "myproject.wsgi"], {"PYTEST_CURRENT_TEST": "x"}, False),
    ],
)
def test_autostart_auto(configured: None, argv: list[str], environ: dict[str, str], expected: bool) -> None:
    assert integration.should_autostart(argv, environ) is expected


def test_autostart_setting_wins_and_is_checked(configured: None) -> None:
    with override_settings(ANARCHON={"URL": "memory://", "AUTOSTART": True}):
        assert integration.should_autostart(["manage.py", "migrate"], {})
    with override_settings(ANARCHON={"URL": "memory://", "AUTOSTART": "yes"}), \
            pytest.raises(ConfigError, match="use True, False or 'auto'"):
        integration.should_autostart(["gunicorn"], {})


def test_bad_settings_are_one_clear_error(configured: None) -> None:
    integration.reset()
    try:
        with override_settings(ANARCHON={"URL": "memory://", "JOBZ": []}), \
                pytest.raises(ConfigError, match=r"unknown key.*'JOBZ'"):
            integration.get_scheduler()
        with override_settings(ANARCHON={"URL": "memory://", "JOBS": ["no_such_jobs_module"]}), \
                pytest.raises(CommandError, match="cannot import 'no_such_jobs_module'"):
            call_command("anarchon", "status")
        with override_settings(ANARCHON={"URL": "memory-claim://"}), \
                pytest.raises(CommandError, match="'inspect' capability"):
            call_command("anarchon", "status")
    finally:
        integration.reset()
