"""Micro benchmark of reading a request that carries an image, by the image's
size: the proxy's route read, the verifier and the token estimate, each of
which must cost the same whatever the image weighs.

Run: ``.venv/bin/pytest benchmarks/bench_route_media.py --benchmark-enable``
(``make bench`` runs it; ``-k route`` for the route rows alone).

One group per operation, one row per request (``media_requests``): a
conversation of a system prompt and a user turn whose parts are a line of
text and one PNG image (its header, then bytes to the size) of 1 KiB, 1 MiB
and 32 MiB, the largest body the services take by default:

- ``route``: ``wire.request.route.read_route``, provider and model from the
  received bytes (two offsets followed, the model a memoryview of them);
- ``verify``: ``wire.request.verify.verify_request``, every offset of the
  buffer checked, the image's bytes counted by its vector's length word;
- ``estimate``: ``wire.request.estimate.estimate_request``, the image's
  tokens from its header's pixel size.

Each row's ``extra_info`` holds its allocations and bytes allocated per op
(memray, ``benchmarks.allocs``): flat across the sizes, as the time is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from benchmarks.allocs import count_allocations
from benchmarks.payloads import media_requests
from flatgate.proxy.wire.request.estimate import estimate_request
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request

REQUESTS = media_requests()
_MOST = 64 << 20


def _verify(buf: bytes) -> None:
    verify_request(buf, max_bytes=_MOST)


def _estimate(buf: bytes) -> int:
    return estimate_request(buf, max_bytes=_MOST)


OPS: dict[str, Callable[[bytes], object]] = {
    "route": read_route,
    "verify": _verify,
    "estimate": _estimate,
}


@pytest.mark.parametrize("size", list(REQUESTS))
@pytest.mark.parametrize("op", list(OPS))
def test_media(benchmark: Any, op: str, size: str) -> None:
    fn, buf = OPS[op], REQUESTS[size]
    benchmark.group = f"{op}: a request with one image"
    benchmark.name = f"{op}[image-{size}]"
    for _ in range(3):
        fn(buf)  # warm: caches and free lists
    found = count_allocations(fn, buf, 200)
    benchmark.extra_info.update(
        bytes_in_request=len(buf), allocs_per_op=found.allocs, bytes_per_op=found.bytes
    )
    benchmark(fn, buf)
