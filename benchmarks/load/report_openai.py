"""The OpenAI workload's report: ``load-openai.md``, flatgate beside its peers.

Renders one result document of ``--workload openai``
(``benchmarks.load.openai_workload``): the header; the real path in issue
23's shape (``summary_table``: a line per case and figure, a column per peer
and the gateway, the gateway's ratio against Portkey, vllm-router and nginx)
and the issue's targets computed (``benchmarks.load.cases.targets``); then one table
per case (throughput, "vs." ratios against the case's direct row and each
peer, CPU per request and its ratio against each peer, peak RSS, latency at
the fixed rate where it ran, and unloaded), the streaming table (whole-stream
time with its ratio against each peer, time to first token) and the caveats.
Pure; never asserts on figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.harness.report import (
    head_facts,
    md_facts,
    md_row,
    md_table,
    num,
    ratio,
    signed,
    times,
)
from benchmarks.load.cases import CASES, ROLES, Case, Target, result_row, targets
from benchmarks.load.report import hop_cpu, hop_rss, row_label

__all__ = ["CAVEATS_OPENAI", "render_openai", "summary_table", "targets_table"]

CAVEATS_OPENAI = """\
**Caveats.** The load generator, the stub and the server under test share one
small machine, so absolute figures are low and a busy neighbour moves them;
rows are interleaved in rounds so that ratios hold better than absolutes, and
throughput is each row's best round. The edge row runs two busy processes (edge
and proxy) and its CPU is both together; every other row runs one server
process (Portkey: one node process; LiteLLM: one uvicorn worker; nginx: one
worker; vllm-router: one process, its Rust runtime's threads) besides the
stub. Each row's CPU is the CPU of its whole process tree.
The fixed rate is low so that every row, LiteLLM too, can take three times
it; a row that cannot is offered 35% of its own throughput instead (marked
†) and its latencies are not comparable with the others'. Added latency is a
difference of percentiles (the row's minus direct-openai's). The peers run as
shipped, at the versions in the header, configured for their best case (see
docs/performance.md, "Peers"); the request carries only `model` and `messages`,
so none of them has tools, images or other fields to translate. The stub's
canned answers are 32 or 512 deltas of one token each; a canned stream arrives
in one write (tokens in a burst, the case where per-token cost shows most, and
where a relay that writes what one read brought as one write sends a few
events where another sends every one: the burst cases do not compare like
with like). The cadence cases (issue 43) do: their stub sends one token every
few milliseconds, each its own write, as a model does, so every row relays
every event; their CPU per token is the one to compare.
The cases after the first run without the fixed rate, with shorter wrk and
unloaded runs (see the method); LiteLLM is measured on the 32-token OpenAI
cases only, and no peer but Portkey stands in the Anthropic cases. In the
Bedrock cases (issue 39) no peer stands: the direct and nginx rows send the
same conversation as a Converse request straight to the Bedrock stub, and the
gateway row sends the OpenAI chat request, which the gateway translates to
Converse and signs with SigV4 (its CPU includes both); the stub checks no
signature. The Gemini cases (issue 40) are the same with the Gemini stub: the
direct and nginx rows send the conversation as a generateContent request, the
gateway's gemini backend translates the OpenAI chat request to one (with its
`x-goog-api-key`, which the stub does not check).
"""

_ROLE_NAMES = {"nginx": "nginx", "portkey": "Portkey", "litellm": "LiteLLM"}
_ROLE_NAMES |= {"vllm-router": "vllm-router", "gateway": "flatgate gateway"}
# The summary's ratio columns: the gateway's figure over each of these roles'.
_VERSUS_ROLES = ("portkey", "vllm-router", "nginx")


def _get(rows: Sequence[Mapping[str, Any]], case: Case, role: str, key: str) -> Any:
    name = case.columns.get(role)
    r = None if name is None else result_row(rows, case.name, name)
    return None if r is None else r.get(key)


def _cell(rows: Sequence[Mapping[str, Any]], case: Case, role: str, key: str, digits: int) -> str:
    if role not in case.columns:
        return "-"
    name = case.columns[role]
    if result_row(rows, case.name, name) is None:
        found = any(r.get("size") == case.name and r["row"] == name for r in rows)
        return "skipped" if found else "-"
    value = _get(rows, case, role, key)
    return signed(value, digits) if key.startswith("unloaded_added") else num(value, digits)


def _versus(rows: Sequence[Mapping[str, Any]], case: Case, key: str, other: str) -> str:
    """The gateway's figure over ``other``'s; none over a figure at or below 0
    (an added latency lost in the noise)."""
    theirs = _get(rows, case, other, key)
    if not isinstance(theirs, int | float) or theirs <= 0:
        return "-"
    return times(ratio(_get(rows, case, "gateway", key), theirs))


def summary_table(doc: Mapping[str, Any]) -> list[str]:
    """The real path in the issue's shape: for each case of the run, its
    throughput, the CPU of each row's server per request (per token for a
    stream) and the unloaded added p50 at c1; a column per peer and the
    gateway, then the gateway's ratio against Portkey, vllm-router and nginx."""
    rows = doc["rows"]
    head = ["workload (same stub behind every row)", *(_ROLE_NAMES[r] for r in ROLES)]
    out = md_table([*head, *(f"gateway vs. {_ROLE_NAMES[r]}" for r in _VERSUS_ROLES)], [])
    sizes = set(doc["settings"]["sizes"])
    for case in (c for c in CASES if c.name in sizes):
        unit = "streams/s" if case.stream else "req/s"
        lines = [(f"{unit}", "throughput_rps", 0), ("CPU µs per request", "hop_cpu_us_per_req", 0)]
        if case.stream:
            lines.append(("CPU µs per token", "hop_cpu_us_per_token", 2))
            lines.append(("unloaded added p50 to the first byte, c1 (ms)", _FIRST, 2))
        lines.append(("unloaded added p50, c1 (ms)", "unloaded_added_p50_ms", 2))
        for what, key, digits in lines:
            cells = [f"{case.label}: {what}"]
            cells += [_cell(rows, case, role, key, digits) for role in ROLES]
            cells += [_versus(rows, case, key, role) for role in _VERSUS_ROLES]
            out.append(md_row(cells))
    return out


_FIRST = "unloaded_added_first_byte_p50_ms"


def _met(t: Target) -> str:
    met = t.met
    return "no figure" if met is None else "met" if met else "**missed**"


def targets_table(doc: Mapping[str, Any]) -> list[str]:
    """The issue's targets, through the openai adapter and (the same ratios)
    through the anthropic adapter, each with its figure and bound."""
    out = md_table(["target", "adapter", "ratio", "bound", ""], [])
    for api in ("openai", "anthropic"):
        for t in targets(doc["rows"], api):
            bound = f"{'at most' if t.at_most else 'at least'} {t.bound:g}x"
            out.append(md_row([t.name, api, times(t.value), bound, _met(t)]))
    return out


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
        "at saturation (a direct row: the stub's), and CPU vs. X = this row's over X's "
        "(below 1: less CPU per request); peak RSS of each of the row's servers; p50 and "
        "p99 at the fixed rate, and added = the row's minus its case's direct row's; unloaded = "
        "one connection, no other load. Streaming: vs. X = this row's whole-stream p50 "
        "over X's (below 1: faster).",
        "",
    ]
    out += [
        "## The real path, side by side (issue 23's shape)",
        "",
        "Each row's server CPU per request (the stub's not counted); added = the row's "
        "unloaded p50 minus its case's direct row's; vs. = the gateway's figure over "
        "the peer's. A case or peer that did not run shows -.",
        "",
        *summary_table(h),
        "",
        "## Targets (issue 23)",
        "",
        *targets_table(h),
        "",
    ]
    plans = s.get("plans") or {}
    labels = {c.name: c.label for c in CASES}
    for size in s["sizes"]:
        plan = plans.get(size) or {}
        body = next((r.get("body_bytes") for r in h["rows"] if r.get("size") == size), None)
        connections = plan.get("connections") or s.get("connections", 32)
        rate = (
            f"fixed rate {num(rates.get(size), 0)} req/s"
            if plan.get("fixed_rate", True)
            else "no fixed rate"
        )
        out += [
            f"## {labels.get(size, size)} ({num(body)} bytes of JSON; {rate}; "
            f"{connections} connections)",
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
