"""The streams bench's report: ``streams.json``, ``streams.md`` and ``streams.png``.

Owns how a result document is shown: the Markdown tables (the summary, with
each row's own servers' CPU per token against nginx's in front of a stub of
the same protocol; streams and errors; whole-stream latency and time to
first token, absolute and added to direct's; per process CPU per token,
cores, GC per 1,000 streams and peak RSS; the stub's pacing) and the plot
(``benchmarks.harness.plot.timeseries``: per second, p50 and p99 of the
streams that ended in it, GC collections and RSS of every flatgate process,
each row from its own start, the warm-up shaded). Also what the GC table's
report shares with it (``facts``, ``errors``, ``process_rows``). Pure but
for ``plot`` and ``write_results``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.plot import Panel, Series, timeseries
from benchmarks.harness.report import head_facts, md_facts, md_table, num, signed, times
from benchmarks.harness.results import write_results as _write
from benchmarks.streams.results import PERCENTILES

__all__ = [
    "PROCESS_COLUMNS",
    "errors",
    "facts",
    "nominal_ms",
    "plot",
    "process_rows",
    "render_markdown",
    "summary_table",
    "write_results",
]


def _kinds(kinds: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in kinds.items())


def errors(r: Mapping[str, Any], outside: bool = True) -> str:
    """The measured streams' errors; and those of the others (warm-up, drain)."""
    kinds = r.get("errors_by_kind") or {}
    text = f"{r['errors']:,} ({_kinds(kinds)})" if kinds else "0"
    others = r.get("errors_outside_window") or {}
    if outside and others:
        text += f"; outside the window {sum(others.values()):,} ({_kinds(others)})"
    return text


def facts(doc: Mapping[str, Any], window: str = "") -> list[tuple[str, object]]:
    """A report's head: ``head_facts``, the mode, the load and the backend."""
    s = doc["settings"]
    t = s["timing"]
    return [
        *head_facts(doc),
        ("mode", doc["mode"]),
        ("connections", f"{s['connections']:,}"),
        ("backend", f"ttft {t['ttft_ms']:g} ms, {t['itl_ms']:g} ms/token, {t['tokens']} tokens"),
        ("window", f"{s['warmup']:g} s warm-up, {s['seconds']:g} s measured{window}"),
        ("rounds", s["rounds"]),
        ("elapsed", f"{doc.get('elapsed_seconds', 0):,.0f} s"),
    ]


def summary_table(doc: Mapping[str, Any]) -> list[str]:
    """The headline: streams, errors, added latency, CPU per token, GC, RSS."""
    head = ["Row", "streams ok", "errors", "added p50 / p99 / p99.9 / max (ms)"]
    head += ["added TTFT p50 / p99 (ms)", "CPU µs/token (per process)"]
    head += ["servers' CPU µs/token (vs. nginx)", "GC coll./1k streams", "peak RSS (MiB)"]
    rows = []
    for r in doc["rows"]:
        if r["status"] != "ok":
            rows.append([r["row"], "skipped", "-", r["reason"][:160], "-", "-", "-", "-", "-"])
            continue
        own = num(r.get("server_cpu_us_per_token"), 2)
        if r.get("cpu_vs_nginx") is not None:
            own += f" ({times(r['cpu_vs_nginx'])})"
        added = r.get("added_duration_ms") or {}
        ttft = r.get("added_ttft_ms") or {}
        procs = r["processes"]
        rows.append(
            [
                r["row"],
                num(r["streams_ok"]),
                errors(r),
                " / ".join(signed(added.get(p)) for p, _ in PERCENTILES)
                if r["row"] != "direct"
                else "(floor) " + " / ".join(num(r["duration_ms"][p]) for p, _ in PERCENTILES),
                " / ".join(signed(ttft.get(p)) for p in ("p50", "p99"))
                if r["row"] != "direct"
                else "(floor) " + " / ".join(num(r["ttft_ms"][p]) for p in ("p50", "p99")),
                ", ".join(f"{p['process']} {num(p['cpu_us_per_token'], 1)}" for p in procs),
                own if r["row"] != "direct" else "-",
                ", ".join(
                    f"{p['process']} {num(p['gc_collections_per_1k_streams'], 1)}"
                    for p in procs
                    if p["gc_collections_per_1k_streams"] is not None
                )
                or "-",
                ", ".join(f"{p['process']} {num(p['peak_rss_mib'])}" for p in procs),
            ]
        )
    return md_table(head, rows)


def _latency_table(doc: dict[str, Any], key: str) -> list[str]:
    head = ["Row"] + [f"{p} (ms)" for p, _ in PERCENTILES]
    head += [f"added {p}" for p, _ in PERCENTILES]
    rows = []
    for r in doc["rows"]:
        if r["status"] != "ok":
            continue
        added = r.get("added_" + key) or {}
        rows.append(
            [r["row"]]
            + [num(r[key][p], 1) for p, _ in PERCENTILES]
            + [signed(added.get(p)) if r["row"] != "direct" else "-" for p, _ in PERCENTILES]
        )
    return md_table(head, rows)


# The cost of each process of a row, the client's too: its columns and cells.
PROCESS_COLUMNS = ["process", "CPU µs/token", "cores", "GC coll./1k streams"]
PROCESS_COLUMNS += ["GC pause ms/1k streams", "peak RSS (MiB)"]


def process_rows(r: Mapping[str, Any]) -> list[list[str]]:
    """One line per process of result row ``r`` (its client last), in
    ``PROCESS_COLUMNS``; none for a row that did not run."""
    if r["status"] != "ok":
        return []
    return [
        [
            p["process"],
            num(p["cpu_us_per_token"], 2),
            num(p["cpu_cores"], 2),
            num(p.get("gc_collections_per_1k_streams"), 1),
            num(p.get("gc_pause_ms_per_1k_streams"), 2),
            num(p.get("peak_rss_mib"), 1),
        ]
        for p in [*r["processes"], {"process": "client", **r["client"]}]
    ]


def _process_table(doc: dict[str, Any]) -> list[str]:
    rows = [[r["row"], *line] for r in doc["rows"] for line in process_rows(r)]
    return md_table(["Row", *PROCESS_COLUMNS], rows, left=2)


def _volume_table(doc: dict[str, Any]) -> list[str]:
    head = ["Row", "streams measured", "ok", "errors", "errors outside the window"]
    head += ["tokens relayed", "tokens/s (offered)", "window (s)", "stub late ticks"]
    head += ["stub max lag (ms)"]
    # Closed loop: what the client would take if every stream ran at the backend's pace.
    t = doc["settings"]["timing"]
    offered = doc["settings"]["connections"] * t["tokens"] / (nominal_ms(doc) / 1000)
    rows = []
    for r in doc["rows"]:
        if r["status"] != "ok":
            rows.append([r["row"], f"skipped: {r['reason']}", *["-"] * 8])
            continue
        outside = _kinds(r["errors_outside_window"]) or "0"
        rows.append(
            [
                r["row"],
                num(r["streams"]),
                num(r["streams_ok"]),
                errors(r, outside=False),
                outside,
                num(r["tokens_relayed"]),
                f"{num(r['tokens_per_second'])} ({num(offered)})",
                num(r["window_seconds"], 1),
                num(r["stub_late_ticks"]),
                num(r["stub_max_lag_ms"], 1),
            ]
        )
    return md_table(head, rows)


def render_markdown(doc: dict[str, Any]) -> str:
    lines = ["# Workload A: many concurrent token streams", "", *md_facts(facts(doc)), ""]
    lines += [doc["method"], ""]
    lines += ["## Summary", "", *summary_table(doc), ""]
    lines += ["## Streams and errors", "", *_volume_table(doc), ""]
    lines += ["## Whole-stream duration", "", *_latency_table(doc, "duration_ms"), ""]
    lines += ["## Time to first token", "", *_latency_table(doc, "ttft_ms"), ""]
    lines += ["## Cost per process", "", *_process_table(doc), ""]
    notes = list(doc.get("notes") or [])
    for r in doc["rows"]:
        notes += [f"{r['row']}: {n}" for n in r.get("notes") or []]
    if notes:
        lines += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    lines += ["Plot: `streams.png` (per second, each row from its own start).", ""]
    return "\n".join(lines)


def _points(
    series: Sequence[dict[str, Any]], key: str, minus: float = 0.0
) -> list[tuple[float, float]]:
    out = []
    for p in series:
        v = p.get(key)
        out.append((float(p["t"]), math.nan if v is None else max(0.0, float(v) - minus)))
    return out


def nominal_ms(doc: dict[str, Any]) -> float:
    """A stream's length at the backend's own pace: ttft + tokens x itl."""
    t = doc["settings"]["timing"]
    return float(t["ttft_ms"] + t["tokens"] * t["itl_ms"])


def plot(doc: dict[str, Any], path: Path) -> None:
    """The PNG: latency, GC and RSS per second, every row on one time axis."""
    rows = [r for r in doc["rows"] if r["status"] == "ok" and r.get("series")]
    nominal = nominal_ms(doc)
    p99, p50, ttft, gc, rss = [], [], [], [], []
    for r in rows:
        series = r["series"]
        p99.append(Series(r["row"], _points(series, "p99_ms", nominal)))
        p50.append(Series(r["row"], _points(series, "p50_ms", nominal)))
        ttft.append(Series(r["row"], _points(series, "ttft_p99_ms")))
        for proc in r["processes"]:
            name = proc["process"]
            if name == "stub":
                continue  # the same backend in every row (its figures are in the tables)
            label = f"{r['row']}: {name}" if name != r["row"] else name
            rss.append(Series(label, _points(series, f"{name}.rss_mib")))
            if proc["gc_collections_per_1k_streams"] is not None:
                gc.append(Series(label, _points(series, f"{name}.gc")))
    s = doc["settings"]
    panels = [
        Panel(
            f"whole-stream duration p99 over the backend's own {nominal:,.0f} ms "
            "(ms; streams that ended in each second)",
            p99,
        ),
        Panel(f"whole-stream duration p50 over {nominal:,.0f} ms (ms)", p50),
        Panel("time to first token p99 (ms)", ttft),
        Panel("GC collections per second (flatgate processes)", gc),
        Panel("RSS (MiB) of the process tree (granian's main process and worker)", rss),
    ]
    timeseries(
        [p for p in panels if p.series],
        path,
        title=f"Workload A: {s['connections']:,} concurrent streams ({doc['mode']} run)",
        x_label="seconds since the row's client began",
        shades=[(0.0, float(s["warmup"]), "warm-up")],
    )


def write_results(doc: dict[str, Any], out: Path) -> list[Path]:
    """``streams.json``, ``streams.md`` and ``streams.png`` in ``out``."""
    return _write(out, "streams", doc, render_markdown(doc), lambda path: plot(doc, path))
