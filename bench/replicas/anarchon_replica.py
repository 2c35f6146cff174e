"""One anarchon replica for the benchmark (runs in the repository's .venv).

Usage: python anarchon_replica.py CONFIG_JSON. Registers `jobs` jobs, each every `interval` s (default
1 s), and counts every backend call (a store round trip for the drivers here) in `<workdir>/calls-<pid>.json`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _log import StartLog

from anarchon import Capability, JobContext, Scheduler, backend_for_url

_COUNTED = ("claim", "claim_many", "renew", "renew_many", "release", "release_many", "inspect", "jobs",
            "controls", "set_control", "record_runs", "publish_catalogue")


class CountingBackend:
    """Delegates to a backend and counts each store call by name."""

    def __init__(self, url: str, counts: Counter[str]) -> None:
        self._url = url
        self._inner = backend_for_url(url)
        self._counts = counts
        self.capabilities = self._inner.capabilities
        self.url_schemes = self._inner.url_schemes

    def sibling(self) -> CountingBackend:
        """A second connection for the lease keeper's thread, its calls counted with this one's."""
        return CountingBackend(self._url, self._counts)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name in _COUNTED and callable(attr):
            counts = self._counts

            async def counted(*args: Any, **kwargs: Any) -> Any:
                counts[name] += 1
                if name in ("claim_many", "renew_many", "release_many"):
                    counts[f"{name}_items"] += len(args[0])
                return await attr(*args, **kwargs)
            return counted
        return attr

    def __repr__(self) -> str:
        return repr(self._inner)


def main() -> None:
    config: dict[str, Any] = json.loads(sys.argv[1])
    log = StartLog(config["log"], config["scheduler"])
    counts: Counter[str] = Counter()
    out = Path(config["workdir"]) / f"calls-{os.getpid()}.json"

    dumping = threading.Lock()

    def dump() -> None:
        # The dumper thread and the final dump at exit share the temporary file.
        with dumping:
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(dict(counts)))
            tmp.replace(out)

    def dumper() -> None:
        while True:
            time.sleep(0.5)
            dump()

    threading.Thread(target=dumper, daemon=True).start()
    backend = CountingBackend(config["url"], counts)
    settings: dict[str, Any] = {"namespace": config["namespace"], "stop_timeout": "2s"}
    if Capability.LEASE in backend.capabilities and "lease" in config:
        settings.update(lease=config["lease"], heartbeat=config["heartbeat"])
    scheduler: Scheduler[Any] = Scheduler(backend, **settings)
    sleep = float(config["sleep"])

    async def handler(ctx: JobContext) -> None:
        log.start(ctx.name, ctx.slot, ctx.attempt)
        if sleep:
            await asyncio.sleep(sleep)

    options: dict[str, Any] = {"catch_up": 0} if scheduler.leases else {}
    every = f"{round(float(config.get('interval', 1.0)) * 1000)}ms"
    for i in range(int(config["jobs"])):
        scheduler.every(f"j{i}", every, handler, **options)
    log.ready()
    try:
        scheduler.run()
    finally:
        dump()


if __name__ == "__main__":
    main()
