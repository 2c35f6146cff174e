"""The sibling connection: can the lease keeper's thread open the scheduler's store a second time?"""

from __future__ import annotations

from typing import Any

from ._clock import Clock, SystemClock
from ._plugins import backend_for_url, url_of

__all__ = ["second_backend"]


def second_backend(backend: object, clock: Clock) -> tuple[Any, str]:
    """A second, unopened backend on `backend`'s store for the lease keeper's thread and where it came
    from, or None and why not.

    The backend's own `sibling()` is asked first (it knows what it shares, e.g. an in-process store);
    then a backend made from a URL is made again from that URL.
    """
    if not isinstance(clock, SystemClock):
        return None, "the scheduler runs on an injected clock, which a second event loop cannot follow"
    make = getattr(backend, "sibling", None)
    try:
        if callable(make):
            second = make()
            if second is None:
                return None, ("it was given a client object that it does not own, so it cannot open a "
                              "second connection")
            return second, "its sibling()"
        url = url_of(backend)
        if url is not None:
            return backend_for_url(url), "the URL it was built from"
    except Exception as exc:
        return None, f"making a second backend failed: {exc}"
    return None, (f"{type(backend).__name__} has no sibling() to open a second connection with, "
                  "and was not made from a URL")
