"""``python -m benchmarks.streams``: workload A, many concurrent token streams.

Owns the run: the settings (``FULL``, ``QUICK``), the rows measured one after
another, each alone on the machine with servers of its own started for it and
stopped after it (``benchmarks.streams.rows``), in an order rotated each
round, the result document and the command line. Results:
``benchmarks/results/streams.{json,md,svg}`` (``benchmarks.streams.report``);
a quick run's go to a new temporary directory unless ``--out`` names one.

    python -m benchmarks.streams                  # full: 2,000 connections, ~3 min
    python -m benchmarks.streams --quick          # 200 connections, 5 s a row, to a temp dir
    python -m benchmarks.streams --connections 500 --rows proxy --seconds 10
    python -m benchmarks.streams --backpressure 8192   # flatgate served with that backpressure

Every server is stopped when its row ends, on errors and on Ctrl-C or
SIGTERM. Must not: assert on figures, listen or send beyond 127.0.0.1, stop
processes it did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.harness import (
    RESULTS,
    is_quick,
    machine,
    output_dir,
    run_interruptible,
    source_revision,
    versions,
)
from benchmarks.servers import ServerGroup, find_tool
from benchmarks.streams.client import Client
from benchmarks.streams.results import RowRun, add_comparisons, skipped, summarise
from benchmarks.streams.rows import ROWS, GcSetting, Row, Timing, call_for, start_row
from benchmarks.streams.sampler import Proc, Sampler

__all__ = ["FULL", "QUICK", "Settings", "main", "measure_row", "parser", "run", "settings_of"]


@dataclass(frozen=True, slots=True)
class Settings:
    mode: str
    connections: int
    seconds: float  # the measurement window of a row
    warmup: float
    rounds: int = 1
    rows: tuple[str, ...] = tuple(r.name for r in ROWS)
    timing: Timing = field(default_factory=Timing)
    # After the window: how long the streams in flight may take to end.
    drain_seconds: float = 30.0
    # A stream without a byte for this long is a ``timeout``.
    stream_timeout: float = 30.0
    # Serve flatgate through granian's CLI with this backpressure (None: the
    # flatgate command, granian's default of 1,024 requests per worker).
    backpressure: int | None = None
    without: tuple[str, ...] = ()


FULL = Settings(mode="full", connections=2000, seconds=25.0, warmup=5.0)
QUICK = replace(FULL, mode="quick", connections=200, seconds=5.0, warmup=3.0)

_MEASURED = ("proxy", "edge_translator", "generated", "benchmarks/streams", "benchmarks/servers.py")


def raise_fd_limit(connections: int) -> str | None:
    """Raise this process's open-file limit (the servers inherit it) to what
    ``connections`` streams need through two hops; a note when it cannot."""
    need = 4 * connections + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return None
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < need:
        return f"open files limited to {target} (wanted {need})"
    return None


def _stub_stats(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url + "/stats", timeout=5) as r:
            doc: dict[str, Any] = json.loads(r.read())
            return doc
    except (OSError, ValueError):
        return {}


def measure_row(
    row: Row,
    k: int,
    s: Settings,
    workdir: Path,
    log: Callable[[str], None],
    *,
    gc: GcSetting | None = None,
) -> RowRun | str:
    """Start ``row``'s servers (flatgate's with ``gc``'s collector settings
    when given), stream through them, stop them: the run, or why the row was
    skipped."""
    where = workdir / f"{row.name.replace('+', '-')}-{k}"
    where.mkdir()
    group = ServerGroup(where)
    try:
        port, why = start_row(
            group,
            row,
            s.timing,
            connections=s.connections,
            backpressure=s.backpressure,
            without=s.without,
            gc=gc,
        )
        if why is not None:
            return why
        failed = group.wait_healthy()
        if failed:
            name, reason = next(iter(failed.items()))
            return f"{name} did not start: {reason.strip()[-400:]}"
        procs = {name: Proc(group.servers[name]) for name in row.charged}
        for p in procs.values():
            p.refresh()
        client = Client(
            call_for(row, port, s.timing),
            s.connections,
            warmup=s.warmup,
            seconds=s.seconds,
            drain=s.drain_seconds,
            stream_timeout=s.stream_timeout,
            ramp_seconds=(s.timing.ttft_ms + s.timing.tokens * s.timing.itl_ms) / 1000,
        )
        marks = {"from": s.warmup, "to": s.warmup + s.seconds}
        sampler = Sampler(procs, lambda: (client.tokens, client.finished), marks=marks)
        under = "" if gc is None else f" (gc: {gc.name})"
        log(f"round {k + 1}: {row.name}{under}: {s.connections} connections, {s.seconds:g} s")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            try:
                runner.run(client.run(on_start=sampler.start))
            finally:
                sampler.stop()
        notes = []
        if sampler.failed:
            notes.append(f"round {k + 1}: {sampler.failed} samples failed")
        for mark, planned in marks.items():
            got = sampler.at(mark)
            if got is None or abs(got.t - planned) > 0.5:
                late = "missing" if got is None else f"taken at {got.t:.1f} s, not {planned:g} s"
                notes.append(f"round {k + 1}: the window's {mark!r} sample was {late}")
        dead = [n for n, p in procs.items() if not p.server.alive()]
        if dead:
            notes.append(f"round {k + 1}: {', '.join(dead)} exited during the run")
        return RowRun(
            row=row.name,
            round=k + 1,
            records=client.records,
            samples=sampler.samples,
            peak_rss_kib={n: p.peak_rss_kib() for n, p in procs.items()},
            stub_stats=_stub_stats(group.servers["stub"].url),
            t0=client.t0,
            notes=notes,
        )
    finally:
        group.stop_all()


def _versions(without: Sequence[str]) -> dict[str, str]:
    out = versions(("granian", "msgspec", "flatbuffers", "httptools", "uvloop"))
    nginx = find_tool("nginx", without)
    out["nginx"] = "absent"
    if nginx is not None:
        done = subprocess.run([nginx, "-v"], capture_output=True, text=True, check=False)
        found = re.search(r"nginx/(\S+)", done.stdout + done.stderr)
        out["nginx"] = found.group(1) if found else "unknown"
    return out


def header(s: Settings, revision: str) -> dict[str, Any]:
    t = s.timing
    served = (
        "the flatgate command with the default config (one granian worker) but for ports"
        if s.backpressure is None
        else f"granian's command line, one worker, backpressure {s.backpressure}"
    )
    return {
        **machine(),
        "revision": revision,
        "versions": _versions(s.without),
        "mode": s.mode,
        "settings": asdict(s),
        "method": (
            f"Workload A: {s.connections:,} keep-alive client connections, each running streams "
            f"back to back (closed loop), {t.prompt_tokens}-token prompt, {t.tokens} tokens a "
            f"stream; backend: the stub in cadence mode (first token after {t.ttft_ms:g} ms, "
            f"then one every {t.itl_ms:g} ms, frames built once, one timer), RSGI, granian "
            "backpressure raised past the connections. Each row alone on the machine with "
            f"servers of its own; {s.warmup:g} s warm-up, then streams that start within "
            f"{s.seconds:g} s are measured to their end. flatgate served by {served}. Client: "
            "one process, uvloop, llhttp, every stream's tokens and end checked. Latency: "
            "whole stream (request written to the answer's last byte) and time to first "
            "token; added = the row's percentile minus direct's. CPU: utime+stime of each "
            "process tree over the window, per token the client received in it. GC: each "
            "flatgate process's /metrics (read on a keep-alive connection opened before the "
            "load) before and after the window, per 1,000 streams that ended in it. RSS: "
            "VmHWM of each tree's largest process."
        ),
    }


def run(settings: Settings, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every row, every round; the result document."""
    s = settings
    rows = [r for r in ROWS if r.name in s.rows]
    revision = source_revision(_MEASURED)
    notes = [n for n in (raise_fd_limit(s.connections),) if n]
    runs: dict[str, list[RowRun]] = {r.name: [] for r in rows}
    reasons: dict[str, str] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flatgate-streams-") as tmp:
        for k in range(s.rounds):
            j = k % len(rows)
            for row in [*rows[j:], *rows[:j]]:
                if row.name in reasons:
                    continue
                got = measure_row(row, k, s, Path(tmp), log)
                if isinstance(got, str):
                    reasons[row.name] = got
                    log(f"  {row.name}: skipped: {got}")
                else:
                    runs[row.name].append(got)
    results = []
    for row in rows:
        if row.name in reasons and not runs[row.name]:
            results.append(skipped(row.name, reasons[row.name]))
        else:
            results.append(summarise(row.name, row.note, runs[row.name]))
    add_comparisons(results)
    doc = header(s, revision)
    doc["elapsed_seconds"] = round(time.monotonic() - started, 1)
    doc["notes"] = notes
    doc["rows"] = results
    return doc


def settings_of(args: argparse.Namespace) -> Settings:
    s = QUICK if is_quick(args.quick) else FULL
    if args.rows:
        names = tuple(x.strip() for x in args.rows.split(",") if x.strip())
        unknown = [n for n in names if n not in {r.name for r in ROWS}]
        if unknown:
            raise SystemExit(f"unknown rows: {', '.join(unknown)}")
        if "direct" not in names:
            names = ("direct", *names)
        s = replace(s, rows=names)
    for key in ("connections", "seconds", "warmup", "rounds", "backpressure"):
        value = getattr(args, key)
        if value is not None:
            s = replace(s, **{key: value})
    if args.without:
        s = replace(s, without=tuple(x.strip() for x in args.without.split(",")))
    if s.connections < 1 or s.seconds <= 0 or s.warmup < 0 or s.rounds < 1:
        raise SystemExit("need --connections >= 1, --seconds > 0, --warmup >= 0, --rounds >= 1")
    if s.mode == "full" and replace(s, rows=FULL.rows, without=()) != FULL:
        s = replace(s, mode="custom")  # not the committed run: a temp dir unless --out
    return s


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.streams", description=__doc__)
    p.add_argument("--quick", action="store_true", help="200 connections, 5 s a row")
    p.add_argument("--connections", type=int, help="client connections (default 2000)")
    p.add_argument("--seconds", type=float, help="measurement window per row")
    p.add_argument("--warmup", type=float, help="seconds before the window")
    p.add_argument("--rounds", type=int, help="rounds, the row order rotated (default 1)")
    p.add_argument("--rows", help="comma-separated rows (direct is always included)")
    p.add_argument("--without", help="tools to treat as absent, e.g. nginx")
    p.add_argument(
        "--backpressure", type=int, help="serve flatgate via granian's CLI with this backpressure"
    )
    p.add_argument("--out", type=Path, help="results directory (default: see above)")
    p.add_argument(
        "--from-json", type=Path, help="measure nothing: render streams.md/svg from this json"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.streams.report import summary_table, write_results

    args = parser().parse_args(argv)
    if args.from_json:
        doc = json.loads(args.from_json.read_text())
        for p in write_results(doc, args.out or RESULTS):
            print(f"wrote {p}")
        return 0
    settings = settings_of(args)
    doc = run_interruptible(lambda log: run(settings, log=log))
    if doc is None:
        return 130
    out = output_dir(args.out, settings.mode != "full", "streams")
    out.mkdir(parents=True, exist_ok=True)
    for p in write_results(doc, out):
        print(f"wrote {p}")
    print("\n".join(summary_table(doc)))
    return 0
