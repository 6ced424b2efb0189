"""What the limiter costs a request: the memory store's path in process, and
the Redis store's round trip on loopback, on one Redis, a Redis Cluster and
Sentinel side by side; and how long a failover leaves the limits unanswered.

Run: ``.venv/bin/python -m benchmarks.limits_bench [--requests N] [--rounds R]
[--redis-requests N] [--redis-url URL] [--no-topologies] [--sentinels 1|3]``

Memory rows drive ``Limiter.acquire`` (and ``settle``, and
``Decision.headers``) in one coroutine, awaited the way the apps await it, on
a ``MemoryStore`` with limits high enough never to refuse; the fastest of
``--rounds`` rounds is reported. "match" is ``RuleSet.plan`` alone (a cache
hit). Store rows, for each of ``redis://`` (``--redis-url`` or a
``redis-server`` the bench starts on a free loopback port, ``--save ''
--appendonly no``), ``redis+cluster://`` (3 masters, one replica each) and
``redis+sentinel://`` (a primary, a replica, ``--sentinels`` sentinels; the
topologies are ``benchmarks.limits_topology``'s): this process's CPU (user +
system) per ``acquire``, and the wall time of each ``acquire`` (one
``EVALSHA``, the scripts reading Redis' ``TIME``) and ``settle`` (one
pipeline), one after another on one event loop (uvloop when installed), p50
and p99. The failover gap: SIGKILL the node serving the tenant (the
cluster's master of its slot, then ``CLUSTER FAILOVER TAKEOVER`` on its
replica at once; Sentinel's primary, failed over by the sentinels:
down-after-milliseconds 1000, failover-timeout 5000, quorum 2 of 3 or 1 of
1), then an ``acquire`` every 10 ms (the default ``timeout_ms``, 50) until
one is answered by the store again; the seconds from the kill, and the
``on_store_error`` outcomes meanwhile. On a shared machine, run it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import platform
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import msgspec
import uvloop

from benchmarks.codecs.flatgate import translate_json
from benchmarks.harness.servers import ServerGroup, find_tool
from benchmarks.inmemory import drive
from benchmarks.limits_topology import Cluster, Sentinels, running_cluster, running_sentinel
from benchmarks.payloads import make_request
from flatgate.edge_translator.keys import Credential, Identity
from flatgate.edge_translator.settings import ModelConfig, parse_edge_settings
from flatgate.edge_translator.tenancy import Tenancy
from flatgate.proxy.limits import Decision, Limiter, MemoryStore, Outcome, parse_limits
from flatgate.proxy.limits.health import StoreHealth
from flatgate.proxy.limits.rediscluster import key_slot
from flatgate.proxy.wire.chunk.frames import Usage

__all__ = [
    "CONFIGS",
    "TENANT",
    "Gap",
    "StoreRow",
    "client_cpu",
    "cluster_gap",
    "edge_rows",
    "failover_gap",
    "main",
    "memory_rows",
    "redis_rows",
    "redis_server",
    "sentinel_gap",
    "store_rows",
    "tenant_slot",
]

T = TypeVar("T")
# The tenant of the Redis rows (on a cluster: its slot's master serves them all).
TENANT = "acme"
BIG = 10**12
# Two rules, three checks each way: a tenant-wide rate pair, and a model
# glob's concurrency (or day budget).
CONFIGS: dict[str, list[dict[str, Any]]] = {
    "rpm + tpm + max_concurrent": [
        {"tenant": "*", "requests_per_minute": BIG, "tokens_per_minute": BIG},
        {"tenant": "*", "model": "gpt-*", "max_concurrent": BIG},
    ],
    "rpm + tpm + tokens_per_day": [
        {"tenant": "*", "requests_per_minute": BIG, "tokens_per_minute": BIG},
        {"tenant": "*", "model": "gpt-*", "tokens_per_day": BIG},
    ],
    "rpm + tpm": [{"tenant": "*", "requests_per_minute": BIG, "tokens_per_minute": BIG}],
}


class StoreRow(NamedTuple):
    """One store's figures: its ``kind``, the client ``cpu`` per acquire (µs)
    and ``times``, ``redis_rows``' ``(rules, op, p50, p99)``."""

    kind: str
    cpu: float
    times: list[tuple[str, str, float, float]]


async def _acquires(lim: Limiter, n: int, settle: bool, headers: bool) -> float:
    acquire = lim.acquire
    started = time.perf_counter()
    for _ in range(n):
        d = await acquire("acme", "gpt-4o", 100)
        if settle:
            lim.settle(d.lease, 90)
        if headers:
            d.headers()
    return time.perf_counter() - started


def memory_rows(n: int, rounds: int) -> list[tuple[str, str, float]]:
    rows = []
    for name, limits in CONFIGS.items():
        config = parse_limits({"limits": limits}, environ={})
        for what, settle, headers in (
            ("acquire", False, False),
            ("acquire + settle", True, False),
            ("acquire + settle + headers", True, True),
        ):
            lim = Limiter(config, MemoryStore())
            drive(_acquires(lim, 1000, settle, headers))
            best = min(drive(_acquires(lim, n, settle, headers)) for _ in range(rounds))
            rows.append((name, what, best / n * 1e6))
    lim = Limiter(parse_limits({"limits": CONFIGS["rpm + tpm + max_concurrent"]}, environ={}))
    plan = lim.rules.plan
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(n):
            plan("acme", "gpt-4o")
        best = min(best, time.perf_counter() - started)
    rows.append(("(any)", "match (plan cache hit)", best / n * 1e6))
    return rows


async def _in_a_loop(fn: Callable[[int, int], T], n: int, rounds: int) -> T:
    """``fn`` run inside a running event loop (the edge arms timers on it)."""
    return fn(n, rounds)


def edge_rows(n: int, rounds: int) -> list[tuple[str, float]]:
    """What the edge's ``Tenancy`` adds to one request, in process on the
    memory store: the allow-list check, the admit (the prompt estimate of a
    2 KB, 4-message request when a token limit applies, the acquire, the rate
    headers) and the settle to a reported usage; CPU µs, best round."""
    body = msgspec.json.encode(make_request(1700, 1, messages=4, tools=0))
    models = {"gpt-4o-mini": ModelConfig("gpt-4o-mini", "OpenAI")}
    frame = translate_json(body, models=models, tenant="acme")
    identity = Identity("acme", Credential.KEY)
    usage = Usage(prompt_tokens=500, completion_tokens=10)
    rows = []
    for name, limits in [("no limits", []), *CONFIGS.items()]:
        settings = parse_edge_settings(
            {"models": [{"name": "gpt-4o", "provider": "OpenAI"}], "limits": limits}, environ={}
        )
        tenancy = Tenancy(settings)

        def one(t: Tenancy = tenancy) -> None:
            t.check(identity, "gpt-4o", "gpt-4o")
            admitted = drive(t.admit("acme", "gpt-4o", frame))
            t.settle("acme", "gpt-4o", admitted, usage, answered=True)

        for _ in range(1000):
            one()
        best = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(n):
                one()
            best = min(best, time.process_time() - started)
        rows.append((name, best / n * 1e6))
    return rows


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A ``redis-server`` on a free loopback port for the run (the load
    bench's ``ServerGroup.redis``), stopped after; its ``redis://`` URL."""
    binary = find_tool("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (tests/setup_tools.sh installs it)")
    with tempfile.TemporaryDirectory() as directory:
        group = ServerGroup(Path(directory))
        try:
            server = group.redis("redis", binary)
            failed = group.wait_healthy(seconds=10)
            if failed:
                raise SystemExit(f"redis-server did not start: {failed}")
            yield server.url
        finally:
            group.stop_all()


async def _redis_times(url: str, n: int, limits: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The wall time of each ``acquire``, and of each ``settle`` (sent alone,
    as it is when nothing else is in flight)."""
    config = parse_limits({"state": {"store": url, "timeout_ms": 1000}, "limits": limits}, {})
    lim = Limiter(config)
    times: dict[str, list[float]] = {"acquire": [], "settle": []}
    try:
        for i in range(n + 200):
            started = time.perf_counter()
            d: Decision = await lim.acquire(TENANT, "gpt-4o", 100)
            acquired = time.perf_counter()
            assert d.allowed and d.outcome.value == "allowed"
            lim.settle(d.lease, 90)
            await lim.flush()
            settled = time.perf_counter()
            if i >= 200:  # warm: the script cached, the connection open
                times["acquire"].append(acquired - started)
                times["settle"].append(settled - acquired)
    finally:
        await lim.aclose()
    return times


async def client_cpu(url: str, n: int) -> float:
    """This process's CPU (user + system) per ``acquire`` on Redis, in µs:
    what the limiter costs the gateway's worker (Redis' own CPU not counted)."""
    config = parse_limits(
        {
            "state": {"store": url, "timeout_ms": 1000},
            "limits": CONFIGS["rpm + tpm + max_concurrent"],
        },
        {},
    )
    lim = Limiter(config)
    try:
        for _ in range(200):
            await lim.acquire(TENANT, "gpt-4o", 100)
        started = time.process_time()
        for _ in range(n):
            await lim.acquire(TENANT, "gpt-4o", 100)
        return (time.process_time() - started) / n * 1e6
    finally:
        await lim.aclose()


async def _holds(url: str, workers: int, clients: int, seconds: float, rpm: int) -> str:
    """``clients`` callers over ``workers`` limiters (as many worker
    processes would have) on one Redis, as fast as they can for ``seconds``,
    against one ``requests_per_minute``: the count allowed, and the count GCRA
    allows between the first acquire and the last (``rpm`` at once, then
    ``rpm`` a minute)."""
    prefix = f"hold{time.time_ns()}"
    config = parse_limits(
        {
            "state": {"store": url, "timeout_ms": 1000, "key_prefix": prefix},
            "limits": [{"tenant": "acme", "requests_per_minute": rpm}],
        },
        {},
    )
    limiters = [Limiter(config) for _ in range(workers)]
    allowed = refused = 0
    first = last = 0.0

    async def client(i: int, stop: float) -> None:
        nonlocal allowed, refused, last
        lim = limiters[i % workers]
        while time.perf_counter() < stop:
            d = await lim.acquire("acme", "m")
            last = time.perf_counter()
            if d.allowed:
                allowed += 1
            else:
                refused += 1

    try:
        first = time.perf_counter()
        stop = first + seconds
        await asyncio.gather(*(client(i, stop) for i in range(clients)))
    finally:
        for lim in limiters:
            await lim.aclose()
    span = last - first
    low, high = rpm + int(span * rpm / 60) - 1, rpm + int(span * rpm / 60) + 1
    verdict = "holds" if low <= allowed <= high else "DOES NOT HOLD"
    return (
        f"{clients} clients over {workers} limiters, {span:.2f} s, {rpm} requests/minute: "
        f"{allowed} allowed, {refused} refused; GCRA allows {low + 1} (±1 for the "
        f"clock at either end): {verdict}"
    )


def redis_rows(url: str, n: int) -> list[tuple[str, str, float, float]]:
    rows = []
    for name in ("rpm + tpm + max_concurrent", "rpm + tpm"):
        with _runner() as runner:
            times = runner.run(_redis_times(url, n, CONFIGS[name]))
        for op, values in times.items():
            values.sort()
            p50 = statistics.median(values) * 1e6
            p99 = values[int(len(values) * 0.99)] * 1e6
            rows.append((name, op, p50, p99))
    return rows


def _runner() -> asyncio.Runner:
    """A runner on uvloop (as the gateway runs)."""
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def store_rows(stores: Mapping[str, str], n: int) -> list[StoreRow]:
    """For each store (``kind: URL``), this process's CPU per ``acquire``
    (µs) and each rules' ``(rules, op, p50, p99)`` of ``redis_rows``."""
    rows = []
    for kind, url in stores.items():
        with _runner() as runner:
            cpu = runner.run(client_cpu(url, n))
        rows.append(StoreRow(kind, cpu, redis_rows(url, n)))
    return rows


def tenant_slot(tenant: str = TENANT) -> int:
    """The cluster slot of ``tenant``'s limit keys (``<prefix>:{<tenant>}:...``)."""
    limits = {"limits": CONFIGS["rpm + tpm + max_concurrent"]}
    keys = Limiter(parse_limits(limits, environ={})).rules.tenant_keys(tenant)
    return key_slot(keys[0])


class _Recorded(StoreHealth):
    """``StoreHealth`` that also counts why the store failed, by error type."""

    def __init__(self, name: str, policy: str) -> None:
        super().__init__(name, policy)
        self.reasons: Counter[str] = Counter()

    def failed(self, reason: str) -> None:
        self.reasons[reason.split(":", 1)[0]] += 1
        super().failed(reason)


@dataclass
class Gap:
    """From a kill until the store answered an acquire again: ``seconds``;
    the acquires' ``outcomes`` meanwhile (``"store_unavailable (allowed)"``,
    by count) and the store's ``reasons`` (error types, by count)."""

    seconds: float
    outcomes: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def seen(self) -> str:
        outcomes = ", ".join(f"{k}: {v}" for k, v in self.outcomes.items()) or "none"
        reasons = ", ".join(f"{k}: {v}" for k, v in self.reasons.items()) or "none"
        return f"{outcomes} (errors: {reasons})"


async def failover_gap(
    url: str,
    kill: Callable[[], object],
    *,
    on_store_error: str = "open",
    poll: float = 0.01,
    deadline: float = 60.0,
) -> Gap:
    """A limiter on ``url`` (the product's default ``timeout_ms``, 50),
    warmed; then ``kill()`` (a crash and whatever follows it at once), and
    an ``acquire`` for ``TENANT`` every ``poll`` seconds until one's outcome
    is not ``STORE_UNAVAILABLE``: the time from the kill to that answer."""
    config = parse_limits(
        {
            "state": {"store": url, "on_store_error": on_store_error},
            "limits": CONFIGS["rpm + tpm"],
        },
        {},
    )
    lim = Limiter(config)
    health = lim.health = _Recorded(lim.health.name, lim.health.policy)
    try:
        answered, warm_until = 0, time.perf_counter() + deadline
        while answered < 20:  # warm: the map or primary asked, connections open
            d = await lim.acquire(TENANT, "gpt-4o", 100)
            answered = 0 if d.outcome is Outcome.STORE_UNAVAILABLE else answered + 1
            if time.perf_counter() > warm_until:
                raise RuntimeError(f"{url} does not answer before the kill: {health.reasons}")
        health.reasons.clear()
        gap = Gap(0.0)
        started = time.perf_counter()
        kill()
        while time.perf_counter() - started < deadline:
            d = await lim.acquire(TENANT, "gpt-4o", 100)
            if d.outcome is not Outcome.STORE_UNAVAILABLE:
                gap.seconds = time.perf_counter() - started
                gap.reasons.update(health.reasons)
                return gap
            gap.outcomes[f"{d.outcome.value} ({'allowed' if d.allowed else 'refused'})"] += 1
            await asyncio.sleep(poll)
        raise RuntimeError(f"{url} did not answer within {deadline} s of the kill: {gap.seen()}")
    finally:
        await lim.aclose()


def cluster_gap(cluster: Cluster, **options: Any) -> tuple[Gap, str]:
    """``failover_gap`` on ``cluster``: SIGKILL the master of ``TENANT``'s
    slot, then ``CLUSTER FAILOVER TAKEOVER`` on its replica at once; and
    which nodes those were."""
    master = cluster.master_of(tenant_slot())
    replica = cluster.replica_of(master)

    def kill() -> None:
        cluster.kill(master)
        cluster.takeover(replica)

    with _runner() as runner:
        gap = runner.run(failover_gap(cluster.url, kill, **options))
    return gap, f"master {master} killed, replica {replica} took over"


def sentinel_gap(sentinels: Sentinels, **options: Any) -> tuple[Gap, str]:
    """``failover_gap`` on ``sentinels``: SIGKILL the primary; the sentinels
    fail over on their own."""
    killed: list[int] = []
    with _runner() as runner:
        gap = runner.run(
            failover_gap(sentinels.url, lambda: killed.append(sentinels.kill_primary()), **options)
        )
    return (
        gap,
        f"primary {killed[0]} killed; {len(sentinels.sentinels)} sentinels, "
        f"quorum {sentinels.quorum}",
    )


def _print_stores(rows: list[StoreRow], cluster_note: str) -> None:
    print("\nEach store: this process's CPU (user + system) per `Limiter.acquire`")
    print("(rpm + tpm + max_concurrent), and the wall time of each `acquire` and each")
    print(f"`settle` (flushed alone), p50 / p99 in µs; tenant {TENANT}{cluster_note}.\n")
    print("| rules | op | " + " | ".join(f"{r.kind} p50 / p99 (µs)" for r in rows) + " |")
    print("|---|---|" + "---|" * len(rows))
    for i, (name, op, _, _) in enumerate(rows[0].times):
        cells = " | ".join(f"{r.times[i][2]:.0f} / {r.times[i][3]:.0f}" for r in rows)
        print(f"| {name} | {op} | {cells} |")
    print(
        "| rpm + tpm + max_concurrent | client CPU per acquire (µs) | "
        + " | ".join(f"{r.cpu:.1f}" for r in rows)
        + " |"
    )


def _print_gaps(gaps: list[tuple[str, Gap, str]]) -> None:
    print("\nFailover gap: from the SIGKILL of the node serving the tenant until a")
    print("`Limiter.acquire` (polled every 10 ms, timeout_ms 50) is answered by the store")
    print("again (outcome not store_unavailable); on_store_error = open meanwhile.\n")
    print("| store | what happened | gap (s) | outcomes while it lasted |")
    print("|---|---|---|---|")
    for kind, gap, what in gaps:
        print(f"| {kind} | {what} | {gap.seconds:.2f} | {gap.seen()} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis-requests", type=int, default=5_000)
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument(
        "--no-topologies", action="store_true", help="one Redis only: no cluster, no Sentinel"
    )
    parser.add_argument("--sentinels", type=int, default=3, choices=(1, 3))
    args = parser.parse_args(argv)
    print(f"# Limiter cost ({platform.python_version()}, {platform.machine()}, {time.ctime()})\n")
    print("| rules | op | µs per request (memory store, best round) |")
    print("|---|---|---|")
    for name, what, us in memory_rows(args.requests, args.rounds):
        print(f"| {name} | {what} | {us:.2f} |")
    print("\n| rules | the edge's whole limits path per request (CPU µs, memory store) |")
    print("|---|---|")
    for name, us in asyncio.run(_in_a_loop(edge_rows, args.requests // 10, args.rounds)):
        print(f"| {name} | {us:.2f} |")
    if args.no_redis:
        return
    # The outages are the point: their reasons are in the table, not the log.
    logging.getLogger("flatgate.limits").setLevel(logging.ERROR)
    with contextlib.ExitStack() as stack:
        stores = {"one Redis": args.redis_url or stack.enter_context(redis_server())}
        note = ""
        if not args.no_topologies:
            cluster = stack.enter_context(running_cluster())
            sentinels = stack.enter_context(running_sentinel(args.sentinels))
            stores["Cluster (3 masters + 3 replicas)"] = cluster.url
            stores[f"Sentinel (1 + 1, {args.sentinels} sentinels)"] = sentinels.url
            slot = tenant_slot()
            note = f" (on the cluster: slot {slot}, master {cluster.master_of(slot)})"
        _print_stores(store_rows(stores, args.redis_requests), note)
        with asyncio.Runner() as runner:
            held = runner.run(
                _holds(stores["one Redis"], workers=4, clients=32, seconds=3.0, rpm=600)
            )
            print(f"\nOne requests_per_minute shared on one Redis: {held}")
        if not args.no_topologies:
            cluster_kind, sentinel_kind = list(stores)[1:]
            _print_gaps(
                [
                    (cluster_kind, *cluster_gap(cluster)),
                    (sentinel_kind, *sentinel_gap(sentinels)),
                ]
            )


if __name__ == "__main__":
    main()
