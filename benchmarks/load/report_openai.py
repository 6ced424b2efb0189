"""The OpenAI workload's report: ``load-openai.md``, flatgate beside its peers.

Renders one result document of ``--workload openai``
(``benchmarks.load.openai_workload``): the header, one table for the chat
request (throughput, "vs." ratios against direct-openai and each peer, CPU per
request and its ratio against each peer, peak RSS, latency at the fixed rate
and unloaded), the streaming table (whole-stream time with its ratio against
each peer, time to first token) and the caveats. Pure; never asserts on
figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.harness.report import head_facts, md_facts, md_row, md_table, num, signed, times
from benchmarks.load.report import hop_cpu, hop_rss, row_label

__all__ = ["CAVEATS_OPENAI", "render_openai"]

CAVEATS_OPENAI = """\
**Caveats.** The load generator, the stub and the server under test share one
small machine, so absolute figures are low and a busy neighbour moves them;
rows are interleaved in rounds so that ratios hold better than absolutes, and
throughput is each row's best round. The edge row runs two busy processes (edge
and proxy) and its CPU is both together; every other row runs one server
process (Portkey: one node process; LiteLLM: one uvicorn worker; nginx: one
worker) besides the stub. Each row's CPU is the CPU of its whole process tree.
The fixed rate is low so that every row, LiteLLM too, can take three times
it; a row that cannot is offered 35% of its own throughput instead (marked
†) and its latencies are not comparable with the others'. Added latency is a
difference of percentiles (the row's minus direct-openai's). The peers run as
shipped, at the versions in the header, configured for their best case (see
benchmarks/LOAD.md, "Peers"); the request carries only `model` and `messages`,
so none of them has tools, images or other fields to translate. The stub's
canned answer is 8 deltas: a longer answer costs a gateway that parses it more.
"""


def _ratio_cells(r: Mapping[str, Any], versus: Sequence[str], prefix: str = "") -> list[str]:
    return [times(r.get(f"{prefix}vs_{name.replace('-', '_')}")) for name in versus]


def _size_table(rows: Sequence[Mapping[str, Any]], size: str, versus: Sequence[str]) -> list[str]:
    head = ["Row", "Throughput (req/s)", "vs. direct"]
    head += [f"vs. {n}" for n in versus]
    head += ["CPU (µs/req)", *(f"CPU vs. {n}" for n in versus), "Peak RSS (MiB)"]
    head += ["p50 (ms)", "p99 (ms)", "added p50 (ms)", "added p99 (ms)"]
    head += ["unloaded added p50 (ms)"]
    out = md_table(head, [])
    for r in rows:
        if r.get("size") != size:
            continue
        if r["status"] != "ok":
            out.append(f"| {r['row']} | skipped: {r.get('reason', '')[:160]} |" + " |" * 11)
            continue
        cpu_text, hop = hop_cpu(r)
        added = r.get("added_ms") or {}
        lat = r.get("latency_ms") or {}
        cells = [row_label(r), num(r.get("throughput_rps"), 0), times(r.get("vs_direct"))]
        cells += _ratio_cells(r, versus)
        cells += [cpu_text, *_ratio_cells(r, versus, "cpu_"), hop_rss(r, hop)]
        cells += [num(lat.get("p50"), 3), num(lat.get("p99"), 3)]
        cells += [signed(added.get("p50"), 3), signed(added.get("p99"), 3)]
        out.append(md_row([*cells, signed(r.get("unloaded_added_p50_ms"), 3)]))
    return out


def _stream_table(rows: Sequence[Mapping[str, Any]], versus: Sequence[str]) -> list[str]:
    head = ["Row", "whole stream p50 (ms)", "p99 (ms)", "added p50 (ms)"]
    head += [f"vs. {n}" for n in versus]
    head += ["TTFT p50 (ms)", "added TTFT (ms)", "streams", "text errors"]
    out = md_table(head, [])
    for r in rows:
        if r["status"] != "ok":
            out.append(f"| {r['row']} | n/a: {r.get('reason', '')[:160]} |" + " |" * 7)
            continue
        cells = [r["row"], num(r.get("stream_ms_p50"), 2), num(r.get("stream_ms_p99"), 2)]
        cells += [signed(r.get("added_stream_ms"), 2), *_ratio_cells(r, versus, "stream_")]
        cells += [num(r.get("ttft_ms_p50"), 2), signed(r.get("added_ttft_ms"), 2)]
        errors = r.get("text_mismatches", 0) + r.get("errors", 0)
        out.append(md_row([*cells, r.get("streams", 0), errors]))
    return out


def render_openai(doc: Mapping[str, Any]) -> str:
    h = doc
    s = h["settings"]
    versus = list(s.get("versus", ()))
    rates = s.get("rates", {})
    peers = "requested" if s.get("peers") else "not requested (BENCH_PEERS=1 or --peers)"
    out = [
        "# flatgate load bench: an OpenAI chat request, flatgate and its peers",
        "",
        *md_facts(
            [
                *head_facts(h),
                ("mode", f"{h['mode']} ({h.get('elapsed_seconds', '?')} s); peers {peers}"),
            ]
        ),
        "",
        h["method"],
        "",
        "Columns: throughput at saturation (best round); vs. X = this row's throughput "
        "over X's (above 1: more requests a second); CPU of the row's servers per request "
        "at saturation (direct-openai: the stub's), and CPU vs. X = this row's over X's "
        "(below 1: less CPU per request); peak RSS of each of the row's servers; p50 and "
        "p99 at the fixed rate, and added = the row's minus direct-openai's; unloaded = "
        "one connection, no other load. Streaming: vs. X = this row's whole-stream p50 "
        "over X's (below 1: faster).",
        "",
    ]
    for size in s["sizes"]:
        body = next((r.get("body_bytes") for r in h["rows"] if r.get("body_bytes")), None)
        out += [
            f"## OpenAI chat request ({num(body)} bytes of JSON; fixed rate "
            f"{num(rates.get(size), 0)} req/s; {s.get('connections', 32)} connections)",
            "",
            *_size_table(h["rows"], size, versus),
            "",
        ]
    out += [
        f"## Streaming ({s.get('stream_concurrency')} concurrent streams of 32 tokens)",
        "",
        *_stream_table(h["streaming"], versus),
        "",
        "† offered 35% of its own saturation throughput, below the common fixed rate.",
        "",
        CAVEATS_OPENAI,
    ]
    return "\n".join(out)
