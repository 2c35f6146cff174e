"""Settings for the anarchon Django example (not for production: DEBUG is on and the key is public)."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
ROOT_URLCONF = "exampleproject.urls"
WSGI_APPLICATION = "exampleproject.wsgi.application"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "reports",
    "anarchon.integrations.django",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
USE_TZ = True

# Every process that serves requests (each gunicorn worker, runserver's child) is one replica:
# the store picks one runner per slot. `manage.py anarchon run` runs a dedicated process instead.
ANARCHON = {
    "URL": os.environ.get("ANARCHON_URL", f"sqlite:///{BASE_DIR / 'anarchon.db'}"),
    "OPTIONS": {"namespace": "django-example", "lease": "10s", "heartbeat": "2s", "log": True},
    "JOBS": ["reports.jobs"],
    "AUTOSTART": "auto",
}
