"""CallerWatch: cancels its task when the caller leaves, and only then."""

from __future__ import annotations

import asyncio
import contextlib

from flatgate.proxy.plumbing.serve import CallerWatch


async def test_caller_leaving_cancels_and_is_absorbed() -> None:
    gone = asyncio.Event()
    outcome: list[str] = []

    async def handler() -> None:
        watch = CallerWatch(gone.wait)
        watch.start()
        try:
            await asyncio.sleep(30)
            outcome.append("finished")
        except asyncio.CancelledError:
            outcome.append("caught" if watch.caught() else "raised")
            if outcome[-1] == "raised":
                raise
        finally:
            watch.stop()

    task = asyncio.ensure_future(handler())
    await asyncio.sleep(0)
    gone.set()
    await task
    assert outcome == ["caught"]
    assert task.cancelling() == 0  # absorbed: nothing left pending on the task


async def test_other_cancellations_pass_through_and_stop_unhooks() -> None:
    never = asyncio.Event()

    async def handler() -> None:
        watch = CallerWatch(never.wait)
        watch.start()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            assert not watch.caught()
            raise
        finally:
            watch.stop()

    task = asyncio.ensure_future(handler())
    await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_an_unstarted_watch_costs_nothing() -> None:
    calls = 0

    async def disconnected() -> None:
        nonlocal calls
        calls += 1

    watch = CallerWatch(disconnected)
    watch.stop()
    assert not watch.caught()
    assert calls == 0
