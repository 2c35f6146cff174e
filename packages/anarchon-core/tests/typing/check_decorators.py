"""Checked by mypy --strict (never run): the decorators' options are typed like `scheduler.every`'s."""

from __future__ import annotations

from anarchon import JobContext, MemoryBackend, Scheduler, cron, every


class Service:
    """Jobs on methods."""

    @cron("digest", "0 8 * * 1-5", timezone="Europe/Athens", overlap="skip", max_attempts=2)
    async def digest(self, ctx: JobContext) -> None:
        """Accepted: lease options are typed."""

    @every("sync", "10s", timeout="8s", retry=True)
    def sync(self) -> None:
        """Accepted."""


every("typo", "10s", overlpa="skip")  # type: ignore[call-arg]
every("bad-overlap", "10s", overlap="sometimes")  # type: ignore[arg-type]
cron("bad-attempts", "* * * * *", max_attempts="3")  # type: ignore[arg-type]

scheduler: Scheduler[MemoryBackend] = Scheduler(backend=MemoryBackend()).register(Service())
decorated: int = Service().sync  # type: ignore[assignment]
