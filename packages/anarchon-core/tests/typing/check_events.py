"""Checked by mypy --strict and pyright strict in `make test` (never run): `Scheduler.on` is typed.

Each rejected call carries a `type: ignore[...]`; an accepted call that stops type-checking fails.
"""

from __future__ import annotations

from anarchon import Event, MemoryBackend, Scheduler

scheduler = Scheduler(backend=MemoryBackend())


def log_it(event: Event) -> None:
    """A plain listener."""
    print(event.job, event.slot, event.outcome, event.duration_ms)


async def page(event: Event) -> None:
    """A coroutine listener."""


# Accepted: the listener comes back as it was given, or through the decorator.
same = scheduler.on("finished", log_it)
same(Event("finished", "job", 0, "anarchon", "i0"))
scheduler.on("takeover", page)


@scheduler.on("lease_lost")
async def decorated(event: Event) -> None:
    """A decorated listener keeps its type."""


scheduler.off("finished", log_it)

# Rejected: an event that does not exist, and a listener that takes no event.
scheduler.on("finish", log_it)  # type: ignore[call-overload]
scheduler.on("started", lambda: None)  # type: ignore[call-overload]
