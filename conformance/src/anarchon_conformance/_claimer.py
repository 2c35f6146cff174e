"""A claimer in a process of its own, whose wall clock is moved: the clock tests start two or more.

`python _claimer.py FACTORY_FILE OFFSET_S MODE` (run as a script, so that nothing reads the clock
before it is moved) loads the backend factory the parent pickled (cloudpickle), builds and opens one
backend, and says `ready` with its own clock. Then it answers calls: one line on stdin per call,
`base64(pickle((method, args)))`, and one line on stdout per answer, `@anarchon base64(pickle((kind,
value)))`, kind `ok` or `error`. Any other output line (a driver's print) is not an answer.

MODE `faketime`: the parent started the process under libfaketime (`LD_PRELOAD`, `FAKETIME`), so
every clock call of the process, its C libraries' included, is moved. MODE `python`: this script
moves Python's wall clock functions itself (`time.time`, `time.time_ns`, `time.clock_gettime` and
`time.clock_gettime_ns` for `CLOCK_REALTIME`, `datetime.datetime.now`, `utcnow` and `today`), for a
store whose clock is the host's (SQLite) or where libfaketime is not installed.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import pickle
import sys
import time
from typing import Any

__all__ = ["main"]

PREFIX = b"@anarchon "


def _shift_python_clock(offset_s: float) -> None:
    """Move Python's wall clock functions by `offset_s` (the monotonic clock stays)."""
    offset_ns = int(offset_s * 1_000_000_000)
    delta = datetime.timedelta(seconds=offset_s)
    real_time, real_time_ns = time.time, time.time_ns
    real_gettime, real_gettime_ns = time.clock_gettime, time.clock_gettime_ns

    def clock_gettime(clock: int) -> float:
        return real_gettime(clock) + (offset_s if clock == time.CLOCK_REALTIME else 0.0)

    def clock_gettime_ns(clock: int) -> int:
        return real_gettime_ns(clock) + (offset_ns if clock == time.CLOCK_REALTIME else 0)

    time.time = lambda: real_time() + offset_s
    time.time_ns = lambda: real_time_ns() + offset_ns
    time.clock_gettime = clock_gettime
    time.clock_gettime_ns = clock_gettime_ns
    real_datetime = datetime.datetime

    class MovedDateTime(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> Any:
            return real_datetime.now(tz) + delta

        @classmethod
        def utcnow(cls) -> Any:
            return real_datetime.now(datetime.UTC).replace(tzinfo=None) + delta

        @classmethod
        def today(cls) -> Any:
            return real_datetime.now() + delta

    setattr(datetime, "datetime", MovedDateTime)  # noqa: B010 (a module attribute typed as a class)


def _answer(kind: str, value: Any) -> None:
    try:
        data = pickle.dumps((kind, value))
    except Exception as exc:  # an answer that cannot be pickled is reported as what it was
        data = pickle.dumps(("error", f"unpicklable answer {value!r}: {exc!r}"))
    os.write(1, PREFIX + base64.b64encode(data) + b"\n")


async def _serve(factory: Any) -> None:
    backend = await factory()
    _answer("ready", time.time_ns() // 1_000_000)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := await reader.readline():
            method, args = pickle.loads(base64.b64decode(line))
            try:
                if method == "clock":
                    value: Any = time.time_ns() // 1_000_000
                else:
                    value = await getattr(backend, method)(*args)
            except Exception as exc:
                _answer("error", f"{type(exc).__name__}: {exc}")
            else:
                _answer("ok", value)
    finally:
        await backend.close()


def main() -> None:
    """Run one claimer (see the module's docstring)."""
    path, offset, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    if mode == "python":
        _shift_python_clock(offset)
    try:
        with open(path, "rb") as f:
            factory = pickle.load(f)
        asyncio.run(_serve(factory))
    except Exception as exc:
        _answer("error", f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    main()
