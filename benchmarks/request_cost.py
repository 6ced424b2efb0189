"""What one request costs, in process: CPU, allocations, GC and the share of each step.

Run: ``.venv/bin/python -m benchmarks.request_cost [--requests N] [--rounds R]
[--calls C] [--profile-requests P] [--quick] [--out DIR] [--from-json PATH]``

Every row of ``benchmarks.cost_rows`` (the proxy's ``.fbs`` hop answered
with SSE frames and with binary frames, the gateway's Chat Completions path
through the ``openai`` adapter, whole and streamed, and a floor beside each:
the least a Python server does for the same exchange) is served in memory,
with no socket, many times over, each request run to its end by hand inside
one running loop (the loop gets a turn every ``_TURN`` requests, counted in
the row). The garbage collector is tuned as every worker tunes it
(``plumbing.gctune``: thresholds 50,000/20/100, start-up frozen). Per row:

- CPU µs per request: ``time.process_time`` over ``--requests`` requests, the
  fastest of ``--rounds`` interleaved rounds (as ``benchmarks.cost_checks``);
- allocations and bytes allocated per request, transient ones included:
  ``benchmarks.allocs.count_allocations`` (memray) over up to ``--calls``
  requests, measured first, while the process is alone;
- GC collections per 1,000 requests, by generation: ``gc.get_stats()``
  before and after every round, summed; and the same over one more round
  at CPython's default thresholds (700/10/10), where the tuned ones rarely
  collect at all;
- each step's share: ``cProfile`` over ``--profile-requests`` requests, each
  function's time charged to its step by its module (``benchmarks.cost_steps``),
  as % of the profiled time.

It writes ``results/request-cost.{json,md}``; ``--quick`` (or
``BENCH_QUICK=1``) runs fewer requests into a temporary directory;
``--from-json`` rewrites the md from a json, measuring nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.allocs import count_allocations
from benchmarks.cost_rows import REQUEST_BYTES, TOKENS, Row, build_rows
from benchmarks.cost_steps import STEPS, profile, shares
from benchmarks.harness.report import head_facts, md_facts, md_table, num, ratio, times
from benchmarks.harness.results import (
    MEASURED,
    finish,
    head,
    is_quick,
    rerender,
    source_revision,
    write_results,
)
from flatgate.proxy.plumbing.gctune import DEFAULT_THRESHOLDS, tune

__all__ = ["NAME", "QUICK", "Plan", "main", "measure", "render", "write"]

NAME = "request-cost"
# Requests between two turns of the loop (its cancelled timers dropped).
_TURN = 100
# CPython's own GC thresholds, for comparison with the workers' tuned ones.
CPYTHON_THRESHOLDS = (700, 10, 10)
_PACKAGES = ("msgspec", "flatbuffers", "memray")
# The bench's own code, beside the product's (``MEASURED``): a change to
# either marks the revision.
_SOURCES = (
    "benchmarks/request_cost.py",
    "benchmarks/cost_rows.py",
    "benchmarks/cost_steps.py",
    "benchmarks/inprocess_gateway.py",
    "benchmarks/inmemory.py",
    "benchmarks/allocs.py",
    "benchmarks/payloads.py",
    "benchmarks/load/openai_bodies.py",
)
Doc = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Plan:
    """How many requests each measure takes, per row."""

    # Short rounds, many: on a shared machine, some fall in a quiet spell.
    requests: int = 1000
    rounds: int = 21
    calls: int = 500
    profile_requests: int = 2000


QUICK = Plan(requests=300, rounds=2, calls=50, profile_requests=200)


async def _turn() -> None:
    await asyncio.sleep(0)


def _gc_collections() -> list[int]:
    return [generation["collections"] for generation in gc.get_stats()]


async def _round(row: Row, n: int, gcs: list[int]) -> float:
    """Seconds of CPU per request over ``n`` requests; GC collections added to ``gcs``."""
    serve = row.serve
    before = _gc_collections()
    start = time.process_time()
    for i in range(n):
        serve()
        if i % _TURN == _TURN - 1:
            await _turn()
    spent = time.process_time() - start
    for gen, (a, b) in enumerate(zip(before, _gc_collections(), strict=True)):
        gcs[gen] += b - a
    return spent / n


def _call(serve: Callable[[], int]) -> int:
    return serve()


async def _allocations(rows: Sequence[Row], calls: int, log: Callable[[str], None]) -> Doc:
    out: Doc = {}
    for row in rows:
        found = count_allocations(_call, row.serve, calls, max_records=1_500_000)
        out[row.name] = {"allocs": found.allocs, "bytes": found.bytes, "ops": found.ops}
        log(f"{row.name}: {found.allocs:.0f} allocations, {found.bytes:.0f} B per request")
        await _turn()
    return out


async def _run(opts: Plan, log: Callable[[str], None]) -> Doc:
    log_fd = os.open(os.devnull, os.O_WRONLY)
    thresholds = gc.get_threshold()
    try:
        rows = build_rows(log_fd)
        for row in rows:  # warm caches, pools and metric children
            for _ in range(200):
                status = row.serve()
            assert status == 200, f"{row.name} answered {status}"
            await _turn()
        tune(DEFAULT_THRESHOLDS, freeze=True)
        # Allocations first: memray wants the process alone.
        allocs = await _allocations(rows, opts.calls, log)
        best = {row.name: float("inf") for row in rows}
        gcs = {row.name: [0, 0, 0] for row in rows}
        for r in range(opts.rounds):
            for row in rows:
                best[row.name] = min(
                    best[row.name], await _round(row, opts.requests, gcs[row.name])
                )
            log(f"round {r + 1}/{opts.rounds}")
        # One more round at CPython's thresholds: what the tuning spares.
        untuned = {row.name: [0, 0, 0] for row in rows}
        gc.set_threshold(*CPYTHON_THRESHOLDS)
        for row in rows:
            await _round(row, opts.requests, untuned[row.name])
        gc.set_threshold(*DEFAULT_THRESHOLDS)
        steps: dict[str, dict[str, float]] = {}
        for row in rows:
            steps[row.name] = shares(profile(row.serve, opts.profile_requests))
            await _turn()
    finally:
        os.close(log_fd)
        # As it was (a test's process goes on).
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    total = opts.requests * opts.rounds
    return {
        "rows": [
            {
                "name": row.name,
                "what": row.what,
                "floor": row.floor,
                "cpu_us": best[row.name] * 1e6,
                **allocs[row.name],
                "gc_per_1000": [1000.0 * c / total for c in gcs[row.name]],
                "gc_per_1000_cpython": [1000.0 * c / opts.requests for c in untuned[row.name]],
                "steps": steps[row.name],
            }
            for row in rows
        ]
    }


def measure(opts: Plan, log: Callable[[str], None]) -> Doc:
    """The result document: the head, the method and every row's figures."""
    revision = source_revision([*MEASURED, *_SOURCES])
    doc: Doc = head(revision, _PACKAGES)
    doc["method"] = {
        "request_bytes": REQUEST_BYTES,
        "tokens": TOKENS,
        "requests_per_round": opts.requests,
        "rounds": opts.rounds,
        "memray_calls": opts.calls,
        "profile_requests": opts.profile_requests,
        "gc_thresholds": list(DEFAULT_THRESHOLDS),
        "gc_thresholds_cpython": list(CPYTHON_THRESHOLDS),
    }
    # The machine's load around the run: CPU per request grows on a busy one.
    before = os.getloadavg()[0]
    doc.update(asyncio.run(_run(opts, log)))
    doc["load_average"] = [before, os.getloadavg()[0]]
    return doc


_CAVEATS = """\
In process, no socket: what the product's Python costs a request, not what a
server does (granian's HTTP, the kernel's sockets) nor what the load bench's
figures include. Each request is run by hand (every await completes at once),
so nothing waits and the event loop only gets a turn every 100 requests;
rows and floors are served the same way, so the distance between them is the
product's code. The floors parse nothing, check nothing, log nothing: they
are a bound, not a server anyone would run. Allocations are allocator calls
(memray, with Python's allocators traced; objects from CPython's free lists
cost none), transient ones included. The shares come from a deterministic
profile, which slows Python calls more than C ones: they say where the time
goes, not how many µs each step takes; `handler`, `event loop` and `harness`
are the request flow's own lines, asyncio's, and the bench's fake exchange
and transport (`benchmarks.cost_steps` maps every module).
"""


def _load(doc: Doc) -> list[tuple[str, object]]:
    load = doc.get("load_average")
    if not load:
        return []
    return [("load average (1 min), start / end", f"{load[0]:.2f} / {load[1]:.2f}")]


def render(doc: Doc) -> str:
    """The Markdown report of a result document."""
    rows = doc["rows"]
    by_name = {row["name"]: row for row in rows}
    m = doc["method"]
    lines = [
        "# Per-request cost, in process",
        "",
        "`python -m benchmarks.request_cost` (a line of `make bench`). A "
        f"{m['request_bytes']} B request, a {m['tokens']}-token answer; CPU the fastest of "
        f"{m['rounds']} interleaved rounds of {m['requests_per_round']:,} requests; "
        f"allocations over {m['memray_calls']} requests (memray); shares from cProfile over "
        f"{m['profile_requests']} requests; GC thresholds {m['gc_thresholds']} (the workers'"
        f" tuning), start-up frozen, and one more round at CPython's "
        f"{m['gc_thresholds_cpython']}.",
        "",
        *md_facts([*head_facts(doc), *_load(doc)]),
        "",
        "| row | what |",
        "|---|---|",
        *(f"| {row['name']} | {row['what']} |" for row in rows),
        "",
    ]
    table = []
    for row in rows:
        floor = by_name.get(row["floor"])
        table.append(
            [
                row["name"],
                num(row["cpu_us"], 1),
                times(ratio(row["cpu_us"], floor["cpu_us"])) if floor else "-",
                num(row["allocs"], 0),
                times(ratio(row["allocs"], floor["allocs"])) if floor else "-",
                num(row["bytes"], 0),
                " / ".join(num(c, 2) for c in row["gc_per_1000"]),
                " / ".join(num(c, 2) for c in row["gc_per_1000_cpython"]),
            ]
        )
    head_row = [
        "row",
        "CPU µs/request",
        "vs floor",
        "allocations/request",
        "vs floor",
        "bytes allocated/request",
        "GC per 1,000 requests (gen 0 / 1 / 2)",
        "the same at 700/10/10",
    ]
    lines += [*md_table(head_row, table), ""]
    measured = [row for row in rows if row["floor"]]
    used = [s for s in STEPS if any(row["steps"].get(s, 0.0) >= 0.05 for row in rows)]
    lines += [
        "Share of each step, % of the profiled time (steps no row spends on are left out):",
        "",
        *md_table(
            ["step", *(row["name"] for row in measured)],
            [[s, *(num(row["steps"].get(s, 0.0), 1) for row in measured)] for s in used],
        ),
        "",
        _CAVEATS,
    ]
    return "\n".join(lines)


def write(doc: Doc, out: Path) -> list[Path]:
    return write_results(out, NAME, doc, render(doc))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.request_cost", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    full = Plan()
    parser.add_argument("--requests", type=int, default=full.requests, help="a round's, per row")
    parser.add_argument("--rounds", type=int, default=full.rounds)
    parser.add_argument("--calls", type=int, default=full.calls, help="requests memray tracks")
    parser.add_argument("--profile-requests", type=int, default=full.profile_requests)
    parser.add_argument("--quick", action="store_true", help="fewer requests, to a temporary dir")
    parser.add_argument("--out", type=Path, help="write here (default: benchmarks/results)")
    parser.add_argument("--from-json", type=Path, help="re-render this result, measuring nothing")
    opts = parser.parse_args(argv)
    if opts.from_json is not None:
        rerender(opts.from_json, write, opts.out)
        return
    quick = is_quick(opts.quick)
    plan = QUICK if quick else Plan(opts.requests, opts.rounds, opts.calls, opts.profile_requests)
    finish(lambda log: measure(plan, log), write, out=opts.out, quick=quick, name=NAME)


if __name__ == "__main__":
    main()
