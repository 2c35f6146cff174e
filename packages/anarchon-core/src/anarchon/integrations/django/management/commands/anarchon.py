"""`python manage.py anarchon run|status`."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..... import _errors
from .....cli import format_status, read_status
from ... import get_scheduler


class Command(BaseCommand):
    """Run the scheduler in the foreground, or print the stored state of every job."""

    help = "Run the anarchon scheduler from settings.ANARCHON (run), or print its jobs' state (status)."

    def add_arguments(self, parser: CommandParser) -> None:
        """`run` and `status [--json]`."""
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("run", help="run the scheduler until SIGINT or SIGTERM, then stop gracefully")
        status = sub.add_parser("status", help="print each job's last slot, attempt, status and holder")
        status.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch to the action."""
        try:
            scheduler = get_scheduler()
            if options["action"] == "run":
                if scheduler.running:
                    raise CommandError(
                        "the scheduler already runs in this process (settings.ANARCHON['AUTOSTART'] is "
                        "True): set it to False or 'auto' to run it with `manage.py anarchon run`"
                    )
                url = scheduler.backend.url
                self.stdout.write(f"anarchon: running {len(scheduler.jobs)} job(s) on {url}")
                scheduler.run()
                return
            states = asyncio.run(read_status(scheduler.backend, scheduler.namespace))
            self.stdout.write(format_status(states, as_json=options["json"]))
        except _errors.AnarchonError as exc:
            raise CommandError(str(exc)) from exc
