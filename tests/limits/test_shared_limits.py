"""Tenants' limits shared through Redis by real ``flatgate gateway`` processes:
one count for every worker of every instance (exactly what GCRA allows in the
run's measured time), a store outage under either ``on_store_error`` policy
(one log line per change of state, recovery by itself), and the per-day usage
the store keeps."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from flatgate.proxy.limits.algorithms import PERIOD, TOLERANCE, utc_day
from tests.redisserver import RedisServer, unique_prefix
from tests.servers import Server, running
from tests.stacks import QUIET, Fields, write_stack

pytestmark = pytest.mark.integration

ACME = "sk-acme-shared-limits"
GLOBEX = "sk-globex-shared-limits"
RPM = 60  # acme's requests_per_minute in the two-instance stack
OUTAGE_RPM = 3  # acme's in the outage test: 20 s per request refilled
HEALTH = "limits: store"  # how both of the store's health lines begin (limits.health)


def gateway_config(path: Path, stub: Server, state: Fields, limits: list[Fields]) -> str:
    """A gateway on ``stub``'s model ``echo``, keys for acme and globex,
    ``[state]`` and ``[[limits]]`` as given, written to ``path``."""
    return write_stack(
        path,
        proxy=QUIET,
        backends={"fbs": stub.url},
        routes={"echo": "fbs"},
        edge=QUIET,
        models={"echo": "SelfHosted"},
        keys={ACME: "acme", GLOBEX: "globex"},
        state=state,
        limits=limits,
    )


@dataclass(frozen=True)
class Shot:
    """One request's answer and when it was sent and answered (Unix time:
    Redis' ``TIME``, which the limits read, is the same clock)."""

    sent: float
    answered: float
    status: int
    headers: httpx.Headers
    code: str | None
    type: str | None


async def post(client: httpx.AsyncClient, url: str, key: str, text: str = "hi") -> Shot:
    sent = time.time()
    r = await client.post(
        f"{url}/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": text}]},
        headers={"authorization": f"Bearer {key}"},
    )
    answered = time.time()
    error = r.json().get("error") if r.status_code != 200 else None
    code = error["code"] if error else None
    kind = error["type"] if error else None
    return Shot(sent, answered, r.status_code, r.headers, code, kind)


def rate_headers(shot: Shot) -> dict[str, str]:
    return {k: v for k, v in shot.headers.items() if k.startswith("x-ratelimit-")}


def metric(server: Server, name: str) -> float:
    """One unlabelled sample of the server's ``/metrics``."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics:\n{text}"
    return float(found.group(1))


def worker_connections(server: Server) -> list[int]:
    """The client connections each of the server's worker processes holds
    (Linux ``/proc``): a kept-alive connection has served a request."""
    pid = server.proc.pid
    workers = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    ours = set()
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state, inode = row.split()[1], row.split()[3], row.split()[9]
        if state == "01" and int(local.rsplit(":", 1)[1], 16) == server.port:  # ESTABLISHED
            ours.add(f"socket:[{inode}]")
    out = []
    for worker in workers:
        links = []
        for fd in Path(f"/proc/{worker}/fd").iterdir():
            with contextlib.suppress(OSError):  # closed since listed
                links.append(os.readlink(fd))
        out.append(sum(link in ours for link in links))
    return out


# A client's idle connection is kept for the whole test: httpx drops one idle
# for 5 s by default, and the next request may then land on another worker of
# the instance (seen once on a busy machine: a worker left with none).
_KEPT = httpx.Limits(keepalive_expiry=120.0)


async def clients_on_every_worker(servers: list[Server], at_least: int) -> list[httpx.AsyncClient]:
    """At least ``at_least`` clients, of which some hold a kept-alive
    connection to each worker of each of ``servers`` (new clients until
    each worker holds one; 20 s at most)."""
    clients: list[httpx.AsyncClient] = []
    deadline = time.monotonic() + 20
    for server in servers:
        while not all(worker_connections(server)):
            if time.monotonic() > deadline:
                for c in clients:
                    await c.aclose()
                raise AssertionError(f"a worker took no connection: {worker_connections(server)}")
            client = httpx.AsyncClient(timeout=60, limits=_KEPT)
            clients.append(client)
            assert (await client.get(f"{server.url}/healthz")).status_code == 200
    clients += [httpx.AsyncClient(timeout=60, limits=_KEPT) for _ in range(at_least - len(clients))]
    return clients


async def log_lines(server: Server, marker: str, at_least: int) -> list[str]:
    """The server's log lines holding ``marker``, once there are ``at_least``
    (or 5 s on: then the test fails on their count)."""
    deadline = time.monotonic() + 5
    while True:
        lines = [line for line in server.log.read_text().splitlines() if marker in line]
        if len(lines) >= at_least or time.monotonic() > deadline:
            return lines
        await asyncio.sleep(0.05)


async def usage(redis: RedisServer, prefix: str, dates: set[str]) -> dict[str, int]:
    """The usage hashes ``<prefix>:usage:<date>`` of ``dates``, summed."""
    client = Redis.from_url(redis.url, decode_responses=True)
    try:
        out: dict[str, int] = {}
        for date in dates:
            for field, value in (await client.hgetall(f"{prefix}:usage:{date}")).items():
                out[str(field)] = out.get(str(field), 0) + int(value)
        return out
    finally:
        await client.aclose()


def gcra_bounds(shots: Sequence[Shot], rpm: int) -> tuple[int, int]:
    """How many of ``shots`` one GCRA count of ``rpm`` a minute may pass,
    at least and at most. GCRA at N per minute passes a request when the
    tat it moves to is at most PERIOD (+ TOLERANCE) ahead: N at once, then
    N / PERIOD per second. Every acquire ran in Redis between the first
    send and the last answer (d_max); the first ran before the first answer
    and the last refusal after its send, when the count had reached
    N + floor(elapsed) (d_min)."""
    refused = [s for s in shots if s.status == 429]
    assert refused, "nothing was refused"
    rate = rpm / PERIOD
    d_max = max(s.answered for s in shots) - min(s.sent for s in shots)
    d_min = max(0.0, max(s.sent for s in refused) - min(s.answered for s in shots))
    low = rpm + math.floor(d_min * rate)
    high = rpm + math.floor(d_max * rate + TOLERANCE)
    assert high < 2 * rpm, f"the run took {d_max:.1f} s: too slow to tell one count from two"
    return low, high


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("stub", [], tmp_path_factory.mktemp("stub")) as server:
        yield server


@dataclass
class Pair:
    """Two gateway instances of two workers each over one Redis store."""

    a: Server
    b: Server
    redis: RedisServer
    prefix: str


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, stub: Server, shared_redis: RedisServer
) -> Iterator[Pair]:
    d = tmp_path_factory.mktemp("pair")
    prefix = unique_prefix()
    # "closed", and a generous timeout: a slow store must show as 503s, never
    # let requests through uncounted.
    state = {
        "store": shared_redis.url,
        "key_prefix": prefix,
        "on_store_error": "closed",
        "timeout_ms": 5000,
    }
    limits: list[Fields] = [
        {"tenant": "acme", "model": "*", "requests_per_minute": RPM},
        {"tenant": "globex", "model": "echo", "requests_per_minute": 100000},
    ]
    cfg = gateway_config(d / "g.toml", stub, state, limits)
    args = ["--config", cfg, "--workers", "2"]
    with running("gateway", args, d) as a, running("gateway", args, d) as b:
        yield Pair(a, b, shared_redis, prefix)


async def test_one_count_across_instances_and_workers(pair: Pair) -> None:
    """200 requests round-robin over two instances (four workers) get exactly
    what one GCRA count allows in the run's time; a count per worker would let
    all 200 through, a count per instance at least 120."""
    total, concurrency, spread = 200, 24, 3.0
    urls = [pair.a.url, pair.b.url]
    shots: list[Shot] = []
    turns = iter(range(total))

    async def client_loop(client: httpx.AsyncClient, start: float) -> None:
        for i in turns:  # shared: each request is taken once
            await asyncio.sleep(start + i * spread / total - time.monotonic())
            shots.append(await post(client, urls[i % 2], ACME))

    # A client (and so a connection to each instance) per loop, the first
    # ones opened until every worker of each instance holds one of their
    # connections (the kernel hands a connection to whichever worker accepts
    # first: on a busy machine one worker may take them all), so that all
    # four serve the run. Paced over `spread` seconds (still ~67 a second,
    # far above the refill), so that the count includes a few seconds'
    # refill, not the burst alone.
    # What each worker held is sampled through the run, the most kept:
    # connections close during it (seen on a busy machine: at the end the
    # four workers held 2, 4, 1 and 0 of the clients' 48), and a client with
    # an idle connection to a worker sends its next request to that instance
    # on it, so a worker seen holding one has answered or is about to.
    clients = await clients_on_every_worker([pair.a, pair.b], concurrency)
    held = [worker_connections(pair.a), worker_connections(pair.b)]
    running = True

    async def sample() -> None:
        while running:
            for i, server in enumerate((pair.a, pair.b)):
                now = worker_connections(server)
                held[i] = [max(x, y) for x, y in zip(held[i], now, strict=True)]
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        start = time.monotonic()
        await asyncio.gather(*(client_loop(c, start) for c in clients))
    finally:
        running = False
        await sampler
        for c in clients:
            await c.aclose()
    assert all(len(h) == 2 and min(h) > 0 for h in held), held  # all four answered

    ok = [s for s in shots if s.status == 200]
    refused = [s for s in shots if s.status == 429]
    others = [(s.status, s.code) for s in shots if s.status not in (200, 429)]
    assert len(shots) == total and not others, others[:5]
    assert refused, "nothing was refused"
    for s in refused:
        assert (s.code, s.type) == ("tenant_rate_limited", "rate_limit_error")
        assert int(s.headers["retry-after"]) >= 1
    for s in ok:
        assert s.headers["x-ratelimit-limit-requests"] == str(RPM)

    low, high = gcra_bounds(shots, RPM)
    print(f"allowed {len(ok)}, bound [{low}, {high}]")
    assert low <= len(ok) <= high

    # The store's per-day usage counts every answered request, whichever
    # worker of whichever instance answered it (recorded in the background).
    dates = {utc_day(min(s.sent for s in shots))[0], utc_day(time.time())[0]}
    field = "acme:echo:requests"
    deadline = time.monotonic() + 10
    while (await usage(pair.redis, pair.prefix, dates)).get(field) != len(ok):
        assert time.monotonic() < deadline, await usage(pair.redis, pair.prefix, dates)
        await asyncio.sleep(0.1)


async def test_usage_per_day_in_the_store(pair: Pair) -> None:
    """Each answered request's tokens, per tenant and model, in the hash
    ``<key_prefix>:usage:<UTC date>``, summed over both instances."""
    texts = ["one two three", "four five", "six", "seven eight nine ten"]
    async with httpx.AsyncClient(timeout=30) as client:
        start = time.time()
        shots = [
            await post(client, (pair.a, pair.b)[i % 2].url, GLOBEX, t) for i, t in enumerate(texts)
        ]
    assert [s.status for s in shots] == [200] * len(texts)
    dates = {utc_day(start)[0], utc_day(time.time())[0]}
    want = {
        "globex:echo:requests": len(texts),
        "globex:echo:completion_tokens": sum(len(t.split()) for t in texts),
    }
    deadline = time.monotonic() + 10
    while True:
        found = await usage(pair.redis, pair.prefix, dates)
        got = {k: found.get(k) for k in want}
        if got == want or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert got == want
    assert found["globex:echo:prompt_tokens"] > 0


@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_a_store_outage_and_its_recovery(
    policy: str, stub: Server, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Redis killed mid-run: requests pass unlimited ("open") or get 503
    ``limits_unavailable`` ("closed"), one log line says so, the gauge reads 0;
    Redis back on the same port: the limits apply again by themselves."""
    state = {
        "store": redis_server.url,
        "key_prefix": unique_prefix(),
        "on_store_error": policy,
        "timeout_ms": 1000,
    }
    limits: list[Fields] = [{"tenant": "acme", "requests_per_minute": OUTAGE_RPM}]
    cfg = gateway_config(tmp_path / "g.toml", stub, state, limits)
    with running("gateway", ["--config", cfg, "--workers", "1"], tmp_path) as gw:
        async with httpx.AsyncClient(timeout=30) as client:
            before = [await post(client, gw.url, ACME) for _ in range(2)]
            assert [(s.status, s.headers["x-ratelimit-remaining-requests"]) for s in before] == [
                (200, "2"),
                (200, "1"),
            ]
            assert metric(gw, "flatgate_edge_limits_store_up") == 1.0

            redis_server.kill()
            during = [await post(client, gw.url, ACME) for _ in range(6)]
            for s in during:
                if policy == "open":
                    assert (s.status, rate_headers(s)) == (200, {})
                else:
                    assert (s.status, s.code) == (503, "limits_unavailable")
                    assert s.headers["retry-after"] == "1"
            assert gw.proc.poll() is None
            assert httpx.get(f"{gw.url}/healthz").status_code == 200
            assert metric(gw, "flatgate_edge_limits_store_up") == 0.0
            refused = 6.0 if policy == "closed" else 0.0
            assert (
                metric(gw, 'flatgate_edge_limits_refused_total{limit="store_unavailable"}')
                == refused
            )
            lines = await log_lines(gw, HEALTH, 1)
            assert len(lines) == 1 and "is unavailable" in lines[0], gw.log.read_text()

            redis_server.start()
            deadline = time.monotonic() + 10
            back = await post(client, gw.url, ACME)
            while not rate_headers(back):
                assert time.monotonic() < deadline, (back.status, back.code)
                await asyncio.sleep(0.1)
                back = await post(client, gw.url, ACME)
            # The restarted Redis kept nothing: a fresh count of OUTAGE_RPM.
            after = [back] + [await post(client, gw.url, ACME) for _ in range(OUTAGE_RPM)]
            assert [(s.status, s.headers["x-ratelimit-remaining-requests"]) for s in after] == [
                (200, "2"),
                (200, "1"),
                (200, "0"),
                (429, "0"),
            ]
            assert after[-1].code == "tenant_rate_limited" and "retry-after" in after[-1].headers
            assert metric(gw, "flatgate_edge_limits_store_up") == 1.0
            lines = await log_lines(gw, HEALTH, 2)
            assert len(lines) == 2 and "answers again" in lines[1], gw.log.read_text()
            assert gw.proc.poll() is None
