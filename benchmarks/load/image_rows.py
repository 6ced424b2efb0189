"""Images per MiB: an 8 MiB Claude Code-shaped request of four screenshots.

``python -m benchmarks.load.image_rows`` (a line of ``make bench-load``;
issue 43, item 5). One request (``benchmarks.load.image_bodies``: four PNG
screenshots of about 1.5 MiB each as base64, about 100 KB of text, a whole
answer) goes through each row, 8 requests in flight (8 keep-alive
connections, each a fixed number of requests one after the other):

| Row | What the client talks to |
|---|---|
| direct-anthropic, -openai, -fbs | the canned stub itself (Messages, Chat, ``.fbs``) |
| nginx-anthropic, -openai, -fbs | nginx, ``proxy_pass`` to the same stub, body in memory |
| gateway-messages, gateway-chat | ``flatgate gateway``, every request from one tenant's key |
| gateway-messages-8, gateway-chat-8 | the same gateway, rotating over eight tenants' keys |
| proxy-fbs | ``flatgate proxy`` with the edge's FlatBuffer of the Messages request |
| portkey-anthropic, portkey, litellm | the peers (``BENCH_PEERS=1``, where installed) |

Per row: requests a second, the hop's CPU (``/proc`` utime + stime of the
server's process tree over the run, every request of which has finished:
none is cut off in it) per request and per MiB of its own request body,
and its peak RSS: ``VmHWM`` of the tree's largest process
(granian's worker), reset (``/proc/PID/clear_refs``: 5) before each run, so
each figure is the peak of that row's run alone (it cannot fall below the
resident set at the run's start, which is reported beside it). The rows run
side by side in rounds, the order rotated each round; figures are medians
over the rounds, with ratios to the nginx row of the same API. Each row is
spot-checked once first (status 200 and the stub's answer); a row that fails
is skipped with the reason.

Starts and stops only its own servers; loopback only; reports figures,
asserts none.

    python -m benchmarks.load.image_rows                      # full run, ~3 min
    BENCH_PEERS=1 python -m benchmarks.load.image_rows        # with Portkey and LiteLLM
    BENCH_QUICK=1 python -m benchmarks.load.image_rows        # one short round, to a temp dir
    python -m benchmarks.load.image_rows --tiny --out /tmp/i  # the test's mode
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.harness.report import head_facts, md_facts, md_table, num, ratio, times
from benchmarks.harness.results import (
    Log,
    finish,
    head,
    is_quick,
    rerender,
    source_revision,
    write_results,
)
from benchmarks.harness.sampling import peak_rss_kib, tree_pids, usage
from benchmarks.harness.servers import (
    HOST,
    NO_NGINX,
    Server,
    ServerGroup,
    find_tool,
    gateway_available,
    gateway_config,
)
from benchmarks.load import image_bodies as ib
from benchmarks.load import peers
from benchmarks.load.clients import LatencyRun, answer_text, timed
from flatgate.proxy.transport.base import Timeouts
from flatgate.proxy.transport.fast import PoolTransport

__all__ = ["FULL", "NAME", "QUICK", "ROWS", "TINY", "ImageSettings", "main", "render", "run"]

NAME = "load-images"
_MESSAGES, _CHAT, _FBS = "/v1/messages", "/v1/chat/completions", "/v1/completions"
_MODELS = {"anthropic": "bench-anthropic", "openai": "bench-openai", "fbs": "bench-fbs"}
_TOKENS = 32  # the canned stubs' answer
_TENANTS = 8
_CONNECTIONS = 8  # requests in flight
_TIMEOUTS = Timeouts(connect=5.0, read=120.0, total=300.0)
_PER_CALLER = 128 << 20  # [edge] max_buffered_bytes_per_caller: room for 8 bodies of one tenant
_MEASURED_HERE = ("proxy", "edge_translator", "generated", "benchmarks/harness", "benchmarks/load")


@dataclass(frozen=True, slots=True)
class ImageRow:
    name: str
    server: str  # the server the client calls (its CPU and memory are the row's)
    api: str  # anthropic, openai or fbs: the body and the nginx row compared with
    tenants: int = 1  # keys the requests rotate over
    what: str = ""


ROWS: tuple[ImageRow, ...] = (
    ImageRow("direct-anthropic", "stub-anthropic", "anthropic", what="the Anthropic stub"),
    ImageRow("nginx-anthropic", "nginx-anthropic", "anthropic", what="nginx proxy_pass"),
    ImageRow("gateway-messages", "gateway", "anthropic", what="flatgate gateway, one tenant"),
    ImageRow("gateway-messages-8", "gateway", "anthropic", _TENANTS, "gateway, eight tenants"),
    ImageRow("portkey-anthropic", "portkey", "anthropic", what="Portkey, provider anthropic"),
    ImageRow("direct-openai", "stub-openai", "openai", what="the OpenAI stub"),
    ImageRow("nginx-openai", "nginx-openai", "openai", what="nginx proxy_pass"),
    ImageRow("gateway-chat", "gateway", "openai", what="flatgate gateway, one tenant"),
    ImageRow("gateway-chat-8", "gateway", "openai", _TENANTS, "gateway, eight tenants"),
    ImageRow("portkey", "portkey", "openai", what="Portkey, provider openai"),
    ImageRow("litellm", "litellm", "openai", what="LiteLLM proxy"),
    ImageRow("direct-fbs", "stub-fbs", "fbs", what="the fbs stub"),
    ImageRow("nginx-fbs", "nginx-fbs", "fbs", what="nginx proxy_pass"),
    ImageRow("proxy-fbs", "proxy", "fbs", what="flatgate proxy, the edge's FlatBuffer"),
)
_PATHS = {"anthropic": _MESSAGES, "openai": _CHAT, "fbs": _FBS}
_STUBS = {"stub-anthropic": "anthropic", "stub-openai": "openai", "stub-fbs": "fbs"}


@dataclass(frozen=True, slots=True)
class ImageSettings:
    mode: str
    rounds: int
    per_connection: int  # requests on each of the 8 connections, per row per round
    shape: ib.Shape = ib.FULL_SHAPE
    peers: bool = False


FULL = ImageSettings("full", rounds=3, per_connection=4)
QUICK = ImageSettings("quick", rounds=1, per_connection=2)
TINY = ImageSettings("tiny", rounds=1, per_connection=3, shape=ib.TINY_SHAPE)


def tenant_key(n: int) -> str:
    return f"sk-bench-images-tenant-{n}"


def config_text(ports: dict[str, int]) -> str:
    """The gateway's and the proxy's config: each canned stub's backend and
    model, eight tenants' keys, room for eight bodies of one tenant."""
    backends = {
        f"canned-{api}": (f"http://{HOST}:{ports[stub]}" + ("" if api == "fbs" else "/v1"), api)
        for stub, api in _STUBS.items()
    }
    routes = {_MODELS[api]: [f"canned-{api}"] for api in _STUBS.values()}
    models = {_MODELS["anthropic"]: "Anthropic", _MODELS["openai"]: "OpenAI"}
    keys = "".join(
        f'[[keys]]\ntenant = "team-{n}"\n'
        f'sha256 = "{hashlib.sha256(tenant_key(n).encode()).hexdigest()}"\n\n'
        for n in range(_TENANTS)
    )
    edge = f'host = "{HOST}"\nmax_buffered_bytes_per_caller = {_PER_CALLER}\n'
    return gateway_config(backends, routes, models, before=keys, edge=edge)


# the servers -------------------------------------------------------------------


def _start(group: ServerGroup, s: ImageSettings, rows: Sequence[ImageRow]) -> dict[str, str]:
    """Every server the rows need; the rows that cannot run, with why."""
    skipped: dict[str, str] = {}
    wanted = {r.server for r in rows}
    stubs = {
        name: group.flatgate(
            name, "stub", ["--protocol", api, "--canned", str(_TOKENS), "--interface", "rsgi"]
        )
        for name, api in _STUBS.items()
    }
    config = group.workdir / "images.toml"
    config.write_text(config_text({n: st.port for n, st in stubs.items()}))
    cfg = ["--config", str(config)]
    ok, help_text = gateway_available()
    if not ok:
        skipped["gateway"] = help_text
    else:
        extra = ["--interface", "rsgi"] if "--interface" in help_text else []
        group.flatgate("gateway", "gateway", [*cfg, *extra], metrics=True)
    group.flatgate("proxy", "proxy", [*cfg, "--interface", "rsgi", "--transport", "fast"])
    nginx = find_tool("nginx")
    for stub, api in _STUBS.items():
        if nginx is None:
            skipped[f"nginx-{api}"] = NO_NGINX
        else:
            group.nginx(f"nginx-{api}", stubs[stub].port, nginx, max_body="16m")
    skipped.update(_start_peers(group, s, wanted, stubs))
    skipped.update(group.wait_healthy(seconds=120.0))
    return skipped


def _start_peers(
    group: ServerGroup, s: ImageSettings, wanted: set[str], stubs: dict[str, Server]
) -> dict[str, str]:
    names = [p for p in ("portkey", "litellm") if p in wanted]
    if not s.peers:
        return dict.fromkeys(names, "peers not requested (BENCH_PEERS=1 or --peers)")
    skipped: dict[str, str] = {}
    root = peers.peers_dir()
    portkey = peers.find_portkey(root)
    if isinstance(portkey, str):
        skipped["portkey"] = portkey
    else:
        peers.start_portkey(group, portkey)
    litellm = peers.find_litellm(root)
    if isinstance(litellm, str):
        skipped["litellm"] = litellm
    else:
        peers.start_litellm(group, litellm, {_MODELS["openai"]: stubs["stub-openai"].url + "/v1"})
    return skipped


# the requests ------------------------------------------------------------------


def _headers(row: ImageRow, stubs: dict[str, str], key: str) -> ib.Headers:
    if row.api == "fbs":
        return ib.FBS_HEADERS
    if row.server == "portkey":
        base = stubs["stub-anthropic" if row.api == "anthropic" else "stub-openai"] + "/v1"
        auth = (("authorization", f"Bearer {peers.DUMMY_KEY}"),)
        pk = peers.portkey_headers(base, row.api)
        if row.api == "anthropic":
            return (*ib.anthropic_headers(peers.DUMMY_KEY), *auth, *pk)
        return (*ib.openai_headers(peers.DUMMY_KEY), *pk)
    return ib.anthropic_headers(key) if row.api == "anthropic" else ib.openai_headers(key)


def _keys(row: ImageRow) -> list[str]:
    if row.server != "gateway":
        return [peers.DUMMY_KEY]
    return [tenant_key(n) for n in range(row.tenants)]


def _body(row: ImageRow, bodies: ib.Bodies) -> bytes:
    return {"anthropic": bodies.messages, "openai": bodies.chat, "fbs": bodies.fbs}[row.api]


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def spot_check(url: str, body: bytes, headers: ib.Headers, api: str) -> str | None:
    """``None`` when one request answers 200 with the stub's answer; else why not."""
    req = urllib.request.Request(url, body, dict(headers), method="POST")
    try:
        with _DIRECT.open(req, timeout=60) as answer:
            data = answer.read()
    except OSError as exc:
        detail = exc.read()[:300] if hasattr(exc, "read") else b""
        return f"{exc} {detail!r}"
    if api == "fbs":
        return None if data else "an empty answer"
    try:
        text = answer_text(api, data)
    except (ValueError, KeyError) as exc:
        return f"unreadable answer ({exc}): {data[:300]!r}"
    return None if text.strip() == ("tok " * _TOKENS).strip() else f"unexpected: {text[:200]!r}"


# the run -----------------------------------------------------------------------


def _reset_peak(pids: Sequence[int]) -> None:
    """Reset each process's ``VmHWM`` to its resident set now."""
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")


@dataclass(frozen=True, slots=True)
class _Calls:
    """One row's requests: the URL, the body, each connection's headers."""

    url: str
    body: bytes
    headers: list[ib.Headers]  # one per connection (its tenant's key)


async def _connection(
    transport: PoolTransport, calls: _Calls, headers: ib.Headers, n: int, run: LatencyRun
) -> None:
    """``n`` requests one after the other, each timed into ``run``."""
    for _ in range(n):
        await timed(run, transport, calls.url, calls.body, headers, timeouts=_TIMEOUTS)


async def _burst(calls: _Calls, n: int) -> LatencyRun:
    """``n`` requests on each of the connections at once; their latencies and errors."""
    transport = PoolTransport(limit=_CONNECTIONS)
    run = LatencyRun()
    try:
        await asyncio.gather(*(_connection(transport, calls, h, n, run) for h in calls.headers))
    finally:
        await transport.aclose()
    return run


def measure_row(
    server: Server, calls: _Calls, s: ImageSettings, runner: asyncio.Runner
) -> dict[str, Any]:
    """One counted run of the row (every request finished: no CPU of a
    request cut off in it): its counts, the server's CPU and its peak RSS."""
    runner.run(_burst(replace(calls, headers=calls.headers[:1]), 1))  # the connection warm
    pids = tree_pids(server.proc.pid)
    _reset_peak(pids)
    before_rss = peak_rss_kib(pids)  # just reset: the resident set now
    before = usage(pids)
    t0 = time.perf_counter()
    burst = runner.run(_burst(calls, s.per_connection))
    seconds = time.perf_counter() - t0
    latencies, errors = burst.latencies, burst.errors
    pids = tree_pids(server.proc.pid)
    after = usage(pids)
    return {
        "requests": len(latencies),
        "errors": errors,
        "seconds": round(seconds, 4),
        "p50_ms": round(statistics.median(latencies) * 1e3, 2) if latencies else None,
        "cpu_s": round(after.user + after.system - before.user - before.system, 4),
        "rss_before_kib": before_rss,
        "peak_rss_kib": peak_rss_kib(pids),
    }


def _prepare(
    group: ServerGroup, rows: Sequence[ImageRow], bodies: ib.Bodies, log: Log
) -> tuple[dict[str, _Calls], dict[str, str]]:
    """Each row's requests, after its spot check; the rows that failed it, with why."""
    stubs = {n: group.servers[n].url for n in _STUBS}
    ready: dict[str, _Calls] = {}
    problems: dict[str, str] = {}
    for row in rows:
        server = group.servers[row.server]
        keys = _keys(row)
        headers = [_headers(row, stubs, keys[c % len(keys)]) for c in range(_CONNECTIONS)]
        url = server.url + _PATHS[row.api]
        why = spot_check(url, _body(row, bodies), headers[0], row.api)
        if why is not None:
            problems[row.name] = f"spot check failed: {why}"
            log(f"  {row.name}: {problems[row.name]}")
            continue
        ready[row.name] = _Calls(url, _body(row, bodies), headers)
    return ready, problems


def measure(
    group: ServerGroup, s: ImageSettings, rows: Sequence[ImageRow], bodies: ib.Bodies, log: Log
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every row, side by side in rounds; the rounds' records and the rows skipped."""
    calls, problems = _prepare(group, rows, bodies, log)
    ready = [r for r in rows if r.name in calls]
    records: list[dict[str, Any]] = []
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        for n in range(s.rounds):
            shift = n % max(1, len(ready))
            for row in ready[shift:] + ready[:shift]:
                rec: dict[str, Any] = {"round": n + 1, "row": row.name}
                rec |= measure_row(group.servers[row.server], calls[row.name], s, runner)
                records.append(rec)
                per = _per_request(rec)
                log(
                    f"  round {n + 1} {row.name}: {rec['requests']} requests "
                    f"({rec['errors']} errors), {num(per, 0)} us CPU each, "
                    f"peak RSS {rec['peak_rss_kib'] / 1024:.0f} MiB"
                )
    return records, problems


def _per_request(rec: dict[str, Any]) -> float | None:
    return rec["cpu_s"] / rec["requests"] * 1e6 if rec["requests"] else None


def summarise(
    records: Sequence[dict[str, Any]], sizes: dict[str, int], rows: Sequence[ImageRow] = ROWS
) -> list[dict[str, Any]]:
    """Per row: medians over its rounds, per MiB of its body, and the ratios to
    its API's nginx row."""
    out: list[dict[str, Any]] = []
    for row in rows:
        recs = [r for r in records if r["row"] == row.name and r["requests"]]
        if not recs:
            continue
        mib = sizes[row.api] / (1 << 20)
        cpu = statistics.median(v for r in recs if (v := _per_request(r)) is not None)
        out.append(
            {
                "row": row.name,
                "api": row.api,
                "what": row.what,
                "tenants": row.tenants,
                "rounds": len(recs),
                "requests": sum(r["requests"] for r in recs),
                "errors": sum(r["errors"] for r in records if r["row"] == row.name),
                "body_mib": round(mib, 3),
                "rps": round(statistics.median(r["requests"] / r["seconds"] for r in recs), 2),
                "cpu_us_per_request": round(cpu, 1),
                "cpu_us_per_mib": round(cpu / mib, 1),
                "p50_ms": round(statistics.median(r["p50_ms"] for r in recs), 2),
                "peak_rss_mib": round(max(r["peak_rss_kib"] for r in recs) / 1024, 1),
                "rss_before_mib": round(min(r["rss_before_kib"] for r in recs) / 1024, 1),
            }
        )
    nginx = {m["api"]: m for m in out if m["row"].startswith("nginx-")}
    for m in out:
        base = nginx.get(m["api"])
        vs = ratio(m["cpu_us_per_request"], base["cpu_us_per_request"]) if base else None
        m["cpu_vs_nginx"] = None if vs is None else round(vs, 2)
    return out


def run(s: ImageSettings, log: Log = print, only: Sequence[str] = ()) -> dict[str, Any]:
    """Start the servers, measure every row, stop them; the document."""
    revision = source_revision(_MEASURED_HERE)
    rows = [r for r in ROWS if not only or r.name in only]
    began = time.monotonic()
    log(f"building the request ({s.shape.images} screenshots of {s.shape.image_bytes} bytes)")
    bodies = ib.build(s.shape, _MODELS["anthropic"], _MODELS["openai"], _MODELS["fbs"])
    sizes = {"anthropic": len(bodies.messages), "openai": len(bodies.chat), "fbs": len(bodies.fbs)}
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="flatgate-images-") as tmp:
        group = ServerGroup(Path(tmp))
        try:
            log(f"starting servers ({s.mode} mode)")
            skipped = _start(group, s, rows)
            live = [r for r in rows if r.server not in skipped and r.name not in skipped]
            for r in rows:
                if r not in live:
                    skipped[r.name] = skipped.get(r.server) or skipped[r.name]
            records, problems = measure(group, s, live, bodies, log)
            skipped.update(problems)
        finally:
            group.stop_all()
    method = (
        f"Servers on {HOST}: the canned stubs ({_TOKENS} tokens, whole, the body read and not "
        "parsed), nginx (one worker, the body held in memory), flatgate gateway and flatgate "
        "proxy (one granian worker each, RSGI), the peers where asked. The request: "
        f"{s.shape.images} PNG screenshots (seeded noise, {bodies.image_bytes:,} bytes in all) "
        f"as base64, and about {s.shape.text_bytes:,} bytes of text (system blocks, tools, a "
        "tool call and its result), a whole answer: the Messages request "
        f"{sizes['anthropic']:,} bytes, the same as Chat Completions {sizes['openai']:,}, the "
        f"edge's FlatBuffer of the Messages request {sizes['fbs']:,}. The client: one asyncio "
        f"process (flatgate's own keep-alive pool), {_CONNECTIONS} connections (8 requests in "
        f"flight), {s.per_connection} requests one after the other on each, per row per round "
        "(after one request that warms the connection), so that every request counted has "
        f"finished; {s.rounds} round(s), the row order rotated each round; the -8 rows' "
        f"connections each carry one of {_TENANTS} tenants' keys. CPU: /proc utime+stime of "
        "the row's server's process tree over the run (the client's and the stub's not "
        "counted, except in the direct rows, which are the stub's own), per request and per "
        "MiB of the row's own body. Peak RSS: VmHWM of the tree's largest process, reset "
        "before each run (clear_refs), beside the resident set at the run's start. The gateway's "
        f"[edge] max_buffered_bytes_per_caller is {_PER_CALLER >> 20} MiB: the default (a "
        "quarter of max_buffered_bytes, 64 MiB) holds fewer than eight bodies this size of "
        "one tenant at once."
    )
    return {
        **head(revision, ("granian", "msgspec", "pillow", "uvloop")),
        "workload": "images",
        "mode": s.mode,
        "settings": asdict(s),
        "method": method,
        "body_bytes": sizes,
        "image_bytes": bodies.image_bytes,
        "elapsed_seconds": round(time.monotonic() - began, 1),
        "skipped": skipped,
        "rows": summarise(records, sizes, rows),
        "rounds": records,
    }


# the report --------------------------------------------------------------------


def render(doc: dict[str, Any]) -> str:
    lines = [
        "# Images per MiB: an 8 MiB request of four screenshots",
        "",
        "`python -m benchmarks.load.image_rows` (a line of `make bench-load`; issue 43, item 5).",
        "",
        *md_facts([*head_facts(doc), ("mode", doc["mode"])]),
        "",
        f"**Method.** {doc['method']}",
        "",
    ]
    for name, why in doc["skipped"].items():
        lines.append(f"- **{name}** skipped: {why}")
    header = [
        "row",
        "what",
        "tenants",
        "body MiB",
        "requests/s",
        "CPU µs per request",
        "CPU µs per MiB",
        "CPU vs. nginx",
        "p50 ms",
        "peak RSS MiB (highest round)",
        "RSS at start MiB (lowest round)",
        "requests",
        "errors",
    ]
    body = [
        [
            m["row"],
            m["what"],
            m["tenants"],
            num(m["body_mib"], 2),
            num(m["rps"], 1),
            num(m["cpu_us_per_request"], 0),
            num(m["cpu_us_per_mib"], 0),
            times(m["cpu_vs_nginx"]),
            num(m["p50_ms"], 1),
            num(m["peak_rss_mib"], 0),
            num(m["rss_before_mib"], 0),
            num(m["requests"]),
            num(m["errors"]),
        ]
        for m in doc["rows"]
    ]
    lines += ["", *md_table(header, body, left=2), ""]
    lines += [
        "**Caveats.** The client shares the machine's two cores with the servers, so requests "
        "a second are as much the client's as a row's; CPU per request is the row's server's "
        "alone and is the figure to compare. The stubs answer without parsing, so the "
        "gateway rows' CPU is flatgate's whole path: the JSON parse, base64 decoded once at "
        "the edge, the FlatBuffer, the adapter's request to the stub (base64 again), the "
        "answer. The fbs rows carry the images as bytes: their MiB are the FlatBuffer's.",
        "",
    ]
    return "\n".join(lines)


def write(doc: dict[str, Any], out: Path) -> list[Path]:
    return write_results(out, NAME, doc, render(doc))


def _resummarised(doc: dict[str, Any], out: Path) -> list[Path]:
    return write({**doc, "rows": summarise(doc["rounds"], doc["body_bytes"])}, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.load.image_rows", description=__doc__
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 3)")
    parser.add_argument(
        "--requests", type=int, help="requests per connection per row per round (default 4)"
    )
    parser.add_argument("--rows", default="", help="comma-separated rows (default: all)")
    parser.add_argument("--peers", action="store_true", help="Portkey and LiteLLM (BENCH_PEERS=1)")
    parser.add_argument("--quick", action="store_true", help="one short round (BENCH_QUICK=1)")
    parser.add_argument("--tiny", action="store_true", help="small images, one round (the test's)")
    parser.add_argument("--from-json", type=Path, help="measure nothing: render this json again")
    parser.add_argument("--out", type=Path, help="results directory (default: benchmarks/results)")
    args = parser.parse_args(argv)
    if args.from_json:
        rerender(args.from_json, _resummarised, args.out)
        return 0
    s = TINY if args.tiny else QUICK if is_quick(args.quick) else FULL
    if args.rounds:
        s = replace(s, rounds=args.rounds)
    if args.requests:
        s = replace(s, per_connection=args.requests)
    s = replace(s, peers=peers.peers_requested(args.peers))
    only = tuple(x.strip() for x in args.rows.split(",") if x.strip())
    partial = s.mode != "full" or s.rounds != FULL.rounds or bool(only)
    doc = finish(lambda log: run(s, log, only), write, out=args.out, quick=partial, name=NAME)
    return 130 if doc is None else 0


if __name__ == "__main__":
    raise SystemExit(main())
