"""Tests of the kit itself: it must fail deliberately broken backends, and only them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from conformance_broken_backends import BROKEN, Broken  # type: ignore[import-not-found]  # noqa: E402

pytest_plugins = ["pytester"]
CONTRACT = HERE.parents[1] / "docs" / "lease-contract.md"


@pytest.fixture(autouse=True)
def _third_party_project(pytester: pytest.Pytester) -> None:
    """A directory like a third party's: strict asyncio mode, the broken backends importable."""
    pytester.syspathinsert(HERE)
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")


def run_suite(pytester: pytest.Pytester, factory: str, *args: str) -> pytest.RunResult:
    """Run the suite in a fresh directory against `conformance_broken_backends.<factory>`."""
    call = factory if "(" in factory else f"{factory}()"
    pytester.makepyfile(
        test_third_party=f"""
        import pytest
        import conformance_broken_backends
        from anarchon_conformance.suite import *

        @pytest.fixture
        def anarchon_backend_factory():
            return conformance_broken_backends.{call}
        """
    )
    return pytester.runpytest("-p", "no:cacheprovider", "-q", "-rfs", *args)


def failed_tests(result: pytest.RunResult) -> str:
    return "\n".join(line for line in result.outlines if line.startswith("FAILED"))


@pytest.mark.parametrize("case", BROKEN, ids=[b.name for b in BROKEN])
def test_kit_fails_every_rule_breaker(pytester: pytest.Pytester, case: Broken) -> None:
    """The mutation self-test: each backend breaks one rule alone; the kit test for that rule fails it,
    and its failure names the rule."""
    result = run_suite(pytester, f"broken({case.name!r})", "-k", case.test, "--anarchon-claims=200")
    assert result.ret != 0, f"the kit passed {case.cls.__name__} ({case.cls.__doc__})\n{result.stdout.str()}"
    assert failed_tests(result), result.stdout.str()
    assert case.says in result.stdout.str(), f"the failure does not say {case.says!r}:\n{result.stdout.str()}"


def test_every_rule_of_the_contract_has_a_kit_test() -> None:
    """Each kit test that docs/lease-contract.md names exists in the suite."""
    import anarchon_conformance.suite as suite

    named = set(re.findall(r"`(test_[a-z0-9_]+)`", CONTRACT.read_text()))
    assert len(named) >= 20, named
    defined = {name for cls in vars(suite).values() if isinstance(cls, type) for name in dir(cls)}
    assert named <= defined, f"the contract names kit tests that do not exist: {sorted(named - defined)}"


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
    # A store that decides by each client's clock: claimers in other processes, their clocks moved.
    result = run_suite(pytester, "client_clock", "-k", "Clock")
    assert result.ret != 0
    failed = failed_tests(result)
    for test in ("test_store_clock_decides", "test_a_renewal_follows_the_store_clock",
                 "test_early_and_stale_after_follow_the_store_clock", "test_inspect_reads_the_store_clock"):
        assert test in failed, result.stdout.str()


def test_kit_passes_a_store_with_a_clock_of_its_own_in_the_clock_tests(pytester: pytest.Pytester) -> None:
    # The same store on its own clock passes them: the claimers' clocks really are moved, and the
    # tests judge by the store's.
    result = run_suite(pytester, "remote", "-k", "Clock")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=4)


def test_clock_tests_say_why_an_in_process_store_is_skipped(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, "correct", "-k", "Clock", "-rs")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*MemoryBackend keeps its store in this process*"])


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


def test_the_sibling_skip_says_what_is_missing(pytester: pytest.Pytester) -> None:
    # A backend given a URL that never told BackendBase about it (no `_use` call) has no sibling: the
    # skip says so, rather than blaming a client object it was never given.
    result = run_suite(pytester, "broken_factory('NoUseBackend')", "-k", "sibling", "-rs")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*never called `self._use(url_or_client, ClientType, settings)`*"])


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


def _console_script(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """`anarchon-conformance ARGS` as installed: a console script, which puts no directory on sys.path."""
    script = Path(sys.executable).parent / "anarchon-conformance"
    return pytester.run(str(script), *args, timeout=300)


def test_console_script_loads_module_factory_from_the_current_directory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(my_store="from anarchon_conformance import memory_backend_factory as factory\n")
    result = _console_script(pytester, "my_store:factory", "-k", "test_first_claim_wins_attempt_1")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*result: conformant*"])


def test_console_script_reports_a_factory_it_cannot_load_once(pytester: pytest.Pytester) -> None:
    result = _console_script(pytester, "no_such_module:factory")
    assert result.ret == 2, result.stdout.str() + result.stderr.str()
    output = result.stdout.str() + result.stderr.str()
    assert output.count("cannot load 'factory' from 'no_such_module'") == 1, output
    assert "passed" not in output and "failed" not in output, output


def test_expiry_slack_is_what_the_backend_declares_and_checked() -> None:
    from anarchon_conformance._kit import expiry_slack_ms

    class Late:
        expiry_slack_ms = 700

    class Wrong:
        expiry_slack_ms = -1

    assert expiry_slack_ms(Late()) == 700
    assert expiry_slack_ms(object()) == 0
    with pytest.raises(TypeError, match="expiry_slack_ms=-1"):
        expiry_slack_ms(Wrong())
