"""The in-memory proxy of benchmarks.inmemory does real requests."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.inmemory import drive, make_server, one_request
from benchmarks.payloads import make_request, to_flatbuffer


@pytest.mark.parametrize("size", [1 << 10, 1 << 20])
def test_harness_forwards_the_received_object(size: int) -> None:
    body = to_flatbuffer(make_request(size, seed=3))
    server, transport = make_server()
    assert one_request((server, body)) == 200
    assert transport.last_body is body
    assert server.pool.leased == 0


def test_harness_sees_errors() -> None:
    server, _ = make_server()
    assert one_request((server, b"\x00" * 64)) == 400


def test_drive_runs_a_coroutine_that_never_waits() -> None:
    async def answer() -> int:
        return 42

    async def waits() -> None:
        await asyncio.sleep(0)

    assert drive(answer()) == 42
    coro = waits()
    with pytest.raises(AssertionError, match="suspended"):
        drive(coro)
    coro.close()
