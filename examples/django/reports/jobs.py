"""Jobs, declared with anarchon's decorators; settings.ANARCHON["JOBS"] registers this module."""

from django.utils import timezone

from anarchon import JobContext, cron, every


@every("heartbeat", "5s", timeout="4s")
def heartbeat(ctx: JobContext) -> None:
    """A plain function: it runs in a worker thread, so the ORM and other blocking calls are fine."""
    print(f"heartbeat ran: slot={ctx.scheduled_at:%H:%M:%S} at {timezone.now():%H:%M:%S} "
          f"on {ctx.instance_id}", flush=True)


@cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
def digest(ctx: JobContext) -> None:
    """Send the digest once per weekday, whichever process wins the slot."""
    print(f"digest for {ctx.scheduled_at:%Y-%m-%d}, key {ctx.idempotency_key()}", flush=True)
