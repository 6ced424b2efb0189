"""``tests/conftest.py``'s rule, run in a pytest of its own: a skip fails the
run, with the skipped test named, on one process and under pytest-xdist (as
``make test`` runs); a run with no skip passes; an ``xfail`` is no skip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_CONFTEST = Path(__file__).with_name("conftest.py")


def _run(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``body``, a test module's text, run by a pytest of its own under this
    suite's conftest. The modules these tests write skip on purpose (and
    hold a test that passes beside): the skip is what is checked."""
    (tmp_path / "conftest.py").write_text(_CONFTEST.read_text())
    (tmp_path / "test_it.py").write_text("import pytest\n\n" + body)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_a_skipped_test_fails_the_run(tmp_path: Path, workers: tuple[str, ...]) -> None:
    # The module written is the input under test: a trivial test that passes
    # and one skipped on purpose; what is asserted is the run's outcome.
    done = _run(
        tmp_path,
        "def test_ok():\n    assert 1 + 1 == 2\n\n"
        "@pytest.mark.skipif(True, reason='wrk is not installed')\n"
        "def test_needs_wrk():\n    assert False\n",
        *workers,
    )
    assert done.returncode == 1, done.stdout
    assert "1 passed, 1 skipped" in done.stdout
    assert "1 skipped: a skip fails the suite" in done.stdout
    assert "SKIPPED test_it.py::test_needs_wrk" in done.stdout


def test_a_skip_in_a_fixture_fails_the_run(tmp_path: Path) -> None:
    # The module written skips in its fixture on purpose: the input under test.
    done = _run(
        tmp_path,
        "@pytest.fixture\ndef tool():\n    pytest.skip('nginx is not installed')\n\n"
        "def test_needs_nginx(tool):\n    assert tool\n",
    )
    assert done.returncode == 1, done.stdout
    assert "SKIPPED test_it.py::test_needs_nginx" in done.stdout


def test_a_run_without_skips_passes(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        "def test_ok():\n    assert 2 * 2 == 4\n\n"
        "@pytest.mark.xfail(strict=True)\n"
        "def test_known_bug():\n    assert 2 * 2 == 5\n",
    )
    assert done.returncode == 0, done.stdout
    assert "1 passed, 1 xfailed" in done.stdout
    assert "a skip fails the suite" not in done.stdout
