"""``python -m benchmarks.streams --gc-table``: workload A under several GC settings.

The collector tuned the way Go's ``GOGC`` is, and measured on the workload it
is tuned for: N client connections (1,000 by default) streaming back to back
(``benchmarks.streams``), through the ``proxy`` and ``gateway`` rows, each
under every setting of ``GC_SETTINGS``, written into the row's config as the
``gc_thresholds`` and ``gc_freeze`` keys of ``[proxy]`` and ``[edge]`` (the
one-process gateway reads ``[edge]``'s; ``plumbing.gctune`` applies them once
the app is built):

- ``cpython``: CPython's default thresholds (700, 10, 10), no freeze;
- ``cpython+freeze``: the same, with ``gc.freeze()`` after start-up;
- ``10k+freeze``: (10,000, 10, 10) and freeze;
- ``flatgate``: the shipped default (``[proxy]``'s, 50,000, 20, 100) and freeze;
- ``off``: threshold0 = 0, no automatic collection at all: the memory reference.

``direct`` (the stub alone) is measured first in every round, the floor each
"added" figure is taken from. Every (setting, row) runs alone on the machine
with fresh servers, so its GC counts, pauses and peak RSS are its own; with
``--rounds`` the order is rotated each round and the rounds are pooled. For
each: GC collections and pause per 1,000 streams, the whole-stream duration's
p50 / p99 / p99.9 added to direct's, CPU per token, peak RSS and the RSS
growth over the window. Results: ``benchmarks/results/streams-gc.{json,md}``
on a full run (``benchmarks.streams.gcreport``); a quick or custom run writes
to a new temporary directory unless ``--out`` names one. The command line,
the rows' servers and their measurement are the streams bench's
(``benchmarks.streams.run``), and so are its bounds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.harness.results import Log, is_quick, names, source_revision
from benchmarks.streams.results import RowRun, added, skipped, summarise
from benchmarks.streams.rows import ROWS, GcSetting, Row
from benchmarks.streams.run import (
    FULL,
    MEASURED_HERE,
    QUICK,
    Settings,
    header,
    measure_row,
    raise_fd_limit,
    with_args,
)
from flatgate.edge_translator.settings import EdgeSection
from flatgate.proxy.service.settings import ProxySection

__all__ = [
    "FULL_TABLE",
    "GC_SETTINGS",
    "QUICK_TABLE",
    "TABLE_ROWS",
    "TableSettings",
    "plan_round",
    "run",
    "settings_of",
    "summarise_entry",
]

_SHIPPED = ProxySection()
GC_SETTINGS: tuple[GcSetting, ...] = (
    GcSetting("cpython", (700, 10, 10), False, "CPython's default"),
    GcSetting("cpython+freeze", (700, 10, 10), True, "CPython's thresholds, gc.freeze()"),
    GcSetting("10k+freeze", (10_000, 10, 10), True, "threshold0 10,000, gc.freeze()"),
    GcSetting("flatgate", _SHIPPED.gc_thresholds, _SHIPPED.gc_freeze, "flatgate's shipped default"),
    GcSetting("off", (0, 10, 10), False, "no automatic collection: the memory reference"),
)
# The rows measured under every setting (``direct`` is the floor, measured once a round).
TABLE_ROWS = ("proxy", "gateway")
_ROW = {r.name: r for r in ROWS}
_FLOOR = "direct"


@dataclass(frozen=True, slots=True)
class TableSettings:
    mode: str
    streams: Settings  # connections, window, rounds, rows (direct first)
    gc: tuple[GcSetting, ...] = GC_SETTINGS


FULL_TABLE = TableSettings(
    "full",
    replace(FULL, connections=1000, seconds=20.0, warmup=5.0, rows=(_FLOOR, *TABLE_ROWS)),
)
QUICK_TABLE = TableSettings(
    "quick",
    replace(QUICK, connections=200, seconds=4.0, warmup=2.0, rows=(_FLOOR, *TABLE_ROWS)),
)


def _window_rss_growth_mib(runs: Sequence[RowRun], process: str) -> float | None:
    """The largest growth over the rounds of ``process``'s tree RSS, from the
    window's first sample to its last (MiB)."""
    growth = []
    for run in runs:
        ends = run.window()
        if ends is None:
            continue
        a, b = ends
        if process in a.rss_kib and process in b.rss_kib:
            growth.append((b.rss_kib[process] - a.rss_kib[process]) / 1024)
    return round(max(growth), 1) if growth else None


def summarise_entry(
    gc: GcSetting, row: Row, runs: Sequence[RowRun], floor: dict[str, Any] | None
) -> dict[str, Any]:
    """One (setting, row): the streams bench's summary of its runs (without
    the per-second series), the figures of its flatgate process, and the
    whole-stream percentiles added to ``floor``'s (direct's, same run)."""
    out = summarise(row.name, row.note, runs)
    out.pop("series", None)
    out["setting"] = gc.name
    process = row.front  # proxy or gateway: the process the setting tunes
    mine = next((p for p in out["processes"] if p["process"] == process), None)
    coll = None if mine is None else mine["gc_collections_per_1k_streams"]
    pause = None if mine is None else mine["gc_pause_ms_per_1k_streams"]
    out["flatgate"] = {
        "process": process,
        "gc_collections_per_1k_streams": coll,
        "gc_pause_ms_per_1k_streams": pause,
        "gc_pause_ms_per_collection": round(pause / coll, 3)
        if coll and pause is not None
        else None,
        "cpu_us_per_token": None if mine is None else mine["cpu_us_per_token"],
        "cpu_cores": None if mine is None else mine["cpu_cores"],
        "peak_rss_mib": None if mine is None else mine["peak_rss_mib"],
        "rss_growth_mib": _window_rss_growth_mib(runs, process),
    }
    if floor is not None and floor.get("status") == "ok":
        out["added_duration_ms"] = added(out["duration_ms"], floor["duration_ms"])
        out["added_ttft_ms"] = added(out["ttft_ms"], floor["ttft_ms"])
    return out


def _skipped(gc: GcSetting | None, row: str, reason: str) -> dict[str, Any]:
    out = skipped(row, reason)
    if gc is not None:
        out["setting"] = gc.name
    return out


Plan = list[tuple[GcSetting | None, Row]]


def plan_round(k: int, gc: Sequence[GcSetting], rows: Sequence[Row]) -> Plan:
    """Round ``k``'s order: direct first, then every (setting, row), rotated by ``k``."""
    pairs: Plan = [(g, r) for g in gc for r in rows]
    j = k % len(pairs) if pairs else 0
    return [(None, _ROW[_FLOOR]), *pairs[j:], *pairs[:j]]


def _key(gc: GcSetting | None, row: Row) -> tuple[str, str]:
    return ("" if gc is None else gc.name, row.name)


def _method(ts: TableSettings, base: str) -> str:
    names = ", ".join(
        f"{g.name} {list(g.thresholds)}{' + freeze' if g.freeze else ''}" for g in ts.gc
    )
    return (
        f"{base} GC table: the rows {', '.join(r for r in ts.streams.rows if r != _FLOOR)} "
        f"each under every GC setting ({names}), written into the row's config as [proxy] "
        "and [edge] gc_thresholds / gc_freeze (the gateway reads [edge]'s), every (setting, "
        "row) alone on the machine with fresh servers; direct measured first in each round, "
        "the floor the added latency is taken from. GC: the flatgate process's /metrics "
        "(gc.callbacks, every generation) over the window, per 1,000 streams that ended in "
        "it; RSS growth: the process tree's VmRSS at the window's end minus at its start."
    )


def run(ts: TableSettings, log: Log = print) -> dict[str, Any]:
    """direct, then every (setting, row), every round; the result document."""
    s = ts.streams
    rows = [_ROW[n] for n in s.rows if n != _FLOOR]
    revision = source_revision(MEASURED_HERE)
    notes = [n for n in (raise_fd_limit(s.connections),) if n]
    edge = EdgeSection()
    if (edge.gc_thresholds, edge.gc_freeze) != (_SHIPPED.gc_thresholds, _SHIPPED.gc_freeze):
        notes.append(
            f"[edge]'s shipped GC default ({list(edge.gc_thresholds)}, freeze "
            f"{edge.gc_freeze}) differs from [proxy]'s: 'flatgate' sets [proxy]'s in both"
        )
    runs: dict[tuple[str, str], list[RowRun]] = {}
    reasons: dict[tuple[str, str], str] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flatgate-streams-gc-") as tmp:
        for k in range(s.rounds):
            for gc, row in plan_round(k, ts.gc, rows):
                key = _key(gc, row)
                if key in reasons:
                    continue
                where = Path(tmp) / (gc.name if gc is not None else _FLOOR)
                where.mkdir(exist_ok=True)
                got = measure_row(row, k, s, where, log, gc=gc)
                if isinstance(got, str):
                    reasons[key] = got
                    log(f"  {row.name} ({key[0] or 'floor'}): skipped: {got}")
                else:
                    runs.setdefault(key, []).append(got)
    floor_key = ("", _FLOOR)
    if floor_key in runs:
        floor = summarise(_FLOOR, _ROW[_FLOOR].note, runs[floor_key])
        floor.pop("series", None)
    else:
        floor = skipped(_FLOOR, reasons.get(floor_key, "not measured"))
    entries = []
    for gc in ts.gc:
        for row in rows:
            key = _key(gc, row)
            if key in runs:
                entries.append(summarise_entry(gc, row, runs[key], floor))
            else:
                entries.append(_skipped(gc, row.name, reasons.get(key, "not measured")))
    doc = header(s, revision)
    doc["mode"] = ts.mode
    doc["method"] = _method(ts, doc["method"])
    doc["gc_settings"] = [asdict(g) for g in ts.gc]
    doc["elapsed_seconds"] = round(time.monotonic() - started, 1)
    doc["notes"] = notes
    doc["floor"] = floor
    doc["entries"] = entries
    return doc


def settings_of(args: argparse.Namespace) -> TableSettings:
    """The table's settings from the streams bench's command line (``--gc-table``)."""
    ts = QUICK_TABLE if is_quick(args.quick) else FULL_TABLE
    s = ts.streams
    if args.rows:
        s = replace(s, rows=(_FLOOR, *names(args.rows, TABLE_ROWS, "rows")))
    if args.settings:
        by = {g.name: g for g in GC_SETTINGS}
        ts = replace(ts, gc=tuple(by[n] for n in names(args.settings, by, "GC settings")))
    s = with_args(s, args, ("connections", "seconds", "warmup", "rounds", "backpressure"))
    ts = replace(ts, streams=s)
    if ts.mode == "full" and ts != FULL_TABLE:
        ts = replace(ts, mode="custom", streams=replace(s, mode="custom"))
    return ts
