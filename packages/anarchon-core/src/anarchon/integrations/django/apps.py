"""The Django app: add "anarchon.integrations.django" to INSTALLED_APPS."""

from __future__ import annotations

from django.apps import AppConfig


class AnarchonConfig(AppConfig):
    """Starts the scheduler from settings.ANARCHON in a daemon thread when the process serves requests."""

    name = "anarchon.integrations.django"
    label = "anarchon"
    verbose_name = "anarchon"

    def ready(self) -> None:
        """Start in server processes (see `anarchon.integrations.django.should_autostart`)."""
        from . import should_autostart, start

        if should_autostart():
            start()
