"""The streams bench's figures: one row's runs summed up, and the comparisons.

Owns ``RowRun`` (one row measured once: its streams, its samples, its stub's
counts) and ``summarise`` (a row's runs, pooled: every measured stream of
every round counts once in the percentiles; CPU, tokens, GC are summed over
the rounds' windows), ``add_comparisons`` (each percentile minus direct's,
and the row's own CPU per token against nginx's in front of the same stub)
and ``series`` (per second: latency of the streams that ended in it, GC
collections, RSS, CPU). Pure: no I/O; figures are reported, never asserted.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness.report import percentile
from benchmarks.harness.sampling import GcSample
from benchmarks.streams.client import Record
from benchmarks.streams.sampler import Sample

__all__ = [
    "NGINX_OF",
    "PERCENTILES",
    "RowRun",
    "add_comparisons",
    "added",
    "percentiles",
    "series",
    "server_cpu_per_token",
    "skipped",
    "summarise",
]

PERCENTILES = (("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9), ("max", 100.0))


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """Nearest-rank percentiles in ms (``None`` when there are no values)."""
    ordered = sorted(v for v in values if not math.isnan(v))
    return {name: _ms(percentile(ordered, q)) for name, q in PERCENTILES}


def added(mine: dict[str, float | None], base: dict[str, float | None]) -> dict[str, float | None]:
    """Each percentile of ``mine`` minus ``base``'s (ms)."""
    out: dict[str, float | None] = {}
    for name, _ in PERCENTILES:
        a, b = mine.get(name), base.get(name)
        out[name] = None if a is None or b is None else round(a - b, 2)
    return out


@dataclass(slots=True)
class RowRun:
    """One row measured once: every stream (``measured`` or not), the samples."""

    row: str
    round: int
    records: list[Record]
    samples: list[Sample]
    peak_rss_kib: dict[str, int]
    stub_stats: dict[str, Any]
    t0: float  # the client's clock at its start
    notes: list[str] = field(default_factory=list)

    def window(self) -> tuple[Sample, Sample] | None:
        first = next((s for s in self.samples if s.mark == "from"), None)
        last = next((s for s in self.samples if s.mark == "to"), None)
        return (first, last) if first is not None and last is not None else None


def skipped(row: str, reason: str) -> dict[str, Any]:
    return {"row": row, "status": "skipped", "reason": reason}


def _gc_delta(a: GcSample | None, b: GcSample | None) -> tuple[float, float] | None:
    if a is None or b is None:
        return None
    return b.total_collections - a.total_collections, b.total_pause - a.total_pause


def summarise(row: str, note: str, runs: Sequence[RowRun], backend: str = "fbs") -> dict[str, Any]:
    """A row's figures over its runs (see the module docstring); ``backend``:
    the protocol its stub spoke (which nginx row it is compared with)."""
    records = [r for run in runs for r in run.records if r.measured]
    ok = [r for r in records if not r.error]
    errors = collections.Counter(r.error for r in records if r.error)
    outside = collections.Counter(
        r.error for run in runs for r in run.records if r.error and not r.measured
    )
    tokens = finished = 0
    seconds = client_cpu = 0.0
    cpu: dict[str, float] = collections.defaultdict(float)
    gc: dict[str, list[float]] = {}
    gc_missing: set[str] = set()
    peak: dict[str, int] = {}
    late = 0
    lag = 0.0
    notes: list[str] = []
    for run in runs:
        notes += run.notes
        for name, kib in run.peak_rss_kib.items():
            peak[name] = max(peak.get(name, 0), kib)
        cadence = run.stub_stats.get("cadence") or {}
        late += int(cadence.get("late_ticks", 0))
        lag = max(lag, float(cadence.get("max_lag_ms", 0.0)))
        ends = run.window()
        if ends is None:
            notes.append(f"round {run.round}: the window's samples are missing")
            continue
        a, b = ends
        tokens += b.tokens - a.tokens
        finished += b.finished - a.finished
        seconds += b.t - a.t
        client_cpu += b.client_cpu - a.client_cpu
        for name in b.cpu:
            cpu[name] += b.cpu[name] - a.cpu[name]
            d = _gc_delta(a.gc.get(name), b.gc.get(name))
            if d is None:
                gc_missing.add(name)
            else:
                slot = gc.setdefault(name, [0.0, 0.0])
                slot[0] += d[0]
                slot[1] += d[1]

    def per_token(s: float) -> float | None:
        return round(s / tokens * 1e6, 2) if tokens else None

    processes = []
    for name, used in cpu.items():
        g = gc.get(name) if name not in gc_missing else None
        per_k = 1000 / finished if finished else math.nan
        processes.append(
            {
                "process": name,
                "cpu_seconds": round(used, 3),
                "cpu_us_per_token": per_token(used),
                "cpu_cores": round(used / seconds, 3) if seconds else None,
                # No collection is none per any number of streams (even when
                # no stream finished inside the window: a loaded machine).
                "gc_collections_per_1k_streams": (
                    None if g is None else round(g[0] * per_k, 2) if g[0] else 0.0
                ),
                "gc_pause_ms_per_1k_streams": (
                    None if g is None else round(g[1] * 1e3 * per_k, 3) if g[1] else 0.0
                ),
                "peak_rss_mib": round(peak.get(name, 0) / 1024, 1),
            }
        )
    return {
        "row": row,
        "status": "ok",
        "note": note,
        "backend": backend,
        "rounds": len(runs),
        "streams": len(records),
        "streams_ok": len(ok),
        "errors": sum(errors.values()),
        "errors_by_kind": dict(sorted(errors.items())),
        "errors_outside_window": dict(sorted(outside.items())),
        "duration_ms": percentiles([r.duration for r in ok]),
        "ttft_ms": percentiles([r.ttft for r in ok]),
        "window_seconds": round(seconds, 2),
        "tokens_relayed": tokens,
        "tokens_per_second": round(tokens / seconds) if seconds else None,
        "streams_finished_in_window": finished,
        "processes": processes,
        "client": {
            "cpu_seconds": round(client_cpu, 3),
            "cpu_us_per_token": per_token(client_cpu),
            "cpu_cores": round(client_cpu / seconds, 3) if seconds else None,
        },
        "stub_late_ticks": late,
        "stub_max_lag_ms": round(lag, 2),
        "notes": notes,
        "series": series(runs[0]) if runs else [],
    }


# The nginx row each backend protocol's rows are compared with.
NGINX_OF = {"fbs": "nginx", "openai": "nginx-openai"}


def server_cpu_per_token(r: dict[str, Any]) -> float | None:
    """CPU µs per token of a row's own servers (every process but the stub)."""
    mine = [p["cpu_us_per_token"] for p in r.get("processes", ()) if p["process"] != "stub"]
    if not mine or any(v is None for v in mine):
        return None
    return round(float(sum(mine)), 2)


def add_comparisons(rows: list[dict[str, Any]]) -> None:
    """``added_duration_ms`` / ``added_ttft_ms``: each percentile minus direct's;
    ``server_cpu_us_per_token`` (the row's servers, the stub's not counted) and
    ``cpu_vs_nginx``: that over the nginx row in front of the same protocol's
    stub (``NGINX_OF``)."""
    ok = {r["row"]: r for r in rows if r["status"] == "ok"}
    direct = ok.get("direct")
    for r in rows:
        if r["status"] != "ok":
            continue
        r["server_cpu_us_per_token"] = server_cpu_per_token(r)
    for r in rows:
        if r["status"] != "ok":
            continue
        nginx = ok.get(NGINX_OF.get(r.get("backend", "fbs"), "nginx"))
        mine = r["server_cpu_us_per_token"]
        theirs = None if nginx is None else nginx["server_cpu_us_per_token"]
        r["cpu_vs_nginx"] = round(mine / theirs, 2) if mine and theirs else None
        if direct is None:
            continue
        for key in ("duration_ms", "ttft_ms"):
            r["added_" + key] = added(r[key], direct[key])


def series(run: RowRun) -> list[dict[str, Any]]:
    """Per second since the client began: the streams that ended in it (count,
    p50 and p99 of their duration and TTFT, ms), and per process the GC
    collections in it, its RSS (MiB) and CPU (cores) at its end."""
    ended: dict[int, list[Record]] = collections.defaultdict(list)
    for r in run.records:
        ended[int(r.start + r.duration - run.t0)].append(r)
    ticks = [s for s in run.samples if s.mark in ("", "end")]
    out = []
    for prev, cur in itertools.pairwise(ticks):
        second = round(prev.t)
        done = [r for r in ended.get(second, []) if not r.error]
        durations = sorted(r.duration for r in done)
        ttfts = sorted(r.ttft for r in done if not math.isnan(r.ttft))
        dt = cur.t - prev.t
        point: dict[str, Any] = {
            "t": round(cur.t, 2),
            "streams": len(done),
            "p50_ms": _ms(percentile(durations, 50)),
            "p99_ms": _ms(percentile(durations, 99)),
            "ttft_p50_ms": _ms(percentile(ttfts, 50)),
            "ttft_p99_ms": _ms(percentile(ttfts, 99)),
            "tokens_per_second": round((cur.tokens - prev.tokens) / dt) if dt > 0 else None,
            "client_cores": round((cur.client_cpu - prev.client_cpu) / dt, 3) if dt > 0 else None,
        }
        for name in cur.cpu:
            d = _gc_delta(prev.gc.get(name), cur.gc.get(name))
            point[f"{name}.gc"] = None if d is None else d[0]
            point[f"{name}.rss_mib"] = round(cur.rss_kib[name] / 1024, 1)
            cores = (cur.cpu[name] - prev.cpu[name]) / dt if dt > 0 else math.nan
            point[f"{name}.cores"] = None if math.isnan(cores) else round(cores, 3)
        out.append(point)
    return out


def _ms(seconds: float) -> float | None:
    return None if math.isnan(seconds) else round(seconds * 1e3, 2)
