"""The in-process harness of benchmarks.cost_checks runs every variant and every table."""

from __future__ import annotations

import asyncio

from benchmarks.cost_checks import (
    ALLOC_SIZES,
    BUFFER_SIZES,
    VARIANTS,
    alloc_report,
    allocations,
    buffer_checks,
    buffer_report,
    intake_checks,
    intake_report,
    measure,
    report,
)


def test_every_variant_serves_and_is_reported() -> None:
    results = asyncio.run(measure(requests=50, rounds=1))
    assert list(results) == [v.name for v in VARIANTS]
    assert all(us > 0 for us in results.values())
    table = report(results)
    assert all(v.name in table for v in VARIANTS)


def test_every_buffer_check_is_measured_at_every_size() -> None:
    results = buffer_checks(requests=5, rounds=1)
    assert all(list(by_size) == list(BUFFER_SIZES) for by_size in results.values())
    table = buffer_report(results)
    assert all(name in table for name in results)


def test_every_intake_step_runs_and_is_reported() -> None:
    results = asyncio.run(intake_checks(calls=20, rounds=1))
    assert len(results) == 9 and all(us > 0 for us in results.values())
    table = intake_report(results)
    assert all(name in table for name in results)


def test_allocations_are_counted_at_every_size() -> None:
    results = allocations(calls=20)
    assert list(results) == list(ALLOC_SIZES)
    assert all(size > 0 and allocs > 0 and nbytes > 0 for size, allocs, nbytes in results.values())
    table = alloc_report(results)
    assert all(f"| {label} |" in table for label in ALLOC_SIZES)
