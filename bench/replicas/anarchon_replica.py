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


class CallCounts:
    """Backend call counts by name, kept current in one file for the runner to read.

    The file is opened once and rewritten in place (one `pwrite` of the JSON text, space-padded to
    the last length), at most every half second and only after a call, so that a killed replica leaves
    its counts up to its last half second and a replica at rest spends next to nothing on them.
    """

    def __init__(self, path: Path) -> None:
        self.counts: Counter[str] = Counter()
        self.calls = 0
        self._written = -1
        self._length = 0
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.write()

    def add(self, name: str, items: int | None) -> None:
        """Count one call of `name` (a batch of `items`)."""
        self.counts[name] += 1
        if items is not None:
            self.counts[f"{name}_items"] += items
        self.calls += 1

    def write(self) -> None:
        """Write the counts if a call came since the last write."""
        with self._lock:  # the writer thread and the final write at exit
            calls = self.calls
            if calls == self._written:
                return
            data = json.dumps(dict(self.counts)).encode()
            self._length = max(self._length, len(data))
            os.pwrite(self._fd, data.ljust(self._length), 0)
            self._written = calls

    def keep_written(self) -> None:
        """Start the thread that writes the counts every half second."""
        def writer() -> None:
            while True:
                time.sleep(0.5)
                self.write()
        threading.Thread(target=writer, daemon=True).start()


class CountingBackend:
    """Delegates to a backend and counts each store call by name."""

    def __init__(self, url: str, counts: CallCounts) -> None:
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
            add = self._counts.add
            batch = name in ("claim_many", "renew_many", "release_many")

            async def counted(*args: Any, **kwargs: Any) -> Any:
                add(name, len(args[0]) if batch else None)
                return await attr(*args, **kwargs)
            return counted
        return attr

    def __repr__(self) -> str:
        return repr(self._inner)


def main() -> None:
    config: dict[str, Any] = json.loads(sys.argv[1])
    log = StartLog(config["log"], config["scheduler"])
    counts = CallCounts(Path(config["workdir"]) / f"calls-{os.getpid()}.json")
    counts.keep_written()
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
        counts.write()


if __name__ == "__main__":
    main()
