"""`make demo`: three processes of app.py on one SQLite file, a graceful stop, then a kill -9.

1. Start three processes of app.py in a fresh directory (they share its jobs.db).
2. Wait for a `report` run, and stop its winner with SIGINT: another process runs the same slot as
   attempt 2 (a graceful handover). Start the stopped process again.
3. Wait for the next `report` slot, and `kill -9` its winner: once its lease (6 s) runs out, another
   process runs that slot as attempt 2 (recovery after a crash).
4. Print a timeline and a verdict; exit 1 if the handover or the takeover did not happen.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

APP = Path(__file__).resolve().with_name("app.py")
LEASE_S, REPORT_EVERY_S = 6.0, 30  # as in app.py
HANDLER = re.compile(
    r"\[handler\] (?P<job>\w+) slot=(?P<slot>\d+) attempt=(?P<attempt>\d+) pid=(?P<pid>\d+)$"
)


@dataclass(frozen=True)
class Start:
    """A handler's first line: which job, slot and attempt started in which process, and when."""

    job: str
    slot: int
    attempt: int
    pid: int
    t: float


class Demo:
    """Starts, stops and kills app.py processes, echoes their lines, and records handler starts."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.starts: list[Start] = []
        self.timeline: list[tuple[float, str]] = []
        self.changed = threading.Condition()
        self.t0 = time.monotonic()

    def say(self, text: str, *, mark: bool = True) -> None:
        elapsed = time.monotonic() - self.t0
        if mark:
            self.timeline.append((elapsed, text))
        with self.changed:
            print(f"[demo +{elapsed:5.1f}s] {text}", flush=True)

    def spawn(self) -> int:
        proc = subprocess.Popen(
            [sys.executable, str(APP)], cwd=self.workdir, text=True, bufsize=1,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # a Ctrl-C in the terminal reaches the demo, which stops them in order
        )
        self.procs[proc.pid] = proc
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()
        return proc.pid

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            with self.changed:
                print(f"  pid {proc.pid:<7}| {line}", flush=True)
                found = HANDLER.search(line)
                if found:
                    self.starts.append(Start(found["job"], int(found["slot"]), int(found["attempt"]),
                                             int(found["pid"]), time.monotonic()))
                    self.changed.notify_all()

    def wait_start(self, predicate: Callable[[Start], bool], timeout: float) -> Start | None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for start in self.starts:
                    if predicate(start):
                        return start
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.changed.wait(left)

    def stop(self, pid: int, sig: int = signal.SIGINT) -> None:
        proc = self.procs[pid]
        if proc.poll() is None:
            proc.send_signal(sig)

    def stop_all(self) -> None:
        for pid in self.procs:
            self.stop(pid)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def report_start(slot: int | None = None, attempt: int = 1, *, after: int | None = None,
                 not_pid: int | None = None) -> Callable[[Start], bool]:
    def match(s: Start) -> bool:
        return (s.job == "report" and s.attempt == attempt and (slot is None or s.slot == slot)
                and (after is None or s.slot > after) and s.pid != not_pid)
    return match


def run(demo: Demo) -> tuple[bool, bool, list[str]]:
    findings: list[str] = []
    # A report slot every 30 s: start the processes just after a boundary, so the first report runs
    # at once (catch-up) and the handover is over well before the next slot.
    phase = time.time() % REPORT_EVERY_S
    if phase > 4:
        wait = REPORT_EVERY_S - phase + 0.3
        demo.say(f"waiting {wait:.0f} s for the next 30-second boundary, so that the report slots line up",
                 mark=False)
        time.sleep(wait)
    pids = [demo.spawn() for _ in range(3)]
    demo.say(f"started 3 processes of app.py on one SQLite file: pids {', '.join(map(str, pids))}")

    first = demo.wait_start(report_start(), timeout=40)
    if first is None:
        return False, False, ["no report run started within 40 s"]
    demo.say(f"report slot={first.slot} attempt=1 runs in pid {first.pid}")
    time.sleep(3)
    demo.say(f"SIGINT to pid {first.pid} (a graceful stop, as from Ctrl-C or a deploy)")
    stopped_at = time.monotonic()
    demo.stop(first.pid)
    handed = demo.wait_start(report_start(first.slot, 2, not_pid=first.pid), timeout=15)
    handover_ok = handed is not None
    if handed is not None:
        demo.say(f"report slot={first.slot} attempt=2 runs in pid {handed.pid}, "
                 f"{handed.t - stopped_at:.1f} s after the SIGINT (graceful handover)")
        findings.append(f"handover: attempt 2 of slot {first.slot} in pid {handed.pid}, "
                        f"{handed.t - stopped_at:.1f} s after SIGINT to pid {first.pid}")
    else:
        findings.append(f"handover: no attempt 2 of slot {first.slot} within 15 s of the SIGINT")
    try:
        demo.procs[first.pid].wait(15)
    except subprocess.TimeoutExpired:
        findings.append(f"pid {first.pid} did not exit within 15 s of SIGINT")
    restarted = demo.spawn()
    demo.say(f"pid {first.pid} exited; started it again as pid {restarted}")

    nxt = demo.wait_start(report_start(after=first.slot), timeout=40)
    if nxt is None:
        return handover_ok, False, [*findings, "no next report slot started within 40 s"]
    demo.say(f"report slot={nxt.slot} attempt=1 runs in pid {nxt.pid} (a new slot starts at attempt 1)")
    time.sleep(2)
    demo.say(f"kill -9 pid {nxt.pid} (a crash: it releases nothing)")
    killed_at = time.monotonic()
    demo.stop(nxt.pid, signal.SIGKILL)
    taken = demo.wait_start(report_start(nxt.slot, 2, not_pid=nxt.pid), timeout=LEASE_S + 10)
    takeover_ok = taken is not None
    if taken is not None:
        demo.say(f"report slot={nxt.slot} attempt=2 runs in pid {taken.pid}, {taken.t - killed_at:.1f} s "
                 f"after the kill (the lease is {LEASE_S:.0f} s)")
        findings.append(f"takeover: attempt 2 of slot {nxt.slot} in pid {taken.pid}, "
                        f"{taken.t - killed_at:.1f} s after kill -9 of pid {nxt.pid}")
    else:
        findings.append(f"takeover: no attempt 2 of slot {nxt.slot} within {LEASE_S + 10:.0f} s of kill -9")
    return handover_ok, takeover_ok, findings


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="anarchon-demo-") as tmp:
        demo = Demo(Path(tmp))
        try:
            handover_ok, takeover_ok, findings = run(demo)
        except KeyboardInterrupt:
            demo.say("interrupted", mark=False)
            demo.stop_all()
            return 130
        demo.say("stopping every process (SIGINT)", mark=False)
        demo.stop_all()

    doubles = [k for k, n in Counter((s.job, s.slot, s.attempt) for s in demo.starts).items() if n > 1]
    print("\nTimeline")
    for elapsed, text in demo.timeline:
        print(f"  +{elapsed:5.1f}s  {text}")
    print("\nWhat happened")
    for finding in findings:
        print(f"  - {finding}")
    slots = Counter(s.job for s in demo.starts if s.attempt == 1)
    print(f"  - one winner per (job, slot, attempt): "
          f"{'yes' if not doubles else f'NO, duplicates: {doubles}'} "
          f"({slots['sync']} sync and {slots['report']} report slots started)")
    ok = handover_ok and takeover_ok and not doubles
    print(f"\nVerdict: {'PASS' if ok else 'FAIL'}: graceful handover {'yes' if handover_ok else 'NO'}, "
          f"recovery after kill -9 {'yes' if takeover_ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
