"""``make bench``'s embeddings run: every format's ops at every size, one row each.

Owns the run. For every format of ``formats.FORMATS`` and every size (``1x1536``,
``64x1536``, ``256x3072`` float32 by default) it checks the ops give the
payload's floats back (``formats.check``), then records one row per op with
``benchmarks.micro.measure``: time per op (pytest-benchmark's calibration rule
and ``Stats``), allocations and bytes per op (memray, ``benchmarks.allocs``),
garbage collections per 100k ops. Each format runs in a fresh subprocess of its
own, one after the other, as ``benchmarks.micro`` runs its codecs. Results go
to ``benchmarks/results/embeddings.{json,md,png}`` (``report``); a quick run's
go to a new temporary directory unless ``--out`` names one.

    python -m benchmarks.embeddings                 # full run (make bench)
    BENCH_QUICK=1 python -m benchmarks.embeddings   # every row, fewer rounds, to a temp dir
    python -m benchmarks.embeddings --sizes 2x8,4x16 --formats json,flatgate --out DIR
    python -m benchmarks.embeddings --render        # rewrite the md and png from the json

Must not: assert on figures (it reports them; ``report`` says which targets
are met), touch the network, or run two measurements at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from google.protobuf.internal import api_implementation
from pytest_benchmark.timers import compute_timer_precision

from benchmarks import micro
from benchmarks.embeddings import formats, report
from benchmarks.harness.results import RESULTS, ROOT, is_quick, machine, output_dir, versions
from benchmarks.micro import QUICK, Settings, measure

__all__ = ["FULL", "NAME", "QUICK", "SIZES", "main", "parse_sizes", "run", "run_worker"]

NAME = "embeddings"
SEED = 0
# label -> (vectors, dimensions); the targets read the second and third.
SIZES: dict[str, tuple[int, int]] = {
    "1x1536": (1, 1536),
    "64x1536": (64, 1536),
    "256x3072": (256, 3072),
}
# micro's full settings with shorter timing and GC loops: 78 rows, the
# slowest (stdlib json at 256x3072) over half a second an op, in about two
# minutes.
FULL = replace(micro.FULL, max_time=0.2, gc_time=0.1, gc_min_ops=5)
_LIBRARIES = ("numpy", "msgspec", "protobuf", "flatbuffers", "memray", "pytest-benchmark")


def parse_sizes(spec: str) -> dict[str, tuple[int, int]]:
    """``"1x1536,64x1536"`` -> ``{"1x1536": (1, 1536), "64x1536": (64, 1536)}``."""
    sizes: dict[str, tuple[int, int]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        count, x, dims = item.partition("x")
        if not (x and count.isdigit() and dims.isdigit()) or int(count) < 1 or int(dims) < 1:
            raise ValueError(f"size {item!r}: expected VECTORSxDIMENSIONS, e.g. 64x1536")
        sizes[item] = (int(count), int(dims))
    if not sizes:
        raise ValueError("no sizes given")
    return sizes


def run_worker(
    fmt: str, sizes: Mapping[str, tuple[int, int]], settings: Settings
) -> list[dict[str, Any]]:
    """Every row of one format, in this process."""
    precision = compute_timer_precision(time.perf_counter)
    rows = []
    for label, (count, dims) in sizes.items():
        payload = formats.make_payload(count, dims, SEED)
        formats.check(fmt, payload)
        for op, (fn, arg) in formats.cases(fmt, payload).items():
            row = {"format": fmt, "op": op, "size": label, "count": count, "dimensions": dims}
            row |= measure(fn, arg, settings, precision)
            print(
                f"  {fmt:>11} {op:<13} {label:>8} {row['ns_per_op']:>14,.0f} ns"
                f" {row['allocs_per_op']:>11,.1f} allocs {row['bytes_per_op']:>13,.0f} B",
                file=sys.stderr,
                flush=True,
            )
            rows.append(row)
    return rows


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _header(
    sizes: Mapping[str, tuple[int, int]], settings: Settings, fmts: Sequence[str]
) -> dict[str, Any]:

    return {
        **machine(),
        "libraries": versions(_LIBRARIES),
        "protobuf_backend": str(api_implementation.Type()),
        "mode": settings.name,
        "settings": asdict(settings),
        "sizes": {label: list(size) for label, size in sizes.items()},
        "formats": list(fmts),
        "labels": {f: formats.LABELS[f] for f in fmts},
        "decodes_to": {f: formats.DECODES_TO[f] for f in fmts if f in formats.DECODES_TO},
        "seed": SEED,
        "load_start": _load(),
        "method": {
            "time": "benchmarks.micro.measure: pytest-benchmark's calibration, median round.",
            "allocations": "benchmarks.allocs (memray): allocator calls and bytes asked, per op.",
            "isolation": "each format in a fresh subprocess, one after the other.",
            "check": "before timing, every op's output is checked against the payload's floats.",
        },
    }


def _spawn(
    fmt: str, sizes: Mapping[str, tuple[int, int]], settings: Settings
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="flatgate-bench-") as tmp:
        result = Path(tmp) / "rows.json"
        cmd = [sys.executable, "-m", "benchmarks.embeddings", "--worker", fmt]
        cmd += ["--sizes", ",".join(sizes), "--settings", json.dumps(asdict(settings))]
        cmd += ["--result", str(result)]
        done = subprocess.run(cmd, cwd=ROOT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the {fmt} worker failed (exit {done.returncode})")
        rows: list[dict[str, Any]] = json.loads(result.read_text(encoding="utf-8"))
        return rows


def run(
    sizes: Mapping[str, tuple[int, int]] = SIZES,
    settings: Settings = FULL,
    out_dir: Path = RESULTS,
    fmts: Sequence[str] = formats.FORMATS,
) -> dict[str, Any]:
    """Measure every format at every size; write ``embeddings.{json,md,png}``."""
    unknown = [f for f in fmts if f not in formats.FORMATS]
    if unknown:
        raise ValueError(f"unknown formats: {', '.join(unknown)}")
    header = _header(sizes, settings, fmts)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for fmt in fmts:
        print(f"{fmt}: measuring in a fresh process", file=sys.stderr, flush=True)
        rows += _spawn(fmt, sizes, settings)
    header["load_end"] = _load()
    header["seconds"] = round(time.monotonic() - started, 1)
    doc: dict[str, Any] = {"header": header, "rows": rows}
    doc["targets"] = report.targets(doc)
    report.write(doc, out_dir)
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embeddings", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (or BENCH_QUICK=1)")
    parser.add_argument("--sizes", default=",".join(SIZES), help="VECTORSxDIMENSIONS, ...")
    parser.add_argument("--formats", default=",".join(formats.FORMATS))
    parser.add_argument("--out", type=Path, help="directory for embeddings.* (default: see above)")
    parser.add_argument("--render", action="store_true", help="only rewrite the md and png")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render:
        out = args.out or RESULTS
        doc = json.loads((out / f"{NAME}.json").read_text(encoding="utf-8"))
        report.write(doc, out)
        return 0
    sizes = parse_sizes(args.sizes)
    if args.worker:
        rows = run_worker(args.worker, sizes, Settings(**json.loads(args.settings)))
        args.result.write_text(json.dumps(rows), encoding="utf-8")
        return 0
    quick = is_quick(args.quick)
    out = output_dir(args.out, quick, NAME)
    fmts = tuple(filter(None, (f.strip() for f in args.formats.split(","))))
    doc = run(sizes, QUICK if quick else FULL, out, fmts)
    print(report.targets_text(doc["targets"]))
    print(f"wrote {out}/{NAME}.{{json,md,png}} in {doc['header']['seconds']} s")
    return 0
