"""The GC table's report: ``streams-gc.json`` and ``streams-gc.md``.

Owns how a result document of ``benchmarks.streams.gctable`` is shown: the
headline table (one line per GC setting and row: GC collections and pause per
1,000 streams, the whole-stream duration's p50 / p99 / p99.9 added to
direct's, CPU per token, peak RSS and RSS growth of the flatgate process),
the floor (direct's own percentiles), the streams and errors of each line,
every process's cost, and the notes. Pure but for ``write_results``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.harness.report import md_facts, md_table, num, signed
from benchmarks.harness.results import write_results as _write
from benchmarks.streams.report import PROCESS_COLUMNS, errors, facts, process_rows

__all__ = ["render_markdown", "summary_table", "write_results"]


def _setting(doc: Mapping[str, Any], name: str) -> str:
    """``name (a, b, c)[, freeze]``: what a setting sets."""
    for g in doc.get("gc_settings") or []:
        if g["name"] == name:
            a, b, c = g["thresholds"]
            return f"{name}: ({a:,}, {b}, {c}){' + freeze' if g['freeze'] else ''}"
    return name


def summary_table(doc: Mapping[str, Any]) -> list[str]:
    """The headline: one line per (setting, row)."""
    head = ["GC setting", "row", "streams ok", "errors", "GC coll./1k streams"]
    head += ["GC pause (ms/1k streams)", "pause/coll. (ms)"]
    head += ["added p50 / p99 / p99.9 (ms)", "CPU (µs/token)", "peak RSS (MiB)"]
    head += ["RSS growth in window (MiB)"]
    rows = []
    for r in doc["entries"]:
        label = _setting(doc, r.get("setting", "?"))
        if r["status"] != "ok":
            rows.append([label, r["row"], "skipped", r["reason"][:160], *["-"] * 7])
            continue
        f = r["flatgate"]
        added = r.get("added_duration_ms") or {}
        rows.append(
            [
                label,
                r["row"],
                num(r["streams_ok"]),
                errors(r, outside=False),
                num(f["gc_collections_per_1k_streams"], 1),
                num(f["gc_pause_ms_per_1k_streams"], 2),
                num(f["gc_pause_ms_per_collection"], 2),
                " / ".join(signed(added.get(p)) for p in ("p50", "p99", "p99.9")),
                num(f["cpu_us_per_token"], 1),
                num(f["peak_rss_mib"], 1),
                signed(f["rss_growth_mib"]),
            ]
        )
    return md_table(head, rows, left=2)


def _floor_line(doc: Mapping[str, Any]) -> str:
    f = doc["floor"]
    if f["status"] != "ok":
        return f"The floor (direct) was not measured: {f['reason']}"
    d, t = f["duration_ms"], f["ttft_ms"]
    stub: dict[str, Any] = next((p for p in f["processes"] if p["process"] == "stub"), {})
    return (
        f"The floor, direct (the stub alone, same run): {f['streams_ok']:,} streams, "
        f"{f['errors']:,} errors; whole stream p50 / p99 / p99.9 {num(d['p50'])} / "
        f"{num(d['p99'])} / {num(d['p99.9'])} ms; time to first token p50 / p99 "
        f"{num(t['p50'])} / {num(t['p99'])} ms; {num(f['tokens_per_second'])} tokens/s; stub "
        f"{num(stub.get('cpu_us_per_token'), 1)} µs/token."
    )


def _process_table(doc: Mapping[str, Any]) -> list[str]:
    rows = [
        [r.get("setting", "?"), r["row"], *line] for r in doc["entries"] for line in process_rows(r)
    ]
    return md_table(["GC setting", "row", *PROCESS_COLUMNS], rows, left=3)


def _latency_table(doc: Mapping[str, Any]) -> list[str]:
    head = ["GC setting", "row", "p50 (ms)", "p99", "p99.9", "max", "added TTFT p50 / p99"]
    head += ["tokens/s", "stub late ticks"]
    rows = []
    for r in doc["entries"]:
        if r["status"] != "ok":
            continue
        d = r["duration_ms"]
        ttft = r.get("added_ttft_ms") or {}
        rows.append(
            [
                r.get("setting", "?"),
                r["row"],
                *(num(d[p], 1) for p in ("p50", "p99", "p99.9", "max")),
                " / ".join(signed(ttft.get(p)) for p in ("p50", "p99")),
                num(r["tokens_per_second"]),
                num(r["stub_late_ticks"]),
            ]
        )
    return md_table(head, rows, left=2)


def render_markdown(doc: Mapping[str, Any]) -> str:
    head = md_facts(facts(doc, ", per line"))
    lines = ["# Workload A: GC settings against latency and memory", "", *head, ""]
    lines += [doc["method"], ""]
    lines += ["## GC settings", ""]
    lines += [f"- {_setting(doc, g['name'])}: {g['note']}" for g in doc["gc_settings"]]
    lines += ["", "## Summary", "", *summary_table(doc), "", _floor_line(doc), ""]
    lines += [
        "Added = the line's percentile minus direct's, from the same run; GC, CPU and RSS "
        "are the flatgate process's (proxy, or the one-process gateway); pause/coll. = the "
        "mean pause of one collection; RSS growth = its process tree's resident set at the "
        "window's end minus at its start.",
        "",
    ]
    lines += ["## Latency and throughput", "", *_latency_table(doc), ""]
    lines += ["## Cost per process", "", *_process_table(doc), ""]
    notes = list(doc.get("notes") or [])
    for r in [doc["floor"], *doc["entries"]]:
        tag = f"{r.get('setting', 'floor')} {r['row']}"
        notes += [f"{tag}: {n}" for n in r.get("notes") or []]
        outside = r.get("errors_outside_window") or {}
        if outside:
            notes.append(f"{tag}: errors outside the window: {outside}")
    if notes:
        lines += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    return "\n".join(lines)


def write_results(doc: Mapping[str, Any], out: Path) -> list[Path]:
    """``streams-gc.json`` and ``streams-gc.md`` in ``out``."""
    return _write(out, "streams-gc", doc, render_markdown(doc))
