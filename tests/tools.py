"""The external tools the tests run for real (``redis-server``, ``wrk``,
``nginx``): found, or the test fails naming the script that installs them.

``make test`` runs ``tests/setup_tools.sh`` first, so on a machine it set up
every tool is there; a test never skips for a missing one.
"""

from __future__ import annotations

import pytest

from benchmarks.harness.servers import find_tool

__all__ = ["needed"]


def needed(name: str) -> str:
    """The path of the tool ``name``; fails the test when it is not installed."""
    found = find_tool(name)
    if found is None:
        pytest.fail(
            f"{name} is not installed: run `sh tests/setup_tools.sh` (`make test` does), "
            "which installs it with apt-get",
            pytrace=False,
        )
    return found
