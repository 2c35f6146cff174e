"""`anarchon-conformance URL_OR_module:factory`: run the suite and print a summary per tier."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from ._support import load_backend

__all__ = ["main"]

_TEST_FILE = "from anarchon_conformance.suite import *  # noqa: F403\n"
_INI = "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"


class _Summary:
    """Counts outcomes per tier (the suite class) as pytest reports them."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {}
        self.skip_reasons: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and not (report.failed or report.skipped):
            return
        if report.when == "teardown" and report.passed:
            return
        tier = report.nodeid.split("::")[1] if "::" in report.nodeid else report.nodeid
        outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
        self.counts.setdefault(tier, Counter())[outcome] += 1
        if report.skipped and isinstance(report.longrepr, tuple):
            self.skip_reasons.setdefault(tier, str(report.longrepr[2]).removeprefix("Skipped: "))


def main(argv: list[str] | None = None) -> int:
    """Run the conformance suite against one backend; the exit status is non-zero on any failure."""
    parser = argparse.ArgumentParser(
        prog="anarchon-conformance",
        description="Run the anarchon conformance suite against a backend.",
        epilog="Any further arguments are passed to pytest, e.g. -x or -k race.",
    )
    parser.add_argument("backend", help="a URL (an installed driver) or module:factory")
    parser.add_argument("--claims", type=int, default=None, help="claims in the exact-count fuzz")
    parser.add_argument("--thorough", action="store_true",
                        help="wait longer where a rule says 'forever' (as CI should)")
    args, extra = parser.parse_known_args(argv)
    try:
        load_backend(args.backend)  # once, before pytest: a backend that cannot be loaded is one error
    except ValueError as exc:
        parser.exit(2, f"anarchon-conformance: error: {exc}\n")
    summary = _Summary()
    with tempfile.TemporaryDirectory(prefix="anarchon-conformance-") as tmp:
        Path(tmp, "test_conformance.py").write_text(_TEST_FILE)
        Path(tmp, "pytest.ini").write_text(_INI)
        pytest_args = [
            tmp,
            "-c",
            str(Path(tmp, "pytest.ini")),
            "--rootdir",
            tmp,
            "-p",
            "no:cacheprovider",
            "-q",
            "-rfs",
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",
            f"--anarchon-backend={args.backend}",
        ]
        if args.claims is not None:
            pytest_args.append(f"--anarchon-claims={args.claims}")
        if args.thorough:
            pytest_args.append("--anarchon-thorough")
        code = int(pytest.main([*pytest_args, *extra], plugins=[summary]))
    print("\nanarchon conformance summary")
    failed = 0
    for tier, counts in sorted(summary.counts.items()):
        failed += counts["failed"]
        status = "FAIL" if counts["failed"] else "skip" if not counts["passed"] else "ok"
        line = (
            f"  {status:4}  {tier:24} passed {counts['passed']:3}  failed {counts['failed']:3}  "
            f"skipped {counts['skipped']:3}"
        )
        if status == "skip" and tier in summary.skip_reasons:
            line += f"  ({summary.skip_reasons[tier]})"
        print(line)
    if code != 0 or failed:
        print("result: FAILED" if failed or code == 1 else f"result: pytest exited with status {code}")
        return code or 1
    print("result: conformant")
    return 0


if __name__ == "__main__":
    sys.exit(main())
