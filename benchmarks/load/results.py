"""The load bench's figures: samples per (row, size) and what they sum up to.

Owns ``Cell`` (every sample of one row at one prompt size, over its rounds),
its summary into the row of the result document (``summarise``), the
comparisons between rows (``add_comparisons``: added latency over direct,
throughput vs. direct and vs. json-route, or the peers) and the streaming
summaries (time to first token, per token and for the whole stream).

Conventions: throughput is the best round (on a shared machine noise only
ever takes throughput away; every round is kept); CPU, GC and pause are
totals over every round divided by the requests of those rounds; latency
percentiles at the fixed rate are the median over rounds of each round's
percentile (the pooled ones are kept too); unloaded latency pools its rounds;
"added" is the row's percentile minus direct's. Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness.report import diff, percentile, ratio
from benchmarks.harness.sampling import GcSample
from benchmarks.load.clients import StreamRun
from benchmarks.load.rows import Row

__all__ = [
    "Cell",
    "add_comparisons",
    "add_gc",
    "add_stream_comparisons",
    "ratio_key",
    "skipped_row",
    "summarise",
    "summarise_streams",
]


@dataclass(slots=True)
class Cell:
    """Every sample of one (row, size), over its rounds."""

    rps: list[float] = field(default_factory=list)
    requests: int = 0
    wrk_errors: int = 0
    wrk_p99_ms: list[float] = field(default_factory=list)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    sys_seconds: dict[str, float] = field(default_factory=dict)  # the kernel's share
    minor_faults: dict[str, int] = field(default_factory=dict)  # fresh memory touched
    rate_requests: int = 0
    rate_cpu_seconds: dict[str, float] = field(default_factory=dict)
    gc_collections: dict[str, list[float]] = field(default_factory=dict)
    gc_pause: dict[str, float] = field(default_factory=dict)
    # One list of latencies (seconds) per round at the fixed rate.
    latencies: list[list[float]] = field(default_factory=list)
    rate: float = 0.0
    rate_errors: int = 0
    max_lag_ms: float = 0.0
    unloaded: list[float] = field(default_factory=list)
    unloaded_first: list[float] = field(default_factory=list)  # to the first body byte
    peak_rss_kib: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def add_gc(
    cell: Cell, before: Mapping[str, GcSample | None], after: Mapping[str, GcSample | None]
) -> None:
    """Add the GC counters' growth between two samples of each server."""
    for name, a in after.items():
        b = before.get(name)
        if a is None or b is None:
            continue
        coll = cell.gc_collections.setdefault(name, [0.0, 0.0, 0.0])
        for gen in range(3):
            coll[gen] += a.collections[gen] - b.collections[gen]
        cell.gc_pause[name] = (
            cell.gc_pause.get(name, 0.0) + sum(a.pause_seconds) - sum(b.pause_seconds)
        )


def _ms(values: Sequence[float], q: float) -> float | None:
    v = percentile(values, q)
    return None if math.isnan(v) else v * 1e3


def _per_request(total: Mapping[str, float], requests: int, scale: float) -> dict[str, float]:
    if requests <= 0:
        return {}
    return {k: v / requests * scale for k, v in total.items()}


QUANTILES = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9}


def _round_median(rounds: Sequence[Sequence[float]], q: float) -> float | None:
    """The median over rounds of each round's percentile: one round that a
    neighbour's burst hit does not set the figure."""
    per_round = [v for v in (_ms(r, q) for r in rounds) if v is not None]
    return statistics.median(per_round) if per_round else None


def summarise(row: Row, size: str, cell: Cell, body_bytes: int, tokens: int = 0) -> dict[str, Any]:
    """The row of the result document; ``tokens`` > 0: each answer's tokens,
    and the hop's CPU per token beside its CPU per request."""
    cpu_us = _per_request(cell.cpu_seconds, cell.requests, 1e6)
    hop_cpu = sum(cpu_us.get(n, 0.0) for n in row.hop) if cpu_us else None
    out: dict[str, Any] = {
        "row": row.name,
        "size": size,
        "status": "ok",
        "note": row.note,
        "body_bytes": body_bytes,
        "rounds": len(cell.rps),
        "throughput_rps": max(cell.rps) if cell.rps else None,
        "throughput_runs": [round(x, 1) for x in cell.rps],
        "wrk_requests": cell.requests,
        "wrk_errors": cell.wrk_errors,
        "wrk_p99_ms": statistics.median(cell.wrk_p99_ms) if cell.wrk_p99_ms else None,
        "cpu_us_per_req": cpu_us,
        "sys_us_per_req": _per_request(cell.sys_seconds, cell.requests, 1e6),
        "minor_faults_per_req": {
            k: v / cell.requests for k, v in cell.minor_faults.items() if cell.requests > 0
        },
        "hop_cpu_us_per_req": hop_cpu,
        "cpu_us_per_req_at_rate": _per_request(cell.rate_cpu_seconds, cell.rate_requests, 1e6),
        "peak_rss_mib": {k: round(v / 1024, 1) for k, v in cell.peak_rss_kib.items()},
        "gc": {
            name: {
                "collections_per_1k": sum(coll) / cell.requests * 1e3 if cell.requests else None,
                "gen2_per_1k": coll[2] / cell.requests * 1e3 if cell.requests else None,
                "pause_ms_per_1k": cell.gc_pause.get(name, 0.0) / cell.requests * 1e6
                if cell.requests
                else None,
                "pause_ms_total": cell.gc_pause.get(name, 0.0) * 1e3,
                "collections": [int(c) for c in coll],
            }
            for name, coll in cell.gc_collections.items()
        },
        "rate_rps": cell.rate or None,
        "rate_requests": cell.rate_requests,
        "rate_errors": cell.rate_errors,
        "client_max_lag_ms": round(cell.max_lag_ms, 3),
        "latency_ms": {k: _round_median(cell.latencies, q) for k, q in QUANTILES.items()},
        "latency_ms_pooled": {
            k: _ms([x for r in cell.latencies for x in r], q) for k, q in QUANTILES.items()
        },
        "unloaded_p50_ms": _ms(cell.unloaded, 50),
        "unloaded_first_byte_p50_ms": _ms(cell.unloaded_first, 50),
        "unloaded_requests": len(cell.unloaded),
        "notes": cell.notes,
    }
    if tokens > 0:
        out["tokens"] = tokens
        out["hop_cpu_us_per_token"] = hop_cpu / tokens if hop_cpu else None
    return out


def ratio_key(name: str) -> str:
    """The result key of the throughput ratio against row ``name``: ``vs_json_route``."""
    return "vs_" + name.replace("-", "_")


def add_comparisons(
    rows: list[dict[str, Any]], floor: str = "direct", versus: Sequence[str] = ("json-route",)
) -> None:
    """Added latency over ``floor``; throughput ratios vs ``floor`` (``vs_direct``)
    and vs each row of ``versus`` (``vs_<name>``, and ``cpu_vs_<name>``: the hop's
    CPU per request over that row's)."""
    by = {(r["row"], r["size"]): r for r in rows}
    for r in rows:
        if r["status"] != "ok":
            continue
        d = by.get((floor, r["size"]))
        ok_d = d is not None and d["status"] == "ok"
        lat = r["latency_ms"]
        r["added_ms"] = {
            q: diff(lat[q], d["latency_ms"][q]) if ok_d and d is not None else None for q in lat
        }
        r["same_rate_as_direct"] = ok_d and d is not None and r["rate_rps"] == d["rate_rps"]
        r["unloaded_added_p50_ms"] = (
            diff(r["unloaded_p50_ms"], d["unloaded_p50_ms"]) if ok_d and d is not None else None
        )
        r["unloaded_added_first_byte_p50_ms"] = (
            diff(r.get("unloaded_first_byte_p50_ms"), d.get("unloaded_first_byte_p50_ms"))
            if ok_d and d is not None
            else None
        )
        r["vs_direct"] = (
            ratio(r["throughput_rps"], d["throughput_rps"]) if ok_d and d is not None else None
        )
        for name in versus:
            v = by.get((name, r["size"]))
            ok_v = v is not None and v["status"] == "ok"
            key = ratio_key(name)
            r[key] = ratio(r["throughput_rps"], v["throughput_rps"]) if ok_v and v else None
            # A row with no server of its own (the floor) has no CPU to compare.
            cpu = r["hop_cpu_us_per_req"] or None
            r["cpu_" + key] = ratio(cpu, v["hop_cpu_us_per_req"]) if ok_v and v else None


def summarise_streams(row: Row, runs: Sequence[StreamRun]) -> dict[str, Any]:
    ttft = [x for r in runs for x in r.ttft]
    tpot = [x for r in runs for x in r.tpot]
    whole = [x for r in runs for x in r.whole]
    return {
        "row": row.name,
        "status": "ok",
        "streams": sum(r.streams for r in runs),
        "tokens": sum(r.tokens for r in runs),
        "errors": sum(r.errors for r in runs),
        "text_mismatches": sum(r.mismatches for r in runs),
        "ttft_ms_p50": _ms(ttft, 50),
        "ttft_ms_p99": _ms(ttft, 99),
        "tpot_ms_p50": _ms(tpot, 50),
        "tpot_ms_mean": statistics.fmean(tpot) * 1e3 if tpot else None,
        "stream_ms_p50": _ms(whole, 50),
        "stream_ms_p99": _ms(whole, 99),
    }


def add_stream_comparisons(
    rows: list[dict[str, Any]], floor: str = "direct", versus: Sequence[str] = ()
) -> None:
    """Added time to first token, per token and for the whole stream over
    ``floor``; ``stream_vs_<name>``: the whole stream's p50 over that row's."""
    direct = next((r for r in rows if r["row"] == floor and r["status"] == "ok"), None)
    by = {r["row"]: r for r in rows if r["status"] == "ok"}
    for r in rows:
        if r["status"] != "ok":
            continue
        for name in versus:
            if (v := by.get(name)) is not None:
                key = "stream_" + ratio_key(name)
                r[key] = ratio(r.get("stream_ms_p50"), v.get("stream_ms_p50"))
        if direct is None:
            continue
        r["added_ttft_ms"] = diff(r["ttft_ms_p50"], direct["ttft_ms_p50"])
        r["added_tpot_ms"] = diff(r["tpot_ms_mean"], direct["tpot_ms_mean"])
        r["added_stream_ms"] = diff(r.get("stream_ms_p50"), direct.get("stream_ms_p50"))


def skipped_row(name: str, reason: str, size: str | None = None) -> dict[str, Any]:
    row = {"row": name, "status": "skipped", "reason": reason}
    if size is not None:
        row["size"] = size
    return row
