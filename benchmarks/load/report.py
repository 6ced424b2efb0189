"""The load bench's report: ``load.json``, ``load.md`` and ``load.png``.

Owns the rendering of one result document (``benchmarks.load.run.run``): the
header (date, CPU, Python, versions, method), one table per prompt size in
the shape of the micro benchmark's (throughput, memory, GC, p99, with "vs."
ratio columns), the streaming table, the targets of the proxy issues as
reported figures, and the caveats. ``render_markdown`` is pure;
``benchmarks.load.run.write_results`` writes the files (the OpenAI workload's
Markdown is ``benchmarks.load.report_openai``'s, on the helpers here). Never
asserts on figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.plot import pyplot, save_figure
from benchmarks.harness.report import head_facts, md_facts, md_row, md_table, num, signed, times

__all__ = [
    "CAVEATS",
    "cpu_by_size",
    "floor_lines",
    "hop_cpu",
    "hop_rss",
    "per_kb_note",
    "plot",
    "render_markdown",
    "row_label",
    "targets",
]

CAVEATS = """\
**Caveats.** Everything shares one small machine: the load generator, the
stub, the server under test and (for the edge row) a second hop run on the
same cores, so absolute figures are lower than on a dedicated box and a busy
neighbour moves them; rows are interleaved in rounds so that ratios hold
better than absolutes, and throughput is each row's best round (a neighbour's
load only ever takes throughput away). A proxied row runs three busy processes
where direct runs two, and the stub itself costs about twice the CPU per
request behind a proxy (fewer requests per wakeup than under wrk's 32
connections): both cap every proxied row's throughput, whatever the proxy
does. The canned stub answers without parsing the body, so every row pays the
same minimal backend cost. wrk runs closed-loop with one thread: its latencies
include queueing at saturation, which is why latency is taken from the
open-loop run at a fixed rate instead. Added latency is the difference of two
percentiles (the row's minus direct's), not a percentile of per-request
differences; below ~0.05 ms it is within noise. A row whose saturation
throughput is under three times the common rate is offered 35% of its own
throughput instead (marked †), so its latencies are not comparable with the
others'. The fixed-rate percentiles are the median over rounds of each round's
percentile, so one round hit by a neighbour's burst does not set them; p99.9
rests on a handful of samples per round. The baselines (json-route,
msgspec-route, protobuf-route) run under RSGI like proxy-rsgi, so compare them
with that row; proxy-asgi is the shipped default and pays ASGI's per-message
dicts for backpressure. Allocations per request are not measured in this
end-to-end run (memray cannot follow granian's worker processes cheaply):
`make bench` counts them per operation, and `python -m benchmarks.cost_checks`
per request in the proxy's own code with an in-memory exchange; the GC columns
here (collections and pause per 1,000 requests, from the servers' own
`gc.callbacks`) are the end-to-end trace of allocation pressure. Peak RSS is
the worker's high-water mark since start, over this size and the smaller ones.
Where FlatBuffers loses: below ~16 KB the route read is a small share of a
proxy's per-request cost, so the `.fbs` proxy gains little or nothing in
throughput over the JSON and protobuf baselines; a JSON client must have its
request translated first (the edge row's cost); and a proxy that needs more
than the route gives the zero-copy read's advantage back field by field. (The
bodies themselves are a near tie: this generator's FlatBuffers request is ~100
bytes smaller than its compact JSON.)
"""


def _hop_gc(row: Mapping[str, Any], key: str) -> float | None:
    gc = row.get("gc") or {}
    values = [g[key] for g in gc.values() if g.get(key) is not None]
    return sum(values) if values else None


def row_label(r: Mapping[str, Any]) -> str:
    """The row's name, marked † when offered less than the common rate, and
    with its failed requests."""
    mark = "" if r.get("same_rate_as_direct", True) else " †"
    errors = (r.get("wrk_errors") or 0) + (r.get("rate_errors") or 0)
    return f"{r['row']}{mark}" + (f" ({errors} failed requests)" if errors else "")


def hop_cpu(r: Mapping[str, Any]) -> tuple[str, list[str]]:
    """CPU per request at saturation as the tables show it (the stub's, so
    marked, for a row with no server of its own), and the hop's servers."""
    cpu = r.get("cpu_us_per_req") or {}
    hop = [n for n in cpu if not _is_stub(n)]
    if hop:
        return num(r.get("hop_cpu_us_per_req"), 0), hop
    stub = next((v for n, v in cpu.items() if _is_stub(n)), None)
    return num(stub, 0) + " (stub)", hop


def _is_stub(server: str) -> bool:
    """A backend stub of the run (``stub``, the OpenAI workload's ``stub-512``...)."""
    return server == "stub" or server.startswith("stub-")


def hop_rss(row: Mapping[str, Any], hop_names: Sequence[str]) -> str:
    rss = row.get("peak_rss_mib") or {}
    parts = [f"{rss[n]:.0f}" for n in hop_names if n in rss]
    if not parts:
        stub = next((v for n, v in rss.items() if _is_stub(n)), None)
        return num(stub, 0) + " (stub)" if stub is not None else "-"
    return " + ".join(parts)


_SIZE_COLUMNS = [
    "Row",
    "Throughput (req/s)",
    "vs. direct",
    "vs. json-route",
    "vs. floor",
    "CPU (µs/req)",
    "CPU vs. floor",
    "Peak RSS (MiB)",
    "GC (coll./1k req)",
    "GC pause (ms/1k req)",
    "p99 (ms)",
    "added p50 (ms)",
    "added p99 (ms)",
    "added p99.9 (ms)",
    "unloaded added p50 (ms)",
]


def _size_table(rows: Sequence[Mapping[str, Any]], size: str) -> list[str]:
    out = md_table(_SIZE_COLUMNS, [])
    for r in rows:
        if r.get("size") != size:
            continue
        if r["status"] != "ok":
            reason = r.get("reason", "")[:120]
            out.append(f"| {r['row']} | skipped: {reason} |" + " |" * (len(_SIZE_COLUMNS) - 2))
            continue
        added = r.get("added_ms") or {}
        cpu_text, hop_names = hop_cpu(r)
        cells = [row_label(r), num(r.get("throughput_rps"), 0), times(r.get("vs_direct"))]
        cells += [times(r.get("vs_json_route")), times(r.get("vs_floor")), cpu_text]
        cells += [times(r.get("cpu_vs_floor")), hop_rss(r, hop_names)]
        cells += [num(_hop_gc(r, "collections_per_1k"), 1)]
        cells += [num(_hop_gc(r, "pause_ms_per_1k"), 2), num(r["latency_ms"].get("p99"), 3)]
        cells += [signed(added.get(q), 3) for q in ("p50", "p99", "p99.9")]
        out.append(md_row([*cells, signed(r.get("unloaded_added_p50_ms"), 3)]))
    return out


def _stream_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    head = ["Row", "TTFT p50 (ms)", "added TTFT (ms)", "time/token (ms)"]
    out = md_table([*head, "added time/token (ms)", "streams", "text errors"], [])
    for r in rows:
        if r["status"] != "ok":
            out.append(f"| {r['row']} | n/a: {r.get('reason', '')[:100]} |" + " |" * 5)
            continue
        ttft = [num(r.get("ttft_ms_p50"), 3), signed(r.get("added_ttft_ms"), 3)]
        tpot = [num(r.get("tpot_ms_mean"), 3), signed(r.get("added_tpot_ms"), 3)]
        errors = r.get("text_mismatches", 0) + r.get("errors", 0)
        out.append(md_row([r["row"], *ttft, *tpot, r.get("streams", 0), errors]))
    return out


def _get(rows: Sequence[Mapping[str, Any]], name: str, size: str) -> Mapping[str, Any] | None:
    for r in rows:
        if r["row"] == name and r.get("size") == size and r["status"] == "ok":
            return r
    return None


def _row_cpu(r: Mapping[str, Any]) -> float | None:
    """CPU per request at saturation: the hop's servers, or the stub's for direct."""
    cpu = r.get("cpu_us_per_req") or {}
    if any(n != "stub" for n in cpu):
        value = r.get("hop_cpu_us_per_req")
        return float(value) if value else None
    return cpu.get("stub")


def _row_part(r: Mapping[str, Any], key: str) -> float | None:
    """``key``'s figure (``sys_us_per_req``: the system part of ``_row_cpu``;
    ``minor_faults_per_req``) summed over the hop's servers, or the stub's."""
    cpu = r.get("cpu_us_per_req") or {}
    part = r.get(key) or {}
    names = [n for n in cpu if n != "stub"] or ["stub"]
    if not part or any(n not in part for n in names):
        return None
    return float(sum(part[n] for n in names))


def _per_kb(rows: Sequence[Mapping[str, Any]], name: str, small: str, large: str) -> float | None:
    """µs of CPU per extra KB of request body, from ``small`` to ``large``."""
    a, b = _get(rows, name, small), _get(rows, name, large)
    if a is None or b is None:
        return None
    ca, cb = _row_cpu(a), _row_cpu(b)
    kb = (b.get("body_bytes", 0) - a.get("body_bytes", 0)) / 1024
    return None if ca is None or cb is None or kb <= 0 else (cb - ca) / kb


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


_SCALED = ("128KB", "1MB")  # the sizes whose CPU per request is set against 1 KB's


def cpu_by_size(doc: Mapping[str, Any]) -> list[str]:
    """CPU per request at every size, per row, and how it grows with the body:
    the ratios to 1 KB's, µs per KB from 1 KB to the largest size, the
    kernel's share there, and the stub's own CPU per request (it drops the
    body unread: granian receiving it). Empty without 1 KB and a larger size."""
    rows = doc["rows"]
    sizes = list(doc["settings"]["sizes"])
    scaled = [x for x in _SCALED if x in sizes]
    if "1KB" not in sizes or not scaled:
        return []
    top = sizes[-1]
    head = ["Row", *(f"CPU {x} (µs/req)" for x in sizes), *(f"{x} / 1KB" for x in scaled)]
    head += [f"µs per KB (1KB→{top})", f"system share at {top}", f"page faults/req at {top}"]
    head += [f"stub µs/req at 1KB / {top}"]
    out = md_table(head, [])
    names = list(dict.fromkeys(r["row"] for r in rows))
    for name in names:
        cells = {x: _get(rows, name, x) for x in sizes}
        cpu = {x: (_row_cpu(r) if r is not None else None) for x, r in cells.items()}
        if all(v is None for v in cpu.values()):
            continue
        base = cpu.get("1KB")
        ratios = [times(_div(cpu[x], base)) for x in scaled]
        last = cells[top]
        system = _row_part(last, "sys_us_per_req") if last is not None else None
        share = _div(system, cpu[top])
        ends = (cells["1KB"], last)
        stub = [(c.get("cpu_us_per_req") or {}).get("stub") if c else None for c in ends]
        line = [name, *(num(cpu[x], 0) for x in sizes), *ratios]
        line += [num(_per_kb(rows, name, "1KB", top), 3), num(share and share * 100, 0, "%")]
        faults = _row_part(last, "minor_faults_per_req") if last is not None else None
        line.append(num(faults, 0))
        line += [" / ".join(num(v, 0) for v in stub)]
        out.append(md_row(line))
    return out


def per_kb_note(doc: Mapping[str, Any]) -> list[str]:
    """Where the per-KB cost goes, in this run's figures (empty without them)."""
    rows = doc["rows"]
    sizes = list(doc["settings"]["sizes"])
    if "1KB" not in sizes or sizes[-1] == "1KB":
        return []
    top = sizes[-1]
    names = ("direct", "nginx", "proxy-rsgi", "json-route")
    slope = {n: _per_kb(rows, n, "1KB", top) for n in names}
    if slope["direct"] is None or slope["proxy-rsgi"] is None:
        return []
    parts = [
        f"Per KB of request body, from 1 KB to {top}: the stub, which answers without "
        f"reading the body, spends {slope['direct']:.3f} µs (granian receiving it off "
        "loopback and dropping it)"
    ]
    if slope["nginx"] is not None:
        parts.append(f"nginx, which receives it and sends it on, {slope['nginx']:.3f} µs")
    parts.append(f"proxy-rsgi {slope['proxy-rsgi']:.3f} µs")
    if slope["json-route"] is not None:
        parts.append(f"json-route {slope['json-route']:.3f} µs")
    text = ", ".join(parts) + "."
    shares = []
    for name in ("proxy-rsgi", "nginx", "direct"):
        r = _get(rows, name, top)
        if r is None:
            continue
        system, cpu = _row_part(r, "sys_us_per_req"), _row_cpu(r)
        faults = _row_part(r, "minor_faults_per_req")
        if system is None or not cpu or faults is None:
            continue
        shares.append(f"{name} {system / cpu * 100:.0f}% and {faults:,.0f}")
    if shares:
        text += (
            f" At {top}, the system (kernel) share of the CPU per request and the minor page "
            f"faults per request (each a fresh 4 KiB page) are: {'; '.join(shares)}."
        )
    return [text]


_BESIDE_FLOOR = ("proxy-rsgi", "proxy-asgi", "json-route", "nginx")


def floor_lines(doc: Mapping[str, Any]) -> list[str]:
    """Per size, each proxy's and baseline's CPU per request, p99 at the fixed
    rate and unloaded added p50 beside the floor's (a granian app that parses
    nothing, issue 43); empty without a measured floor row."""
    rows = doc["rows"]
    lines: list[str] = []
    for size in doc["settings"]["sizes"]:
        f = _get(rows, "floor", size)
        if f is None:
            continue
        parts = []
        for name in _BESIDE_FLOOR:
            r = _get(rows, name, size)
            if r is None:
                continue
            parts.append(
                f"{name} {times(r.get('cpu_vs_floor'))} its CPU per request "
                f"({num(r.get('hop_cpu_us_per_req'), 0)} µs), "
                f"p99 {num(r['latency_ms'].get('p99'), 3)} ms, "
                f"unloaded added p50 {signed(r.get('unloaded_added_p50_ms'), 3)} ms"
            )
        if parts:
            lines.append(
                f"- {size}: the floor {num(f.get('hop_cpu_us_per_req'), 0)} µs per request, p99 "
                f"{num(f['latency_ms'].get('p99'), 3)} ms at the fixed rate, unloaded added "
                f"p50 {signed(f.get('unloaded_added_p50_ms'), 3)} ms; " + "; ".join(parts) + "."
            )
    return lines


def targets(doc: Mapping[str, Any]) -> list[str]:
    """The proxy issues' targets, as figures from this run (reported, not asserted)."""
    rows = doc["rows"]
    lines: list[str] = []

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("met" if ok else "missed")

    for proxy in ("proxy-rsgi", "proxy-asgi"):
        p = _get(rows, proxy, "16KB")
        if p is None:
            continue
        vd, vj = p.get("vs_direct"), p.get("vs_json_route")
        lines.append(
            f"- {proxy} at 16 KB: {times(vd)} direct throughput "
            f"(target >= 0.3x: {verdict(None if vd is None else vd >= 0.3)}), "
            f"{times(vj)} json-route "
            f"(target >= 1.5x: {verdict(None if vj is None else vj >= 1.5)}); "
            f"{num(p.get('hop_cpu_us_per_req'), 0)} µs CPU per request (target <= 60)."
        )
    for size in ("16KB", "128KB"):
        j, b = _get(rows, "json-route", size), _get(rows, "protobuf-route", size)
        for proxy in ("proxy-rsgi", "proxy-asgi"):
            p = _get(rows, proxy, size)
            if p is None or j is None or b is None:
                continue
            pv = p["latency_ms"]["p99"]
            jv, bv = j["latency_ms"]["p99"], b["latency_ms"]["p99"]
            ok = None if None in (pv, jv, bv) else pv < jv and pv < bv
            lines.append(
                f"- p99 at the fixed rate, {size}: {proxy} {num(pv, 3)} ms vs json-route "
                f"{num(jv, 3)} ms, protobuf-route {num(bv, 3)} ms (target: below both: "
                f"{verdict(ok)})."
            )
    for size in doc["settings"]["sizes"]:
        parts = [
            f"{name} {signed(r.get('unloaded_added_p50_ms'), 3)} ms"
            for name in ("proxy-rsgi", "proxy-asgi", "nginx")
            if (r := _get(rows, name, size)) is not None
        ]
        if parts:
            lines.append(
                f"- unloaded added p50, one connection, {size}: {', '.join(parts)} "
                "(target <= 0.25)."
            )
    j = _get(rows, "json-route", "16KB")
    if j is not None:
        parts = [
            f"{name} {num(_hop_gc(r, 'collections_per_1k'), 1)}"
            for name in ("proxy-rsgi", "proxy-asgi")
            if (r := _get(rows, name, "16KB")) is not None
        ]
        if parts:
            lines.append(
                f"- GC collections per 1,000 requests at 16KB: {', '.join(parts)} vs json-route "
                f"{num(_hop_gc(j, 'collections_per_1k'), 1)} (target: far below json-route)."
            )
    for proxy in ("proxy-rsgi", "proxy-asgi"):
        small = _get(rows, proxy, "1KB")
        base = _row_cpu(small) if small is not None else None
        parts = []
        for size, limit in (("128KB", 1.5), ("1MB", 4.0)):
            big = _get(rows, proxy, size)
            cpu = _row_cpu(big) if big is not None else None
            if base and cpu is not None:
                ratio = cpu / base
                parts.append(
                    f"{num(cpu, 0)} µs at {size}, {ratio:.2f}x (target <= {limit:g}x: "
                    f"{verdict(ratio <= limit)})"
                )
        if parts:
            lines.append(
                f"- {proxy} CPU per request against its {num(base, 0)} µs at 1 KB: "
                + "; ".join(parts)
                + "."
            )
    sizes = list(doc["settings"]["sizes"])
    for size in dict.fromkeys(x for x in ("16KB", sizes[-1]) if x in sizes):
        rss = [
            f"{name} {r['peak_rss_mib'][name]:.0f} MiB"
            for name in ("proxy-rsgi", "proxy-asgi")
            if (r := _get(rows, name, size)) is not None and name in r.get("peak_rss_mib", {})
        ]
        if rss:
            lines.append(
                f"- peak RSS of the proxy worker after the {size} runs (and the smaller sizes'): "
                f"{', '.join(rss)} (target <= 64 under the 16 KB load)."
            )
    return lines


def render_markdown(doc: Mapping[str, Any]) -> str:
    h = doc
    s = h["settings"]
    out = [
        "# flatgate load bench: added latency and throughput, end to end",
        "",
        *md_facts([*head_facts(h), ("mode", f"{h['mode']} ({h.get('elapsed_seconds', '?')} s)")]),
        "",
        h["method"],
        "",
        "Columns: throughput at saturation (best round: noise on a shared machine only "
        "takes throughput away; every round is in load.json); CPU of the hop's servers "
        "per request at saturation (direct: the stub's); peak RSS of each hop server's "
        "worker; GC collections and pause of the hop's servers per 1,000 requests "
        "(from /metrics); p99 at the fixed rate; added = the row's percentile minus "
        "direct's at the same rate; unloaded = one connection, no other load.",
        "",
    ]
    rates = s.get("rates", {})
    for size in s["sizes"]:
        body = next(
            (
                r.get("body_bytes")
                for r in h["rows"]
                if r.get("size") == size and r.get("body_bytes")
            ),
            None,
        )
        out += [
            f"## {size} prompt (FlatBuffers body {num(body)} bytes; fixed rate "
            f"{num(rates.get(size), 0)} req/s)",
            "",
            *_size_table(h["rows"], size),
            "",
        ]
    by_size = cpu_by_size(h)
    if by_size:
        out += [
            "## CPU per request by prompt size",
            "",
            "CPU of the hop's servers per request at saturation (direct: the stub's); the "
            "ratios to the 1 KB figure; the slope in µs per KB of request body; the system "
            "(kernel) share of the largest size's figure; and the stub's own CPU per request "
            "behind the row.",
            "",
            *by_size,
            "",
            *per_kb_note(h),
            "",
        ]
    beside = floor_lines(h)
    if beside:
        out += [
            "## Against the floor",
            "",
            "The floor row is a granian RSGI app that parses nothing "
            "(`benchmarks.load.floor_app`): it sends the FlatBuffer on to the same stub as it "
            "came, on a kept-alive connection, and answers the stub's frames as they came. "
            'What a row costs above it is its own work; "vs. floor" in the tables is the '
            'throughput ratio, "CPU vs. floor" the ratio of CPU per request.',
            "",
            *beside,
            "",
        ]
    out += [
        "## Streaming (1 KB prompt, 32 tokens)",
        "",
        *_stream_table(h["streaming"]),
        "",
        "## Targets (issues 3 and 6)",
        "",
        *targets(h),
        "",
        "† offered 35% of its own saturation throughput, below the common fixed rate.",
        "",
        CAVEATS,
    ]
    return "\n".join(out)


def plot(doc: Mapping[str, Any], path: Path) -> None:
    plt = pyplot()
    sizes = list(doc["settings"]["sizes"])
    names: list[str] = []
    for r in doc["rows"]:
        if r["row"] not in names:
            names.append(r["row"])
    reduced = {r["row"] for r in doc["rows"] if r.get("same_rate_as_direct") is False}
    labels = [f"{n} †" if n in reduced else n for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / max(1, len(sizes))
    for i, size in enumerate(sizes):
        thr, p99 = [], []
        for n in names:
            r = _get(doc["rows"], n, size)
            thr.append((r.get("throughput_rps") or 0) if r else 0)
            added = (r.get("added_ms") or {}).get("p99") if r else None
            p99.append(added if added is not None else 0)
        xs = [k + (i - (len(sizes) - 1) / 2) * width for k in range(len(names))]
        ax1.bar(xs, thr, width, label=size)
        ax2.bar(xs, p99, width, label=size)
    for ax, title in (
        (ax1, "Throughput at saturation (req/s, 32 connections)"),
        (ax2, "Added p99 over direct at the fixed rate (ms; † at a lower rate)"),
    ):
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(labels, rotation=35, ha="right")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"flatgate load bench, {doc['date']}, {doc['cpu']}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
