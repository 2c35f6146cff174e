"""The kit's `schedules` tier must fail every deliberately broken schedule store, each for its rule,
and pass the reference model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from conformance_broken_schedules import (  # type: ignore[import-not-found]  # noqa: E402
    BROKEN_SCHEDULES,
    BrokenSchedules,
)

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _third_party_project(pytester: pytest.Pytester) -> None:
    """A directory like a third party's: strict asyncio mode, the broken stores importable."""
    pytester.syspathinsert(HERE)
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")


def run_tier(pytester: pytest.Pytester, factory: str, *args: str) -> pytest.RunResult:
    """Run the suite in a fresh directory against the factory `factory` (a Python expression)."""
    pytester.makepyfile(
        test_third_party=f"""
        import pytest
        import conformance_broken_schedules
        from anarchon_conformance import memory_backend_factory
        from anarchon_conformance.suite import *

        @pytest.fixture
        def anarchon_backend_factory():
            return {factory}
        """
    )
    return pytester.runpytest("-p", "no:cacheprovider", "-q", "-rfs", *args)


@pytest.mark.parametrize("case", BROKEN_SCHEDULES, ids=[b.name for b in BROKEN_SCHEDULES])
def test_the_schedules_tier_fails_every_rule_breaker(
    pytester: pytest.Pytester, case: BrokenSchedules
) -> None:
    result = run_tier(pytester, f"conformance_broken_schedules.broken({case.name!r})", "-k", case.test)
    out = result.stdout.str()
    assert result.ret != 0, f"the kit passed {case.cls.__name__} ({case.cls.__doc__})\n{out}"
    assert any(line.startswith("FAILED") and case.test in line for line in result.outlines), out
    assert case.says in out, f"the failure does not say {case.says!r}:\n{out}"


def test_the_schedules_tier_passes_the_reference_model(pytester: pytest.Pytester) -> None:
    result = run_tier(pytester, "memory_backend_factory()", "-k", "Schedule")
    assert result.ret == 0, result.stdout.str()
    assert result.parseoutcomes()["passed"] >= 30


def test_a_store_without_schedules_skips_the_tier_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_claim_only="from anarchon_conformance.suite import *\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-q", "-rs", "--anarchon-backend=memory-claim://", "-k", "Schedule"
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*does not declare the 'schedules' capability ('schedules' tier)*"])
    assert "passed" not in result.stdout.str().splitlines()[-1]
