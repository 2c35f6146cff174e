"""Django: settings-driven setup, an AppConfig that starts the scheduler in a thread, `manage.py anarchon`.

    # settings.py
    INSTALLED_APPS = [..., "anarchon.integrations.django"]
    ANARCHON = {
        "URL": "sqlite:///anarchon.db",           # or "SCHEDULER": "myproject.jobs:scheduler"
        "OPTIONS": {"namespace": "myproject", "lease": "30s", "heartbeat": "5s"},
        "JOBS": ["reports.jobs", "billing.services:billing"],   # modules or objects to register()
        "AUTOSTART": "auto",                      # True, False or "auto" (the default)
    }

    # reports/jobs.py
    from anarchon import JobContext, cron

    @cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
    def digest(ctx: JobContext) -> None: ...     # plain functions run in a worker thread, so the ORM works

`AUTOSTART="auto"` starts the scheduler in a daemon thread (`start_in_thread`) in web server processes
(gunicorn, uvicorn, mod_wsgi, ...) and in `manage.py runserver` (its serving child only), and not in other
management commands, Celery workers or pytest. It stops gracefully at interpreter exit.
`python manage.py anarchon run` runs it in the foreground instead (set `AUTOSTART: False`), and
`python manage.py anarchon status [--json]` prints the stored state of every job.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..._errors import ConfigError
from ..._scheduler import Scheduler

__all__ = ["get_scheduler", "reset", "should_autostart", "start", "stop"]

_lock = threading.RLock()
_scheduler: Scheduler[Any] | None = None
_KEYS = frozenset({"URL", "SCHEDULER", "OPTIONS", "JOBS", "AUTOSTART"})
_NOT_SERVERS = frozenset({"celery", "pytest", "py.test"})


def _config() -> Mapping[str, Any]:
    from django.conf import settings

    config = getattr(settings, "ANARCHON", None)
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"settings.ANARCHON is {config!r}: set it to a dict, e.g. "
            "ANARCHON = {'URL': 'sqlite:///anarchon.db', 'JOBS': ['myapp.jobs']}"
        )
    unknown = set(config) - _KEYS
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(map(repr, sorted(unknown)))} in settings.ANARCHON: "
            f"valid keys are {', '.join(sorted(_KEYS))}"
        )
    return config


def _import(path: str) -> Any:
    """`pkg.module` or `pkg.module:attribute`."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} (from settings.ANARCHON): {exc}") from exc
    if not attr:
        return module
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"module {module_name!r} has no attribute {attr!r} (from settings.ANARCHON)"
        ) from None


def get_scheduler() -> Scheduler[Any]:
    """The process's scheduler, built from `settings.ANARCHON` on first use."""
    global _scheduler
    with _lock:
        if _scheduler is not None:
            return _scheduler
        config = _config()
        options = config.get("OPTIONS", {})
        if "SCHEDULER" in config:
            if "URL" in config or options:
                raise ConfigError("settings.ANARCHON: give either SCHEDULER, or URL with OPTIONS, not both")
            scheduler = _import(config["SCHEDULER"])
            if not isinstance(scheduler, Scheduler):
                raise ConfigError(
                    f"settings.ANARCHON['SCHEDULER'] = {config['SCHEDULER']!r} is {scheduler!r}, "
                    "not an anarchon.Scheduler"
                )
        elif "URL" in config:
            scheduler = Scheduler.from_url(config["URL"], **options)
        else:
            raise ConfigError(
                "settings.ANARCHON needs 'URL' (e.g. 'sqlite:///anarchon.db') or 'SCHEDULER' "
                "(e.g. 'myproject.jobs:scheduler')"
            )
        jobs = config.get("JOBS", [])
        if isinstance(jobs, str) or not isinstance(jobs, Sequence):
            raise ConfigError(f"settings.ANARCHON['JOBS'] = {jobs!r}: use a list, e.g. ['myapp.jobs']")
        for path in jobs:
            scheduler.register(_import(path))
        _scheduler = scheduler
        return scheduler


def should_autostart(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the AppConfig starts the scheduler in this process (see the module docstring)."""
    setting = _config().get("AUTOSTART", "auto")
    if setting is True or setting is False:
        return setting
    if setting != "auto":
        raise ConfigError(f"settings.ANARCHON['AUTOSTART'] = {setting!r}: use True, False or 'auto'")
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    prog = os.path.basename(argv[0]) if argv else ""
    if prog in ("manage.py", "django-admin", "django-admin.py", "__main__.py"):
        if len(argv) > 1 and argv[1] == "runserver":
            # runserver's autoreloader runs a watcher parent and a serving child (RUN_MAIN=true).
            return "--noreload" in argv or environ.get("RUN_MAIN") == "true"
        return False
    return prog not in _NOT_SERVERS and "PYTEST_CURRENT_TEST" not in environ


def start() -> Scheduler[Any]:
    """Start the scheduler in a daemon thread (once per process) and stop it at interpreter exit."""
    with _lock:
        scheduler = get_scheduler()
        if not scheduler.running:
            scheduler.start_in_thread()
            atexit.register(stop)
        return scheduler


def stop(timeout: float | None = None) -> bool:
    """Stop the thread started by `start()`, gracefully."""
    with _lock:
        if _scheduler is None:
            return True
        return _scheduler.stop_thread(timeout)


def reset() -> None:
    """Forget the process's scheduler (for tests that change settings.ANARCHON); stops it first."""
    global _scheduler
    with _lock:
        stop()
        _scheduler = None
