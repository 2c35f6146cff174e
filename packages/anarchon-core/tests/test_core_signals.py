"""`Scheduler.run()`'s signals, in a real process: a second SIGINT ends the process at once, even while a
handler blocks the event loop (the stubborn handler the second signal is for)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import time
    from anarchon import JobContext, MemoryBackend, Scheduler

    s = Scheduler(MemoryBackend(), instance_id="i0", lease="6s", heartbeat="1s", stop_timeout="1s")

    @s.every("stuck", "1s")
    async def stuck(ctx: JobContext) -> None:
        print("blocking", flush=True)
        time.sleep(20)  # blocks the event loop

    s.run()
''')


def test_a_second_sigint_exits_at_once_while_a_handler_blocks_the_loop(tmp_path: Path) -> None:
    script = tmp_path / "blocked.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "blocking"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        began = time.monotonic()
        code = proc.wait(timeout=10)
        assert time.monotonic() - began < 5 and code == 128 + signal.SIGINT, code
        assert proc.stderr is not None and "second SIGINT: exiting now" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
