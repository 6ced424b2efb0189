"""The route read of a request carrying an image allocates the same at 32 MiB
as at 1 KiB (``benchmarks/bench_route_media.py`` times it): no copy of the
image, nothing that grows with it. The verifier and the estimate likewise."""

from __future__ import annotations

import pytest

from benchmarks.allocs import count_allocations
from benchmarks.bench_route_media import OPS, REQUESTS
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.schema import Provider


def test_the_requests_carry_their_image() -> None:
    for label, size in (("1KiB", 1 << 10), ("1MiB", 1 << 20), ("32MiB", 32 << 20)):
        buf = REQUESTS[label]
        assert size < len(buf) < size + 1024
        provider, model = read_route(buf)
        assert (provider, bytes(model)) == (Provider.Anthropic, b"claude-sonnet-4-5")
    parts = read_request(REQUESTS["1KiB"]).messages[1].parts
    assert parts is not None and len(parts[1].data) == 1 << 10


@pytest.mark.parametrize("op", list(OPS))
def test_allocations_do_not_grow_with_the_image(op: str) -> None:
    fn = OPS[op]
    found = {}
    for label in ("1KiB", "32MiB"):
        for _ in range(3):
            fn(REQUESTS[label])
        found[label] = count_allocations(fn, REQUESTS[label], 50)
    small, large = found["1KiB"], found["32MiB"]
    assert (large.allocs, large.bytes) == (small.allocs, small.bytes)
    assert large.bytes < 16 << 10  # a few small objects, never the image
