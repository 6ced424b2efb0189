"""Drain (one worker's view of a graceful stop) and ServerApp's installing it."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from flatgate.proxy.gateway.server import DrainingServer
from flatgate.proxy.plumbing.drain import DRAIN_SIGNAL, HOLDS_ENV, Drain, hold_marker
from flatgate.proxy.plumbing.serve import Exchange, ServerApp
from tests.edge import fakes


def test_timings_and_their_validation() -> None:
    assert Drain().end_after == 29.0  # seconds less the margin, from begin()
    assert Drain(grace=1, seconds=2, margin=1).end_after == 1.5  # after the grace
    assert Drain(grace=0, seconds=0.2).end_after == pytest.approx(0.1)
    for grace, seconds, margin in ((-1, 2, 1), (2, 2, 1), (3, 2, 1), (0, 2, -1)):
        with pytest.raises(ValueError, match="Drain"):
            Drain(grace, seconds, margin)


async def test_the_deadline_ends_what_is_tracked_once() -> None:
    drain = Drain(grace=0, seconds=0.1, margin=0.05)
    ended: list[str] = []
    assert not drain.draining
    untrack_a = drain.track(lambda: ended.append("a"))
    untrack_b = drain.track(lambda: ended.append("b"))
    drain.track(lambda: ended.append("c"))
    untrack_b()
    untrack_b()  # idempotent
    assert drain.tracked == 2
    drain.begin()
    drain.begin()  # idempotent: one deadline
    assert drain.draining
    await asyncio.sleep(0.02)
    assert ended == []  # not before the deadline
    await asyncio.sleep(0.1)
    assert sorted(ended) == ["a", "c"]
    assert drain.tracked == 0
    untrack_a()  # after the deadline: harmless
    await asyncio.sleep(0.1)
    assert sorted(ended) == ["a", "c"]  # once each


async def test_a_stream_tracked_after_the_deadline_is_ended_at_once() -> None:
    drain = Drain(grace=0, seconds=0.02, margin=0)
    drain.begin()
    await asyncio.sleep(0.05)
    ended: list[int] = []
    drain.track(lambda: ended.append(1))()
    await asyncio.sleep(0)
    assert ended == [1]


async def test_a_failing_end_callback_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    drain = Drain(grace=0, seconds=0.02, margin=0)
    ended: list[int] = []

    def broken() -> None:
        raise RuntimeError("boom")

    drain.track(broken)
    drain.track(lambda: ended.append(1))
    drain.begin()
    await asyncio.sleep(0.05)
    assert ended == [1]
    assert "end callback failed" in caplog.text


def test_a_hold_marks_its_worker_until_the_last_release(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While any hold is taken, the worker's marker is in the directory the
    server's main process names (the main process waits for it to go)."""
    monkeypatch.setenv(HOLDS_ENV, str(tmp_path))
    marker = hold_marker(str(tmp_path), os.getpid())
    drain = Drain()
    first, second = drain.hold(), drain.hold()
    assert drain.holds == 2 and os.path.exists(marker)
    first()
    first()  # idempotent: counted once
    assert drain.holds == 1 and os.path.exists(marker)
    second()
    assert drain.holds == 0 and not os.path.exists(marker)
    monkeypatch.delenv(HOLDS_ENV)
    drain.hold()()  # no directory named: counted, nothing marked
    assert drain.holds == 0 and os.listdir(tmp_path) == []


def test_begin_needs_a_loop() -> None:
    drain = Drain()
    with pytest.raises(RuntimeError, match="install"):
        drain.begin()
    assert not drain.draining


async def test_install_makes_the_signal_begin_the_drain() -> None:
    assert DRAIN_SIGNAL is not None
    loop = asyncio.get_running_loop()
    drain = Drain(grace=0, seconds=5)
    drain.install(loop)
    try:
        os.kill(os.getpid(), DRAIN_SIGNAL)
        for _ in range(100):
            if drain.draining:
                break
            await asyncio.sleep(0.01)
        assert drain.draining
    finally:
        loop.remove_signal_handler(DRAIN_SIGNAL)


class RecordingDrain(Drain):
    def __init__(self) -> None:
        super().__init__()
        self.installs: list[asyncio.AbstractEventLoop] = []

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self.installs.append(loop)


async def ok(ex: Exchange) -> None:
    await ex.respond(200, [], b"ok")


async def test_server_app_installs_on_rsgi_init_once() -> None:
    drain = RecordingDrain()
    app = ServerApp(ok, drain)
    loop = asyncio.get_running_loop()
    app.__rsgi_init__(loop)
    await app.__rsgi__(fakes.Scope("GET", "/"), fakes.Protocol())
    await app.__rsgi__(fakes.Scope("GET", "/"), fakes.Protocol())
    assert drain.installs == [loop]


async def test_server_app_installs_lazily_on_the_first_request() -> None:
    drain = RecordingDrain()
    app = ServerApp(ok, drain)
    proto = fakes.Protocol()
    await app.__rsgi__(fakes.Scope("GET", "/"), proto)
    await app.__rsgi__(fakes.Scope("GET", "/"), fakes.Protocol())
    assert proto.status == 200
    assert drain.installs == [asyncio.get_running_loop()]

    drain = RecordingDrain()
    app = ServerApp(ok, drain)
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
    await app(scope, receive, send)
    await app(scope, receive, send)
    assert drain.installs == [asyncio.get_running_loop()]
    assert sent[0]["status"] == 200


async def test_server_app_installs_on_asgi_lifespan_startup() -> None:
    drain = RecordingDrain()
    app = ServerApp(ok, drain)
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(message["type"])

    await app({"type": "lifespan"}, receive, send)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert drain.installs == [asyncio.get_running_loop()]


async def test_server_app_without_a_drain_installs_nothing() -> None:
    app = ServerApp(ok)
    app.__rsgi_init__(asyncio.get_running_loop())
    await app.__rsgi__(fakes.Scope("GET", "/"), fakes.Protocol())
    if DRAIN_SIGNAL is not None:
        assert signal.getsignal(DRAIN_SIGNAL) in (signal.SIG_DFL, signal.SIG_IGN)


def test_draining_server_checks_its_timings() -> None:
    # Refused before granian is set up (it would configure this process's logging).
    for grace, seconds in ((3, 3), (-1, 3)):
        with pytest.raises(ValueError, match="grace < seconds"):
            DrainingServer("x:y", grace=grace, seconds=seconds)
