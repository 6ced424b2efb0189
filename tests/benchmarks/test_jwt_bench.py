"""benchmarks.jwt_auth measures and reports every row."""

from __future__ import annotations

import asyncio

from benchmarks.jwt_auth import measure, report


def test_every_row_is_measured_and_reported() -> None:
    results = asyncio.run(measure(n=200, rounds=1))
    assert len(results) == 8 and all(us > 0 for us in results.values())
    table = report(results)
    assert all(name in table for name in results)
    assert table.count("x |") == 3  # a ratio per first-seen algorithm
