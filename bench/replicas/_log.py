"""The shared start log: one JSON line per handler start, appended with one write() call."""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from typing import Any


class StartLog:
    """Appends start records to the run's shared log (O_APPEND, one write per line)."""

    def __init__(self, path: str, scheduler: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.scheduler = scheduler
        self.pid = os.getpid()
        self.first = True
        self.once = threading.Lock()
        # Each job's start record up to its fire time, JSON-encoded once: a replica at 2,000 jobs a
        # second writes a record per run, and json.dumps of a dict each time (about 4 us against
        # under 1) would count as the scheduler's CPU.
        self.heads: dict[str, str] = {}

    def write(self, record: dict[str, Any]) -> None:
        """Append one record."""
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def start(self, job: str, fire_ms: int, attempt: int | None = None) -> None:
        """Record a handler start for (job, intended fire time in epoch ms); before the first, the
        CPU this process has spent so far (its start-up, to its first run)."""
        if self.first:
            with self.once:  # handlers may start on several threads at once (APScheduler 3's pool)
                first, self.first = self.first, False
            if first:
                usage = resource.getrusage(resource.RUSAGE_SELF)
                self.write({"ev": "first", "s": self.scheduler, "pid": self.pid,
                            "cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
                            "t": time.time_ns() // 1_000_000})
        head = self.heads.get(job)
        if head is None:
            head = self.heads[job] = (f'{{"ev":"start","s":{json.dumps(self.scheduler)},'
                                      f'"job":{json.dumps(job)},"fire":')
        tail = "}\n" if attempt is None else f',"attempt":{int(attempt)}}}\n'
        t = time.time_ns() // 1_000_000
        os.write(self.fd, f'{head}{int(fire_ms)},"pid":{self.pid},"t":{t}{tail}'.encode())

    def ready(self) -> None:
        """Record that this replica finished its set-up."""
        self.write({"ev": "ready", "s": self.scheduler, "pid": self.pid, "t": time.time_ns() // 1_000_000})
