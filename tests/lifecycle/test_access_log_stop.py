"""The access log on the way out, without processes: a drain's beginning makes
it write each line at once, and ``ServerApp`` writes what it kept when the
worker stops (ASGI's ``lifespan.shutdown``, RSGI's ``__rsgi_del__``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from flatgate.proxy.plumbing.accesslog import AccessLog, Entry
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.serve import Exchange, ServerApp


def entry(rid: str) -> Entry:
    e = Entry()
    e.request_id, e.status = rid, 200
    return e


def logged(out: list[bytes]) -> list[str]:
    return [json.loads(line)["request_id"] for chunk in out for line in chunk.splitlines()]


async def test_unbatch_writes_what_is_kept_then_each_line_as_it_comes() -> None:
    out: list[bytes] = []
    log = AccessLog("proxy", "json", write=out.append)
    log.write(entry("a"))
    log.write(entry("b"))
    assert out == []  # batched, on a running loop
    log.unbatch()
    assert logged(out) == ["a", "b"]
    log.write(entry("c"))
    assert logged(out) == ["a", "b", "c"]  # at once, no timer


async def test_on_begin_runs_once_at_begin_or_at_once_after() -> None:
    drain = Drain(grace=0, seconds=10)
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    drain.on_begin(lambda: calls.append("early"))
    drain.on_begin(broken)  # does not keep the others from running
    drain.on_begin(lambda: calls.append("later"))
    assert calls == []
    drain.begin()
    drain.begin()
    assert calls == ["early", "later"]
    drain.on_begin(lambda: calls.append("late"))
    assert calls == ["early", "later", "late"]


async def ok(ex: Exchange) -> None:
    await ex.respond(200, [], b"ok")


async def test_a_drain_unbatches_the_apps_access_logs() -> None:
    out: list[bytes] = []
    log = AccessLog("edge", "json", write=out.append)
    drain = Drain(grace=0, seconds=10)
    ServerApp(ok, drain, access_logs=[log])
    log.write(entry("kept"))
    assert out == []
    drain.begin()
    assert logged(out) == ["kept"]
    log.write(entry("during"))
    assert logged(out) == ["kept", "during"]


async def test_rsgi_del_writes_what_is_kept() -> None:
    out: list[bytes] = []
    log = AccessLog("proxy", "json", write=out.append)
    app = ServerApp(ok, access_logs=[log])
    loop = asyncio.get_running_loop()
    app.__rsgi_init__(loop)
    log.write(entry("r1"))
    assert out == []
    app.__rsgi_del__(loop)
    assert logged(out) == ["r1"]


async def test_lifespan_shutdown_writes_what_is_kept() -> None:
    out: list[bytes] = []
    log = AccessLog("proxy", "json", write=out.append)
    app = ServerApp(ok, access_logs=[log])
    sent: list[str] = []
    startup: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def receive() -> dict[str, Any]:
        return await startup.get()

    async def send(message: Any) -> None:
        sent.append(message["type"])
        if message["type"] == "lifespan.shutdown.complete":
            # What was written before the shutdown is out by the time it completes.
            assert logged(out) == ["l1"]

    lifespan = asyncio.ensure_future(app({"type": "lifespan"}, receive, send))
    await startup.put({"type": "lifespan.startup"})
    log.write(entry("l1"))
    await asyncio.sleep(0)
    assert out == []
    await startup.put({"type": "lifespan.shutdown"})
    await lifespan
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert logged(out) == ["l1"]
