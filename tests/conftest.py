"""The whole suite's rule: a run that skipped a test fails.

``make test`` installs every tool a test needs (``tests/setup_tools.sh``,
the npm clients, the scratch venvs), so a skip can only mean a machine that
was not set up: a missing ``wrk`` must never turn into a silent skip and a
green run. Each skip is listed by ``-rs`` (pytest's ``-ra``) and counted in
the closing line; this hook makes the exit status a failure. An expected
failure (``xfail``) is not a skip. Kept as plain hooks (no fixture) so that
``tests/test_noskip.py`` runs this very file in a pytest of its own.
"""

from __future__ import annotations

import pytest

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Under pytest-xdist the controller gets every worker's reports and
    # decides the run's status; a worker's own is not the run's.
    if hasattr(session.config, "workerinput"):
        return
    if _skipped and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped:
        terminalreporter.write_sep(
            "=",
            f"{len(_skipped)} skipped: a skip fails the suite (run `make test`, which "
            "installs every tool the tests need)",
            red=True,
        )
        for nodeid in _skipped:
            terminalreporter.write_line(f"SKIPPED {nodeid}")
