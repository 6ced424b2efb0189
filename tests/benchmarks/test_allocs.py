"""The allocation counter: loop overhead and memray's own artefacts subtracted.

Functions whose allocations are known by construction: nested pure-Python
calls and tuple unpacking allocate nothing without a profiler (memray's hook
makes CPython 3.11 allocate a frame per call and an iterator per unpack, which
must not be counted); a ``bytearray`` of n bytes is an object plus its buffer.
"""

from __future__ import annotations

import collections

import pytest

from benchmarks.allocs import count_allocations, count_raw


def _leaf(arg: object) -> object:
    return arg


def _calls(arg: object) -> object:
    _leaf(arg)
    return _leaf(arg)


def _unpack(arg: tuple[int, int]) -> int:
    first, second = arg
    return first + second


def _buffer(arg: int) -> bytearray:
    return bytearray(arg)


def test_python_calls_cost_nothing_but_are_reported() -> None:
    found = count_allocations(_calls, None, 200)
    assert found.allocs == 0
    assert found.bytes == 0
    assert found.frames == 2
    assert found.ops == 200


def test_tuple_unpacking_costs_nothing() -> None:
    for _ in range(20):  # let CPython specialise the unpack, as in production
        _unpack((1, 2))
    assert count_allocations(_unpack, (1, 2), 200).allocs == 0


def test_a_buffer_is_counted_with_its_bytes() -> None:
    found = count_allocations(_buffer, 5000, 100)
    assert found.allocs >= 1
    assert found.bytes >= 5000
    assert found.frames == 0


def test_max_records_bounds_the_calls_tracked() -> None:
    found = count_allocations(_buffer, 10, 1000, max_records=50)
    assert found.ops in range(1, 51)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        count_allocations(_leaf, None, 0)
    with pytest.raises(ValueError):
        count_allocations(_leaf, None, 10, max_records=0)


def test_sites_name_the_line_that_allocates() -> None:
    sites: collections.Counter[str] = collections.Counter()
    count_raw(_buffer, 5000, 10, sites)
    assert any("return bytearray(arg)" in site for site in sites), sites
    assert sum(sites.values()) >= 10
