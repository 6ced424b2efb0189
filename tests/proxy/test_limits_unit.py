"""Pure pieces of the hardening work: admission counters, bearer tokens, the
tenant read, the access log's rendering and batching, the caller watch."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.accesslog import FLUSH_BYTES, AccessLog, Entry
from flatgate.proxy.plumbing.admission import Admission, Hold, Refusal
from flatgate.proxy.plumbing.auth import TokenCheck, bearer_token, hash_key
from flatgate.proxy.plumbing.serve import CallerWatch, Watchlist
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.request.route import read_route, read_tenant, tenant_present


def test_admission_bounds_requests_and_bytes() -> None:
    a = Admission(max_in_flight=2, max_bytes=100)
    first = a.admit(60)
    assert isinstance(first, Hold)
    assert a.admit(41) is Refusal.BUFFERED  # bytes: 101 > 100
    assert isinstance(a.admit(40), Hold)
    assert a.admit(0) is Refusal.IN_FLIGHT  # requests: 2 in flight
    assert (a.in_flight, a.held, a.refused) == (2, 100, 2)
    a.drop_body(first)
    a.done(first)  # its body was dropped already: not counted twice
    assert isinstance(a.admit(50), Hold)
    assert (a.in_flight, a.held) == (2, 90)


def test_admission_shares_per_caller_and_connection() -> None:
    a = Admission(100, 1000, caller_bytes=300, connection_bytes=200)
    one = a.admit(200, "acme", "10.0.0.1:1")
    assert isinstance(one, Hold)
    # The connection's share is spent, whoever asks on it.
    assert a.admit(1, "other", "10.0.0.1:1") is Refusal.CONNECTION
    assert isinstance(a.admit(100, "acme", "10.0.0.1:2"), Hold)
    # The caller's share is spent, on any connection.
    assert a.admit(1, "acme", "10.0.0.1:3") is Refusal.CALLER
    assert Refusal.CALLER.code is codes.CALLER_BUSY
    assert Refusal.BUFFERED.code is codes.SERVER_BUSY
    # Another caller still gets in; a trusted one (None) has no share.
    assert a.admit(300, "beta", "10.0.0.2:1") is Refusal.CONNECTION
    assert isinstance(a.admit(200, "beta", "10.0.0.2:1"), Hold)
    assert isinstance(a.admit(150, None, "10.0.0.3:1"), Hold)
    a.done(one)
    assert a.holding("acme") == 100
    assert isinstance(a.admit(200, "acme", "10.0.0.1:1"), Hold)
    assert a.held == 200 + 100 + 200 + 150


def test_a_hold_grows_within_the_shares_and_goes_with_the_body() -> None:
    a = Admission(100, 1000, caller_bytes=300, connection_bytes=250)
    hold = a.admit(100, "acme", "c1")
    assert isinstance(hold, Hold)
    assert a.grow(hold, 150) is None  # a chain charged as if it had been sent
    assert (hold.nbytes, a.holding("acme"), a.held) == (250, 250, 250)
    # Past the connection's share, then the caller's: nothing more is held.
    assert a.grow(hold, 1) is Refusal.CONNECTION
    other = a.admit(40, "acme", "c2")
    assert isinstance(other, Hold)
    assert a.grow(other, 20) is Refusal.CALLER
    assert (a.holding("acme"), a.refused) == (290, 2)
    a.drop_body(hold)  # what it grew by goes with its body
    assert (a.holding("acme"), a.held) == (40, 40)
    a.done(hold)
    a.done(other)
    assert (a.held, a.in_flight) == (0, 0)
    # The worker's own bound too.
    worker = Admission(100, 1000)
    big = worker.admit(900, None, "c3")
    assert isinstance(big, Hold) and worker.grow(big, 101) is Refusal.BUFFERED


def test_token_check() -> None:
    check = TokenCheck(hash_key("s3cret"))
    assert check.valid("Bearer s3cret") and check.valid("bearer  s3cret ")
    for bad in (None, "", "Bearer", "Bearer s3cret2", "Basic s3cret", "s3cret"):
        assert not check.valid(bad)
    assert bearer_token("Bearer abc") == "abc" and bearer_token("Token abc") is None


@pytest.mark.parametrize("tenant", ["", "acme", "t" * 300, "ünï"])
def test_tenant_read_in_place(tenant: str) -> None:
    body = build_request("m", [("user", "hi")], tenant=tenant, request_id="r")
    read_route(body)  # what the proxy checks first
    assert tenant_present(body) == bool(tenant)
    assert read_tenant(body) == (tenant.encode()[:128].decode("utf-8", "replace") or None)


def test_tenant_read_never_raises_on_a_bad_offset() -> None:
    body = bytearray(build_request("m", [("user", "hi")], tenant="acme"))
    at = bytes(body).index(b"acme") - 4  # the string's length prefix
    body[at : at + 4] = (len(body) * 2).to_bytes(4, "little")
    assert read_tenant(bytes(body)) is None


def _entry(**fields: object) -> Entry:
    e = Entry()
    for k, v in fields.items():
        setattr(e, k, v)
    return e


def test_text_lines_quote_what_a_caller_chose() -> None:
    out: list[bytes] = []
    log = AccessLog("proxy", "text", write=out.append)
    log.write(
        _entry(
            request_id='evil" status=200 x="',
            tenant="acme",
            model="m\nforged=1",
            status=404,
            error="no_route",
        )
    )
    log.flush()
    (line,) = out[0].decode().splitlines()
    assert re.match(r"ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z service=proxy ", line)
    assert 'rid="evil\\" status=200 x=\\""' in line
    assert 'model="m\\nforged=1"' in line
    assert " status=404 " in line and line.endswith(" tokens=- error=no_route")


def test_json_lines_and_cut_values() -> None:
    out: list[bytes] = []
    log = AccessLog("edge", "json", write=out.append)
    log.write(_entry(request_id="r1", model="x" * 500, status=200, tokens=7, bytes_in=10))
    log.flush()
    rec = json.loads(out[0])
    assert rec["service"] == "edge" and rec["request_id"] == "r1"
    assert rec["model"] == "x" * 128 and rec["completion_tokens"] == 7
    assert rec["tenant"] is None and rec["ttfb_ms"] is None and rec["duration_ms"] >= 0


def test_lines_are_written_in_whole_line_batches_under_pipe_buf() -> None:
    out: list[bytes] = []
    log = AccessLog("proxy", "text", write=out.append)
    for i in range(200):
        log.write(_entry(request_id=f"r{i}", status=200))
    log.flush()
    assert all(len(batch) <= FLUSH_BYTES and batch.endswith(b"\n") for batch in out)
    lines = b"".join(out).decode().splitlines()
    assert [re.search(r"rid=(\S+)", line)[1] for line in lines] == [  # type: ignore[index]
        f"r{i}" for i in range(200)
    ]


def test_disabled_log_writes_nothing() -> None:
    out: list[bytes] = []
    log = AccessLog("proxy", enabled=False, write=out.append)
    log.write(_entry(status=200))
    log.flush()
    assert out == []


async def test_a_buffered_line_goes_out_on_a_timer() -> None:
    out: list[bytes] = []
    log = AccessLog("proxy", write=out.append)
    log.write(_entry(status=200))
    assert out == []
    await asyncio.sleep(0.7)
    assert len(out) == 1


async def test_a_watch_on_the_list_starts_and_cancels_its_task() -> None:
    gone = asyncio.Event()
    watchlist = Watchlist(0.02)

    async def handler() -> str:
        watch = CallerWatch(gone.wait)
        watchlist.add(watch)
        try:
            await asyncio.sleep(10)
            return "finished"
        except asyncio.CancelledError:
            assert watch.caught()
            return "caller left"
        finally:
            watch.stop()

    task = asyncio.ensure_future(handler())
    await asyncio.sleep(0.1)
    gone.set()
    assert await task == "caller left"


async def test_a_quick_answer_costs_no_task_and_the_list_empties() -> None:
    watchlist = Watchlist(0.02)

    async def handler() -> int:
        before = len(asyncio.all_tasks())
        for _ in range(100):
            watch = CallerWatch(asyncio.Event().wait)
            watchlist.add(watch)
            watch.stop()
        await asyncio.sleep(0.1)
        return len(asyncio.all_tasks()) - before

    assert await handler() == 0
    assert watchlist._young == watchlist._old == [] and watchlist._handle is None
