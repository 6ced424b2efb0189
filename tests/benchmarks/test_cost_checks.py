"""The in-process A/B harness of benchmarks.cost_checks runs every variant."""

from __future__ import annotations

import asyncio

from benchmarks.cost_checks import VARIANTS, measure, report


def test_every_variant_serves_and_is_reported() -> None:
    results = asyncio.run(measure(requests=50, rounds=1))
    assert list(results) == [v.name for v in VARIANTS]
    assert all(us > 0 for us in results.values())
    table = report(results)
    assert all(v.name in table for v in VARIANTS)
