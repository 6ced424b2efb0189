"""``make bench``: JSON vs protobuf vs FlatBuffers, per operation.

Owns the measurement harness. For every ``(format, op)`` of
``benchmarks.codecs.cases()`` and every prompt size it records one row: time
per op (pytest-benchmark's calibration rule and its ``Stats``), allocations and
bytes per op (memray, ``benchmarks.allocs``), and garbage collections per 100k
ops (``gc.callbacks``). Each format is measured in a fresh subprocess of its
own, so no codec inherits another's heap, caches or free lists. Results go to
``benchmarks/results/micro.{json,md,png}`` (``benchmarks.micro_report``); a
quick run's go to a new temporary directory unless ``--out`` names one, so
that it never overwrites the committed full run.

    python -m benchmarks.micro                 # full run (make bench)
    BENCH_QUICK=1 python -m benchmarks.micro   # every row, fewer rounds, to a temp dir
    python -m benchmarks.micro --sizes 1KB,tiny=200 --formats json,flatgate --out DIR
    python -m benchmarks.micro --render        # rewrite micro.md/png from micro.json
    python -m benchmarks.micro --sites flatgate route   # one op's allocations, by site

Must not: assert on figures (it reports them), touch the network, or run two
measurements at once (the workers run one after the other).
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from google.protobuf.internal import api_implementation
from pytest_benchmark.stats import Stats
from pytest_benchmark.timers import compute_timer_precision

from benchmarks.allocs import count_allocations, count_raw
from benchmarks.codecs import FORMATS, OPS, cases, load, operation
from benchmarks.harness.results import RESULTS, ROOT, is_quick, machine, output_dir, versions
from benchmarks.micro_report import render_markdown, render_plot
from benchmarks.payloads import PROMPT_SIZES, make_request

__all__ = [
    "FULL",
    "QUICK",
    "RESULTS",
    "Settings",
    "main",
    "measure",
    "parse_sizes",
    "render",
    "run",
    "run_worker",
    "sites",
]

SEED = 0
_TIMER = time.perf_counter
_LIBRARIES = ("flatbuffers", "msgspec", "protobuf", "memray", "pytest-benchmark", "matplotlib")


@dataclass(frozen=True, slots=True)
class Settings:
    """How long each measurement runs (seconds) and how many ops it may take.

    ``min_time``/``max_time``/``min_rounds`` mean what they mean to
    pytest-benchmark: a round repeats the op until it lasts ``min_time`` (and
    at least ten timer ticks); rounds go on for ``max_time``, at least
    ``min_rounds`` of them. ``gc_time`` and ``alloc_time`` size the GC and
    memray loops from the measured time per op.
    """

    min_time: float
    max_time: float
    min_rounds: int
    warmup_time: float
    gc_time: float
    gc_min_ops: int
    gc_max_ops: int
    alloc_time: float
    alloc_min_ops: int
    alloc_max_ops: int
    alloc_max_records: int
    name: str = "custom"

    def __post_init__(self) -> None:
        if min(self.min_time, self.max_time, self.gc_time, self.alloc_time) <= 0:
            raise ValueError("times must be > 0")
        if min(self.min_rounds, self.gc_min_ops, self.alloc_min_ops, self.alloc_max_records) < 1:
            raise ValueError("counts must be >= 1")
        if self.gc_max_ops < self.gc_min_ops or self.alloc_max_ops < self.alloc_min_ops:
            raise ValueError("max ops must be >= min ops")


FULL = Settings(
    min_time=20e-6,
    max_time=0.5,
    min_rounds=5,
    warmup_time=0.05,
    gc_time=0.3,
    gc_min_ops=20,
    gc_max_ops=100_000,
    alloc_time=0.03,
    alloc_min_ops=3,
    alloc_max_ops=1000,
    alloc_max_records=150_000,
    name="full",
)
QUICK = replace(
    FULL,
    max_time=0.04,
    warmup_time=0.005,
    gc_time=0.02,
    gc_min_ops=5,
    alloc_time=0.003,
    alloc_min_ops=2,
    alloc_max_ops=100,
    alloc_max_records=20_000,
    name="quick",
)


def parse_sizes(spec: str) -> dict[str, int]:
    """``"1KB,128KB,tiny=200"`` -> ``{"1KB": 1024, "128KB": 131072, "tiny": 200}``."""
    sizes: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        label, eq, value = item.partition("=")
        if eq:
            if not value.isdigit():
                raise ValueError(f"size {item!r}: expected label=bytes")
            sizes[label] = int(value)
        elif item in PROMPT_SIZES:
            sizes[item] = PROMPT_SIZES[item]
        else:
            raise ValueError(f"size {item!r}: not one of {', '.join(PROMPT_SIZES)} nor label=bytes")
    if not sizes:
        raise ValueError("no sizes given")
    return sizes


# --------------------------------------------------------------------------
# One measurement (runs in the worker process).


def _loop(fn: Callable[[Any], object], arg: object, loops: int) -> float:
    start = _TIMER()
    for _ in itertools.repeat(None, loops):
        fn(arg)
    return _TIMER() - start


def _time(
    fn: Callable[[Any], object], arg: object, s: Settings, precision: float
) -> tuple[Stats, int]:
    """pytest-benchmark's method: calibrate the loops per round, then time rounds."""
    end = _TIMER() + s.warmup_time
    while _TIMER() < end:
        fn(arg)
    min_time = max(s.min_time, precision * 10)
    loops = 1
    while (duration := _loop(fn, arg, loops)) < min_time:
        # As pytest-benchmark: scale up by the shortfall (tenfold when too fast to see).
        if duration <= 0:
            loops *= 10
        else:
            loops = max(loops + 1, math.ceil(min_time * loops / duration))
    stats = Stats()
    end = _TIMER() + s.max_time
    while True:
        stats.update(_loop(fn, arg, loops) / loops)
        if len(stats.data) >= s.min_rounds and _TIMER() >= end:
            return stats, loops


def _count_gc(fn: Callable[[Any], object], arg: object, ops: int) -> tuple[int, float, float]:
    """``(collections, seconds in GC, seconds in total)`` over ``ops`` calls."""
    collections = 0
    in_gc = 0.0
    started = 0.0

    def callback(phase: str, info: Mapping[str, int]) -> None:
        nonlocal collections, in_gc, started
        if phase == "start":
            collections += 1
            started = _TIMER()
        else:
            in_gc += _TIMER() - started

    gc.collect()
    gc.callbacks.append(callback)
    try:
        total = _loop(fn, arg, ops)
    finally:
        gc.callbacks.remove(callback)
    return collections, in_gc, total


def _clamp(value: float, low: int, high: int) -> int:
    return max(low, min(high, int(value)))


def _stats_ns(stats: Stats, loops: int) -> dict[str, Any]:
    ns = 1e9
    data = stats.sorted_data
    p99 = statistics.quantiles(data, n=100, method="inclusive")[98] if len(data) > 1 else data[0]
    return {
        "min": stats.min * ns,
        "max": stats.max * ns,
        "mean": stats.mean * ns,
        "stddev": stats.stddev * ns,
        "median": stats.median * ns,
        "q1": stats.q1 * ns,
        "q3": stats.q3 * ns,
        "iqr": stats.iqr * ns,
        "p99": p99 * ns,
        "outliers": stats.outliers,
        "ops": stats.ops,
        "rounds": stats.rounds,
        "iterations": loops,
    }


def measure(
    fn: Callable[[Any], object], arg: object, settings: Settings, precision: float
) -> dict[str, Any]:
    """One row's figures: time, GC and allocations of ``fn(arg)``.

    ``precision`` is the timer's (``compute_timer_precision``), taken once.
    """
    gc.collect()
    stats, loops = _time(fn, arg, settings, precision)
    per_op = stats.median
    gc_ops = _clamp(settings.gc_time / per_op, settings.gc_min_ops, settings.gc_max_ops)
    collections, in_gc, total = _count_gc(fn, arg, gc_ops)
    alloc_ops = _clamp(settings.alloc_time / per_op, settings.alloc_min_ops, settings.alloc_max_ops)
    allocs = count_allocations(fn, arg, alloc_ops, max_records=settings.alloc_max_records)
    out = fn(arg)
    return {
        "input_bytes": len(arg) if isinstance(arg, bytes) else None,
        "output_bytes": len(out) if isinstance(out, bytes) else None,
        "ns_per_op": per_op * 1e9,
        "allocs_per_op": allocs.allocs,
        "bytes_per_op": allocs.bytes,
        "gc_per_100k": collections * 100_000 / gc_ops,
        "gc_time_pct": 100 * in_gc / total if total > 0 else 0.0,
        "gc_ops": gc_ops,
        "alloc_ops": allocs.ops,
        "py_calls_per_op": allocs.frames,
        "stats": _stats_ns(stats, loops),
    }


def run_worker(fmt: str, sizes: Mapping[str, int], settings: Settings) -> list[dict[str, Any]]:
    """Every row of one format, in this process."""
    codec = load(fmt)
    precision = compute_timer_precision(_TIMER)
    rows = []
    for label, size in sizes.items():
        args = codec.inputs(make_request(size, SEED))
        for op in codec.OPS:
            row = {"format": fmt, "op": op, "size": label, "prompt_bytes": size}
            row |= measure(operation(codec, op), args[op], settings, precision)
            print(
                f"  {fmt:>16} {op:<9} {label:>6} {row['ns_per_op']:>14,.0f} ns"
                f" {row['allocs_per_op']:>9,.1f} allocs {row['bytes_per_op']:>13,.0f} B",
                file=sys.stderr,
                flush=True,
            )
            rows.append(row)
    return rows


# --------------------------------------------------------------------------
# The run (the parent process).


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _header(sizes: Mapping[str, int], settings: Settings, formats: Sequence[str]) -> dict[str, Any]:

    return {
        **machine(),
        "libraries": versions(_LIBRARIES),
        "protobuf_backend": str(api_implementation.Type()),
        "mode": settings.name,
        "settings": asdict(settings),
        "sizes": dict(sizes),
        "formats": list(formats),
        "ops": list(OPS),
        "seed": SEED,
        "load_start": _load(),
        "method": {
            "time": (
                "pytest-benchmark's rule: loops per round calibrated so that a round lasts"
                " at least max(min_time, 10 timer ticks), rounds repeated for max_time"
                " (at least min_rounds), GC enabled; its Stats over per-op round times."
                " ns_per_op is the median; p99 is over rounds, not single requests."
            ),
            "allocations": (
                "memray with trace_python_allocators and native stacks: every allocator"
                " call in the measured loop (pymalloc and malloc families, transient ones"
                " included; frees and mmap not counted), minus the same loop around a"
                " no-op, minus what memray's profile hook alone makes CPython 3.11"
                " allocate (a frame object per Python call, an iterator per tuple unpack;"
                " told apart by their C stacks). Objects from free lists are not"
                " allocations. bytes_per_op sums the sizes asked for (a realloc counts"
                " its new size)."
            ),
            "gc": (
                "gc.callbacks counting collections (and time inside them) over gc_ops"
                " calls after a gc.collect(); gc_per_100k scales the count to 100,000 calls"
                " (gc_ops is at most 100,000, fewer for slow ops within gc_time)."
            ),
            "isolation": "each format in a fresh subprocess, one after the other.",
        },
    }


def _spawn(fmt: str, sizes: Mapping[str, int], settings: Settings) -> list[dict[str, Any]]:
    spec = ",".join(f"{label}={size}" for label, size in sizes.items())
    with tempfile.TemporaryDirectory(prefix="flatgate-bench-") as tmp:
        result = Path(tmp) / "rows.json"
        cmd = [sys.executable, "-m", "benchmarks.micro", "--worker", fmt, "--sizes", spec]
        cmd += ["--settings", json.dumps(asdict(settings)), "--result", str(result)]
        done = subprocess.run(cmd, cwd=ROOT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the {fmt} worker failed (exit {done.returncode})")
        rows: list[dict[str, Any]] = json.loads(result.read_text(encoding="utf-8"))
        return rows


def run(
    sizes: Mapping[str, int],
    settings: Settings,
    out_dir: Path = RESULTS,
    formats: Sequence[str] = tuple(FORMATS),
) -> dict[str, Any]:
    """Measure every case at every size, write ``micro.{json,md,png}`` to ``out_dir``."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown formats: {', '.join(unknown)}")
    header = _header(sizes, settings, formats)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for fmt in formats:
        print(f"{fmt}: measuring in a fresh process", file=sys.stderr, flush=True)
        rows += _spawn(fmt, sizes, settings)
    header["load_end"] = _load()
    header["seconds"] = round(time.monotonic() - started, 1)
    header["cases"] = [list(c) for c in cases(tuple(formats))]
    doc = {"header": header, "rows": rows}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "micro.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    render(out_dir)
    return doc


def render(out_dir: Path = RESULTS) -> None:
    """(Re)write ``micro.md`` and ``micro.png`` from ``out_dir/micro.json``."""

    doc = json.loads((out_dir / "micro.json").read_text(encoding="utf-8"))
    (out_dir / "micro.md").write_text(render_markdown(doc), encoding="utf-8")
    render_plot(doc, out_dir / "micro.png")


def sites(fmt: str, op: str, size: tuple[str, int], calls: int) -> list[str]:
    """One op's allocations per call at one ``(label, bytes)`` size, then each
    site (the Python line and the C path under it) that allocates at least
    every other call."""
    codec = load(fmt)
    fn = operation(codec, op)
    label, nbytes = size
    arg = codec.inputs(make_request(nbytes))[op]
    found = count_allocations(fn, arg, calls)
    lines = [
        f"{fmt} {op} at {label}, per call: {found.allocs:.2f} allocations,"
        f" {found.bytes:,.0f} bytes, {found.frames:.1f} Python calls (not counted)",
        "",
    ]
    by_site: collections.Counter[str] = collections.Counter()
    count_raw(fn, arg, calls, by_site)
    for site, n in sorted(by_site.items()):
        if n >= calls / 2:
            lines.append(f"  {n / calls:5.2f}  {site}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (or BENCH_QUICK=1)")
    parser.add_argument("--sizes", default=",".join(PROMPT_SIZES), help="labels or label=bytes")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--out", type=Path, help="directory for micro.* (default: see above)")
    parser.add_argument(
        "--render", action="store_true", help="only rewrite micro.md and micro.png from micro.json"
    )
    parser.add_argument(
        "--sites",
        nargs=2,
        metavar=("FORMAT", "OP"),
        help="measure one op at the first of --sizes: its allocations per call, by site",
    )
    parser.add_argument("--calls", type=int, default=200, help="--sites: calls tracked")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render:
        render(args.out or RESULTS)
        return 0
    sizes = parse_sizes(args.sizes)
    if args.sites:
        fmt, op = args.sites
        print("\n".join(sites(fmt, op, next(iter(sizes.items())), args.calls)))
        return 0
    if args.worker:
        settings = Settings(**json.loads(args.settings))
        rows = run_worker(args.worker, sizes, settings)
        args.result.write_text(json.dumps(rows), encoding="utf-8")
        return 0
    quick = is_quick(args.quick)
    out = output_dir(args.out, quick, "micro")
    formats = tuple(filter(None, (f.strip() for f in args.formats.split(","))))
    doc = run(sizes, QUICK if quick else FULL, out, formats)
    print(f"wrote {out}/micro.{{json,md,png}} in {doc['header']['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
