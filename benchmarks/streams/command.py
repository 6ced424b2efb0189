"""``python -m benchmarks.streams``'s command line: workload A
(``benchmarks.streams.run``), or with ``--gc-table`` the GC table
(``benchmarks.streams.gctable``), each into its report."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.results import finish, rerender
from benchmarks.streams import gcreport, gctable, report
from benchmarks.streams import run as streams_run
from benchmarks.streams.gctable import GC_SETTINGS, TABLE_ROWS
from benchmarks.streams.rows import Timing
from benchmarks.streams.run import run, settings_of

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.streams", description=streams_run.__doc__
    )
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--quick", action="store_true", help="200 connections, 5 s a row")
    p.add_argument(
        "--gc-table", action="store_true", help="the rows under every GC setting (streams-gc.*)"
    )
    p.add_argument(
        "--connections", type=int, help="client connections (default 2000; 1000 with --gc-table)"
    )
    p.add_argument("--seconds", type=float, help="measurement window per row")
    p.add_argument("--warmup", type=float, help="seconds before the window")
    p.add_argument("--rounds", type=int, help="rounds, the row order rotated (default 1)")
    p.add_argument("--tokens", type=int, help=f"tokens per stream (default {Timing().tokens})")
    p.add_argument(
        "--rows",
        help="comma-separated rows (direct is always included; with --gc-table, of "
        f"{', '.join(TABLE_ROWS)})",
    )
    p.add_argument(
        "--settings",
        help="--gc-table: comma-separated GC settings, of "
        + ", ".join(g.name for g in GC_SETTINGS),
    )
    p.add_argument("--without", help="tools to treat as absent, e.g. nginx")
    p.add_argument(
        "--backpressure", type=int, help="serve flatgate via granian's CLI with this backpressure"
    )
    p.add_argument("--out", type=Path, help="results directory (default: see above)")
    p.add_argument(
        "--from-json", type=Path, help="measure nothing: render the report from this json"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    write = gcreport.write_results if args.gc_table else report.write_results
    if args.from_json:
        rerender(args.from_json, write, args.out)
        return 0
    if args.gc_table:
        ts = gctable.settings_of(args)
        doc = finish(
            lambda log: gctable.run(ts, log=log),
            write,
            out=args.out,
            quick=ts.mode != "full",
            name="streams-gc",
        )
        summary = gcreport.summary_table
    else:
        s = settings_of(args)
        doc = finish(
            lambda log: run(s, log=log), write, out=args.out, quick=s.mode != "full", name="streams"
        )
        summary = report.summary_table
    if doc is None:
        return 130
    print("\n".join(summary(doc)))
    return 0
