"""One view: the store's record of every job."""

import asyncio

from django.http import HttpRequest, JsonResponse
from django.urls import path

from anarchon.cli import read_status
from anarchon.integrations.django import get_scheduler


def jobs(request: HttpRequest) -> JsonResponse:
    """GET /jobs: last slot, attempt, status and holder of each job, read from the store."""
    scheduler = get_scheduler()
    backend = type(scheduler.backend).from_url(scheduler.backend.url)  # a connection of this request's own
    states = asyncio.run(read_status(backend, scheduler.namespace))
    rows = [{"job": s.job, "slot": s.slot, "attempt": s.attempt, "status": s.status, "holder": s.owner}
            for s in states]
    return JsonResponse(rows, safe=False)


urlpatterns = [path("jobs", jobs)]
