"""WSGI entry point: `gunicorn exampleproject.wsgi` (each worker is one replica; no --preload)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exampleproject.settings")
application = get_wsgi_application()
