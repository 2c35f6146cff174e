"""Tests of the kit itself: it must fail deliberately broken backends, and only them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _third_party_project(pytester: pytest.Pytester) -> None:
    """A directory like a third party's: strict asyncio mode, the broken backends importable."""
    pytester.syspathinsert(HERE)
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")


def run_suite(pytester: pytest.Pytester, factory: str, *args: str) -> pytest.RunResult:
    """Run the suite in a fresh directory against `conformance_broken_backends.<factory>`."""
    pytester.makepyfile(
        test_third_party=f"""
        import pytest
        import conformance_broken_backends
        from anarchon_conformance.suite import *

        @pytest.fixture
        def anarchon_backend_factory():
            return conformance_broken_backends.{factory}()
        """
    )
    return pytester.runpytest("-p", "no:cacheprovider", "-q", "-rfs", *args)


def failed_tests(result: pytest.RunResult) -> str:
    return "\n".join(line for line in result.outlines if line.startswith("FAILED"))


def test_kit_catches_two_winners(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, "two_winners", "-k", "race or fuzz or batch or duplicates")
    assert result.ret != 0
    failed = failed_tests(result)
    assert "test_race_one_winner_per_slot" in failed, result.stdout.str()
    assert "test_race_32_clients_fresh_connections" in failed


def test_kit_catches_non_owner_renew(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, "non_owner_renew", "-k", "renew or Model")
    assert result.ret != 0
    failed = failed_tests(result)
    assert "test_renew_only_by_current_owner" in failed, result.stdout.str()
    assert "test_renew_after_takeover_is_lost" in failed


def test_kit_catches_ignored_max_attempts(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, "ignores_max_attempts", "-k", "attempt or exhausted or Model")
    assert result.ret != 0
    failed = failed_tests(result)
    assert "test_max_attempts" in failed, result.stdout.str()
    assert "test_row_same_slot_released_exhausted" in failed
    assert "test_race_takeovers_one_winner_per_attempt" in failed
    assert "test_backend_matches_reference_model" in failed


def test_kit_catches_client_clock(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, "client_clock", "-k", "store_clock")
    assert result.ret != 0
    failed = failed_tests(result)
    assert "test_store_clock_decides[client-ahead-1h]" in failed, result.stdout.str()
    assert "test_store_clock_decides[client-behind-1h]" in failed


def test_kit_passes_the_reference_model(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, "correct", "-k", "store_clock or renew or attempts or race")
    assert result.ret == 0, result.stdout.str()
    assert result.parseoutcomes()["passed"] >= 10


def test_kit_runs_a_fixed_lease_backend_with_its_lease(pytester: pytest.Pytester) -> None:
    # Every claim and renew must ask for the declared lease (the backend raises ConfigError
    # otherwise), expiry tests wait that lease out, and a refused overlap='allow' is a skip.
    result = run_suite(pytester, "fixed_lease", "-k", "Lease or Model or takeovers or fuzz")
    assert result.ret == 0, result.stdout.str()
    assert result.parseoutcomes()["passed"] >= 40
    result.stdout.fnmatch_lines(["*refuses overlap='allow' with ConfigError*"])


def test_kit_catches_a_refused_allow_that_changed_the_record(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, "allow_leaves_record", "-k", "live_allow")
    assert result.ret != 0
    assert "test_row_older_slot_live_allow" in failed_tests(result), result.stdout.str()


def test_without_a_backend_the_suite_fails_and_says_how(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="from anarchon_conformance.suite import *\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "-k", "test_first_claim_wins_attempt_1")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*override the `anarchon_backend_factory` fixture*"])


def test_plugin_adds_nothing_to_other_modules(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def test_backend_option_takes_a_url(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_by_url="from anarchon_conformance.suite import *\n")
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-q",
        "--anarchon-backend=memory://",
        "--anarchon-claims=200",
        "-k",
        "Claim or Lease or fuzz",
    )
    assert result.ret == 0, result.stdout.str()
    assert result.parseoutcomes()["passed"] > 40


def test_backend_option_takes_module_factory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_by_factory="from anarchon_conformance.suite import *\n")
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "--anarchon-backend=conformance_broken_backends:two_winners",
        "-k",
        "race_32",
    )
    result.assert_outcomes(failed=1)


def test_claim_only_backend_skips_lease_tier_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_claim_only="from anarchon_conformance.suite import *\n")
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "--anarchon-backend=memory-claim://",
        "-k",
        "row_none or handover",
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*does not declare the 'lease' capability*", "*does not declare the 'notify'*"]
    )
