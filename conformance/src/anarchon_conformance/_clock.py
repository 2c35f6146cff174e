"""The store's clock decides: claimers in processes of their own, whose clocks really differ.

Each test starts claimers (`_claimer.py`) whose wall clock runs well ahead of or behind the host's:
under libfaketime, which moves every clock call of the process (its C libraries' and a gRPC core's
included), or, where libfaketime is not installed or the store's clock is the host's own (SQLite),
with Python's clock functions moved. They reach the store through the backend factory, pickled
(cloudpickle), so the factory must capture what it connects to (a URL, a path, a bucket name), not a
client object. A backend that decides anything by a client's clock (the expiry of a lease, EARLY,
`stale_after`, the `now` it reports) fails them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import glob
import importlib
import math
import os
import pickle
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from anarchon import MemoryBackend, MemoryClaimBackend
from anarchon.backends import Capability, ClaimOutcome, ClaimRequest, ClaimResult, Lease, ReleaseOutcome

from ._kit import EXPIRY_MARGIN_MS, Kit, lease_for

__all__ = ["CLOCK_LEASE_MS", "Claimer", "TestClockContract", "libfaketime"]

CLOCK_LEASE_MS = 1_500
"""The lease of the clock tests (the backend's fixed lease, if it declares one)."""
SKEW_S = 30
"""How far the claimers' clocks run from the host's, at least (more for a long fixed lease)."""
RULE = "the store's clock decides, never a client's (docs/lease-contract.md, Store time and max_skew)"
_CLAIMER = Path(__file__).with_name("_claimer.py")
_LIBFAKETIME = [
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
]


def libfaketime() -> str | None:
    """The libfaketime library to preload (`$ANARCHON_LIBFAKETIME`, else where Debian, Fedora or a
    source build put it), or None when it is not installed."""
    given = os.environ.get("ANARCHON_LIBFAKETIME")
    if given:
        return given if os.path.exists(given) else None
    for pattern in _LIBFAKETIME:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


class Claimer:
    """One claimer process: `await claimer.claim(request)` and the like run in it."""

    def __init__(self, name: str, offset_s: float, process: asyncio.subprocess.Process, log: Path) -> None:
        self.name = name
        self.offset_s = offset_s
        self.process = process
        self.log = log
        self.clock_ms = 0
        """Its wall clock when it became ready, epoch ms."""
        self._calls = asyncio.Lock()
        """One call at a time: each answer is the next line."""

    def __repr__(self) -> str:
        return f"the {self.name} claimer (clock {self.offset_s:+.0f} s)"

    async def _read(self) -> tuple[str, Any]:
        assert self.process.stdout is not None
        while True:
            line = await self.process.stdout.readline()
            if not line:
                code = await self.process.wait()
                raise AssertionError(f"{self!r} exited with status {code}:\n{self.output()}")
            if line.startswith(b"@anarchon "):
                kind, value = pickle.loads(base64.b64decode(line[len(b"@anarchon "):]))
                return kind, value

    def output(self) -> str:
        """The last lines of what the process wrote to stderr."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return ""

    async def start(self) -> None:
        """Wait until it has opened its backend; check that its clock really is moved."""
        kind, value = await asyncio.wait_for(self._read(), 60)
        if kind != "ready":
            raise AssertionError(f"{self!r} could not build and open a backend: {value}\n{self.output()}")
        self.clock_ms = value
        moved = (value - time.time_ns() // 1_000_000) / 1000
        assert abs(moved - self.offset_s) < 5, (
            f"{self!r}: its clock should run {self.offset_s:+.0f} s from this process's, but runs "
            f"{moved:+.1f} s from it; the test cannot judge the store's clock this way")

    async def call(self, method: str, *args: Any) -> Any:
        """Call `backend.method(*args)` in the claimer; its error fails the test, naming it."""
        assert self.process.stdin is not None
        async with self._calls:
            self.process.stdin.write(base64.b64encode(pickle.dumps((method, args))) + b"\n")
            await self.process.stdin.drain()
            kind, value = await asyncio.wait_for(self._read(), 60)
        if kind != "ok":
            pytest.fail(f"{method} in {self!r} raised {value}\n{self.output()}", pytrace=False)
        return value

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Claim in the claimer's process."""
        result: ClaimResult = await self.call("claim", request)
        return result

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        """Renew in the claimer's process."""
        renewed: Lease | None = await self.call("renew", lease, lease_ms)
        return renewed

    async def stop(self) -> None:
        """End the process (it closes its backend when its stdin closes)."""
        if self.process.returncode is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


def _pickled_factory(kit: Kit, factory: Any, directory: str) -> str:
    """The factory, pickled to a file for the claimers; skip or fail, saying why, when it cannot be."""
    dumps: Callable[[Any], bytes] = importlib.import_module("cloudpickle").dumps  # an untyped module
    try:
        blob = dumps(factory)
    except Exception as exc:
        if isinstance(kit.backend, MemoryBackend | MemoryClaimBackend):
            pytest.skip(f"{type(kit.backend).__name__} keeps its store in this process: no other process "
                        "can reach it")
        pytest.fail(
            f"the clock tests run claimers in processes of their own, which build backends with the "
            f"`anarchon_backend_factory` pickled (cloudpickle), and it could not be pickled ({exc}): let "
            "the factory capture what it connects to (a URL, a path, a bucket name), not a client object",
            pytrace=False)
    path = os.path.join(directory, "factory.pickle")
    with open(path, "wb") as f:
        f.write(blob)
    return path


@contextlib.asynccontextmanager
async def claimers(
    kit: Kit, factory: Any, offsets: dict[str, float]
) -> AsyncGenerator[dict[str, Claimer], None]:
    """Claimer processes, one per name, each with its clock moved by its offset (seconds); each is
    checked to reach the store the kit's backend reaches."""
    host_clock = bool(getattr(kit.backend, "host_clock", False))
    preload = None if host_clock else libfaketime()
    with tempfile.TemporaryDirectory(prefix="anarchon-claimers-") as tmp:
        path = _pickled_factory(kit, factory, tmp)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
        started: dict[str, Claimer] = {}
        try:
            for name, offset in offsets.items():
                log = Path(tmp, f"{name}.log")
                child_env = dict(env)
                if preload is not None:
                    child_env.update({"LD_PRELOAD": preload, "FAKETIME": f"{offset:+.0f}",
                                      "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
                err = log.open("wb")  # noqa: ASYNC230 (a new, empty file: nothing to wait for)
                try:
                    process = await asyncio.create_subprocess_exec(
                        sys.executable, str(_CLAIMER), path, str(offset),
                        "python" if preload is None else "faketime",
                        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                        env=child_env)
                finally:
                    err.close()
                started[name] = Claimer(name, offset, process, log)
            await asyncio.gather(*(c.start() for c in started.values()))
            probe = await kit.won("same-store-probe", "kit")
            assert await kit.release(probe, ReleaseOutcome.DONE)
            for claimer in started.values():
                seen = await claimer.claim(kit.req(probe.job, claimer.name))
                assert seen.outcome is ClaimOutcome.DONE, (
                    f"{claimer!r} claimed a slot the kit ran to its end, and got {seen!r} (not DONE): the "
                    "factory does not reach "
                    "the same store from another process (build it from what it connects to, so that every "
                    "call in any process reaches one store)")
            yield started
        finally:
            await asyncio.gather(*(c.stop() for c in started.values()), return_exceptions=True)


class _Host:
    """The kit's own clients, on this host's clock, as a claimer of the clock tests."""

    name = "host"
    offset_s = 0.0

    def __init__(self, kit: Kit) -> None:
        self.kit = kit

    def __repr__(self) -> str:
        return "a claimer on this host's clock"

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Claim through the kit's backend."""
        result: ClaimResult = await self.kit.backend.claim(request)
        return result


def _written_by(holder: Any) -> str:
    """A hint at the cause when the lease was won by a claimer whose clock is moved."""
    if holder.offset_s == 0:
        return ""
    return f" (the lease was granted by {holder!r}'s clock?)"


def _skew_s(kit: Kit, lease_ms: int) -> float:
    """How far the claimers' clocks run: at least `SKEW_S`, and well past a lease and its slack."""
    return max(SKEW_S, math.ceil(2 * (lease_ms + kit.slack_ms) / 1000) + 5)


class TestClockContract:
    """Claimers in processes whose clocks run ahead of and behind the host's: the store's clock decides."""

    pytestmark: ClassVar[list[Any]] = [
        pytest.mark.anarchon_tier("lease"),
        pytest.mark.usefixtures("_anarchon_tier_gate"),
        pytest.mark.asyncio,
    ]

    async def test_store_clock_decides(self, anarchon_kit: Kit, anarchon_backend_factory: Any) -> None:
        # Three leases at once, each with its own timeline: held by a claimer on this host's clock, by
        # the slow claimer and by the fast one. While each is live the others race for it and must be
        # refused; once it has run out by the store's clock (and its slack) the next one takes it over.
        kit = anarchon_kit
        lease_ms = lease_for(kit.backend, CLOCK_LEASE_MS)
        skew = _skew_s(kit, lease_ms)
        loop = asyncio.get_running_loop()
        ends = (lease_ms + kit.slack_ms + EXPIRY_MARGIN_MS) / 1000

        async with claimers(kit, anarchon_backend_factory, {"fast": skew, "slow": -skew}) as c:
            host = _Host(kit)
            fast, slow = c["fast"], c["slow"]

            async def timeline(job: str, holder: Any, racers: list[Any], taker: Any) -> None:
                def req(owner: str) -> ClaimRequest:
                    return kit.req(job, owner, lease_ms=lease_ms, max_attempts=10)

                won = await holder.claim(req(holder.name))
                granted = loop.time()
                assert won.outcome is ClaimOutcome.WON and won.lease is not None, (
                    f"{RULE}: {holder!r} claimed a fresh job and got {won!r}")
                answers = await asyncio.gather(*(racer.claim(req(racer.name)) for racer in racers))
                assert loop.time() < granted + lease_ms * 0.7 / 1000, (
                    f"the race for {job!r} came too late in its {lease_ms} ms lease to judge it "
                    "(a slow host?)")
                for racer, answer in zip(racers, answers, strict=True):
                    assert answer.outcome is ClaimOutcome.TAKEN, (
                        f"{RULE}: {racer!r} claimed at once the {lease_ms} ms lease that {holder!r} had "
                        f"just won, and the store answered {answer!r}: a live lease was taken (two winners "
                        f"for one claim){_written_by(holder)}")
                await asyncio.sleep(max(0.0, granted + ends - loop.time()))
                taken = await taker.claim(req(taker.name))
                assert taken.outcome is ClaimOutcome.WON, (
                    f"{RULE}: {taker!r} claimed the job once {holder!r}'s {lease_ms} ms lease had run out by "
                    f"the store's clock (and its slack of {kit.slack_ms} ms), and the store answered "
                    f"{taken!r}: the lease was held too long{_written_by(holder)}, or judged by "
                    f"{taker!r}'s clock")

            await asyncio.gather(
                timeline("held-on-host", host, [fast, slow], slow),
                timeline("held-by-slow", slow, [fast, host], fast),
                timeline("held-by-fast", fast, [host, slow], host),
            )

    async def test_a_renewal_follows_the_store_clock(
        self, anarchon_kit: Kit, anarchon_backend_factory: Any
    ) -> None:
        # A holder whose clock is stepped (NTP) between its claim and its renewal: the lease is won on
        # this host's clock and renewed, by the same owner, from claimers whose clocks run ahead and behind.
        kit = anarchon_kit
        lease_ms = lease_for(kit.backend, CLOCK_LEASE_MS)
        skew = _skew_s(kit, lease_ms)
        loop = asyncio.get_running_loop()
        ends = (lease_ms + kit.slack_ms + EXPIRY_MARGIN_MS) / 1000
        async with claimers(kit, anarchon_backend_factory, {"fast": skew, "slow": -skew}) as c:
            fast, slow = c["fast"], c["slow"]
            ahead = await kit.won("stepped-ahead", "a", lease_ms=lease_ms)
            behind = await kit.won("stepped-behind", "a", lease_ms=lease_ms)
            granted = loop.time()
            renewed = await fast.renew(ahead, lease_ms)
            renewed_at = loop.time()
            assert renewed is not None, (
                f"{RULE}: {fast!r} renewed a {lease_ms} ms lease of its owner at once, and the store "
                "answered None: a live lease was judged expired by the fast claimer's clock")
            await asyncio.sleep(max(0.0, granted + ends - loop.time()))
            late = await slow.renew(behind, lease_ms)
            assert late is None, (
                f"{RULE}: {slow!r} renewed a {lease_ms} ms lease of its owner after it ran out by the "
                f"store's clock, and the store answered {late!r}: a renewal that arrives after the lease "
                "expired is lost (docs/lease-contract.md, Renew), whatever the sender's clock says")
            taken = await kit.claim("stepped-behind", "b", lease_ms=lease_ms)
            assert taken.outcome is ClaimOutcome.WON, f"{RULE}: after a lost renewal a claim got {taken!r}"
            await asyncio.sleep(max(0.0, renewed_at + ends - loop.time()))
            ended = await kit.claim("stepped-ahead", "b", lease_ms=lease_ms)
            assert ended.outcome is ClaimOutcome.WON, (
                f"{RULE}: {lease_ms + kit.slack_ms + EXPIRY_MARGIN_MS} ms after {fast!r} renewed a lease for "
                f"{lease_ms} ms, a claim on this host's clock got {ended!r}: the renewal counted from the "
                "fast claimer's clock, not the store's now")

    async def test_early_and_stale_after_follow_the_store_clock(
        self, anarchon_kit: Kit, anarchon_backend_factory: Any
    ) -> None:
        kit = anarchon_kit
        skew = _skew_s(kit, lease_for(kit.backend, CLOCK_LEASE_MS))
        async with claimers(kit, anarchon_backend_factory, {"fast": skew, "slow": -skew}) as c:
            fast, slow = c["fast"], c["slow"]
            probe = await kit.claim("probe", "kit")
            now = probe.now if probe.now is not None else time.time_ns() // 1_000_000
            cases = [
                (fast, kit.req("ahead", "fast", now + 10_000), ClaimOutcome.EARLY,
                 "a slot 10 s ahead of the store's now (max_skew_ms=2000) is EARLY"),
                (slow, kit.req("due", "slow", now - 1_000), ClaimOutcome.WON,
                 "a slot 1 s behind the store's now is due, not EARLY"),
                (fast, kit.req("worth", "fast", stale_after=now + 10_000), ClaimOutcome.WON,
                 "a claim before its stale_after (10 s after the store's now) is judged by the claim table"),
                (slow, kit.req("late", "slow", stale_after=now - 1_000), ClaimOutcome.STALE,
                 "a claim past its stale_after (1 s before the store's now) is STALE"),
            ]
            for claimer, request, expected, rule in cases:
                got = await claimer.claim(request)
                assert got.outcome is expected, (
                    f"{RULE}: {rule}, by the store's clock (stale_after is store time); {claimer!r} claimed "
                    f"{request.job!r} and the store answered {got!r}")

    @pytest.mark.anarchon_tier("inspect")
    async def test_inspect_reads_the_store_clock(
        self, anarchon_kit: Kit, anarchon_backend_factory: Any
    ) -> None:
        kit = anarchon_kit
        if Capability.INSPECT not in kit.capabilities:  # (the tier gate skips it first)
            pytest.skip("no inspect")
        skew = _skew_s(kit, lease_for(kit.backend, CLOCK_LEASE_MS))
        async with claimers(kit, anarchon_backend_factory, {"fast": skew, "slow": -skew}) as c:
            await kit.won("job", "a")
            before = await kit.backend.inspect(kit.namespace, "job")
            states = {claimer: await claimer.call("inspect", kit.namespace, "job") for claimer in c.values()}
            after = await kit.backend.inspect(kit.namespace, "job")
            assert before is not None and after is not None
            for claimer, state in states.items():
                assert state is not None, f"{claimer!r} read no record"
                assert before.now - 2_000 <= state.now <= after.now + 2_000, (
                    f"inspect reads the job's record with the store's now (docs/lease-contract.md, "
                    f"Capabilities: inspect); read by {claimer!r} between two reads on this host at store "
                    f"times {before.now} and {after.now}, it answered now={state.now} "
                    f"({(state.now - after.now) / 1000:+.1f} s): the client's clock, not the store's")
