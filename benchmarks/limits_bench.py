"""What the limiter costs a request: the memory store's path in process, and
the Redis store's round trip on loopback.

Run: ``.venv/bin/python -m benchmarks.limits_bench [--requests N] [--rounds R]
[--redis-url URL]``

Memory rows drive ``Limiter.acquire`` (and ``settle``, and
``Decision.headers``) in one coroutine, awaited the way the apps await it, on
a ``MemoryStore`` with limits high enough never to refuse; the fastest of
``--rounds`` rounds is reported. "match" is ``RuleSet.plan`` alone (a cache
hit). Redis rows time ``acquire`` (one ``EVALSHA``, the scripts reading
Redis' ``TIME``) and ``settle`` (one pipeline), one after another on one
event loop (uvloop when installed), against
``--redis-url`` or a ``redis-server`` the bench starts on a free loopback
port (``--save '' --appendonly no``); p50 and p99 of the wall time of each
call. On a shared machine, run it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from benchmarks.codecs.flatgate import translate_json
from benchmarks.harness.servers import ServerGroup, find_tool
from benchmarks.inmemory import drive
from benchmarks.payloads import make_request
from flatgate.edge_translator.keys import Credential, Identity
from flatgate.edge_translator.settings import ModelConfig, parse_edge_settings
from flatgate.edge_translator.tenancy import Tenancy
from flatgate.proxy.limits import Decision, Limiter, MemoryStore, parse_limits
from flatgate.proxy.wire.chunk.frames import Usage

__all__ = ["CONFIGS", "edge_rows", "main", "memory_rows", "redis_rows", "redis_server"]

T = TypeVar("T")
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
        raise SystemExit("redis-server is not installed (tests/setup_redis.sh installs it)")
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
            d: Decision = await lim.acquire("acme", "gpt-4o", 100)
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


async def _client_cpu(url: str, n: int) -> float:
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
            await lim.acquire("acme", "gpt-4o", 100)
        started = time.process_time()
        for _ in range(n):
            await lim.acquire("acme", "gpt-4o", 100)
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
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    rows = []
    for name in ("rpm + tpm + max_concurrent", "rpm + tpm"):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            times = runner.run(_redis_times(url, n, CONFIGS[name]))
        for op, values in times.items():
            values.sort()
            p50 = statistics.median(values) * 1e6
            p99 = values[int(len(values) * 0.99)] * 1e6
            rows.append((name, op, p50, p99))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis-requests", type=int, default=5_000)
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--no-redis", action="store_true")
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
    print("\n| rules | op | Redis round trip p50 (µs) | p99 (µs) |")
    print("|---|---|---|---|")
    with contextlib.ExitStack() as stack:
        url = args.redis_url or stack.enter_context(redis_server())
        for name, op, p50, p99 in redis_rows(url, args.redis_requests):
            print(f"| {name} | {op} | {p50:.0f} | {p99:.0f} |")
        with asyncio.Runner() as runner:
            cpu = runner.run(_client_cpu(url, args.redis_requests))
            print(f"\nClient CPU per acquire (rpm + tpm + max_concurrent): {cpu:.1f} µs")
            print(runner.run(_holds(url, workers=4, clients=32, seconds=3.0, rpm=600)))


if __name__ == "__main__":
    main()
