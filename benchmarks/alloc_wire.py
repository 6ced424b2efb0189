"""Allocations per call of the wire layer, counted with memray.

Run: ``.venv/bin/python -m benchmarks.alloc_wire [--calls N]``

For each prompt size (requests of 20 messages and 4 tools from
``benchmarks.payloads``) and each operation (``read_route``, the generated
accessors, ``verify_request``), counts every allocation per call with
``benchmarks.allocs`` (the same method as ``make bench``: memray with the
Python allocators traced, transient allocations included, the empty loop and
memray's own profiler artefacts subtracted). Then lists every allocation
``read_route`` makes, by site: the CPython allocation path and the Python line
(memray's native traces), with the empty loop's sites subtracted and the
profiler's artefacts marked.

Objects taken from a free list (small tuples, for instance) are reused rather
than allocated and so are, correctly, not counted. Warm-up calls run before
tracking so one-time caches do not count.
"""

from __future__ import annotations

import argparse
import collections
import linecache
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memray

from benchmarks.allocs import ALLOCATING, count_allocations
from benchmarks.bench_wire import MESSAGES, TOOLS, accessor_route
from benchmarks.payloads import PROMPT_SIZES, make_request, to_flatbuffer
from flatgate.proxy.wire.route import read_route
from flatgate.proxy.wire.verify import verify_request

Op = Callable[[Any], object]


# Allocation paths that exist only because memray's profiler hook is set.
_ARTEFACT = "_PyFrame_MakeAndSetFrameObject"
_UNPACK = "tuple_iter"


def _noop(buf: object) -> None:
    return None


def _loop(fn: Op, arg: object, calls: int) -> None:
    for _ in range(calls):
        fn(arg)


def count(
    fn: Op, arg: object, calls: int, workdir: Path, *, native: bool = False
) -> tuple[int, collections.Counter[str]]:
    """Allocations made by ``calls`` calls of ``fn(arg)``, and by call site.

    With ``native``, sites are the C allocation path plus the Python line
    (slower to record, exact); otherwise memray's Python line only.
    """
    _loop(fn, arg, 100)  # warm-up: specialisation, caches
    out = workdir / f"{fn.__name__}-{calls}.bin"
    with memray.Tracker(out, trace_python_allocators=True, native_traces=native):
        _loop(fn, arg, calls)
    total = 0
    sites: collections.Counter[str] = collections.Counter()
    for record in memray.FileReader(out).get_allocation_records():
        if record.allocator not in ALLOCATING:
            continue
        total += record.n_allocations
        sites[_site(record, native)] += record.n_allocations
    out.unlink()
    return total, sites


def _site(record: Any, native: bool) -> str:
    if not native:
        stack = record.stack_trace()
        if not stack:
            return "?"
        _, filename, lineno = stack[0]
        return f"{Path(filename).name}:{lineno} {linecache.getline(filename, lineno).strip()}"
    frames = record.hybrid_stack_trace(max_stacks=12)
    c_path = [f for f, _, _ in frames[:4]]
    for _function, filename, lineno in frames:
        if filename.endswith(".py"):
            line = linecache.getline(filename, lineno).strip()
            return f"{Path(filename).name}:{lineno} {line}  [{' <- '.join(c_path)}]"
    return " <- ".join(c_path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    calls: int = args.calls
    bodies = {
        name: to_flatbuffer(make_request(size, seed=1, messages=MESSAGES, tools=TOOLS))
        for name, size in PROMPT_SIZES.items()
    }
    ops: dict[str, tuple[Op, Callable[[bytes], object]]] = {
        "read_route": (read_route, bytes),
        "read_route(memoryview)": (read_route, memoryview),
        "accessors": (accessor_route, bytes),
        "verify_request": (verify_request, bytes),
    }
    print(
        f"Allocations per call (up to {calls} calls; empty loop and memray's profiler"
        " artefacts subtracted: benchmarks.allocs)\n"
    )
    print("| prompt | body bytes | " + " | ".join(ops) + " | accessors vs. read_route |")
    print("|---|---:|" + "---:|" * len(ops) + "---:|")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for name, buf in bodies.items():
            row = {}
            for label, (fn, wrap) in ops.items():
                arg = wrap(buf)
                _loop(fn, arg, 100)  # warm-up: specialisation, caches
                n = calls if label != "verify_request" else max(1, calls // 10)
                row[label] = count_allocations(fn, arg, n).allocs
            ratio = row["accessors"] / row["read_route"] if row["read_route"] else float("inf")
            cells = " | ".join(f"{row[label]:.2f}" for label in ops)
            print(f"| {name} | {len(buf)} | {cells} | {ratio:.1f}x |")
        breakdowns = {}
        for label in ("read_route", "read_route(memoryview)"):
            fn, wrap = ops[label]
            n = max(1, calls // 10)
            _, sites = count(fn, wrap(bodies["1KB"]), n, workdir, native=True)
            _, base = count(_noop, wrap(bodies["1KB"]), n, workdir, native=True)
            breakdowns[label] = (sites - base, n)
        for label in ("read_route", "read_route(memoryview)"):
            own, n = breakdowns[label]
            print(f"\n{label}: every allocation by site (1KB prompt, per call; memray native):\n")
            for site, k in sorted(own.items()):
                if k / n >= 0.5:
                    artefact = _ARTEFACT in site or _UNPACK in site
                    print(f"  {k / n:5.2f}  {site}{'  (profiler artefact)' if artefact else ''}")


if __name__ == "__main__":
    main()
