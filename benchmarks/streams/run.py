"""``python -m benchmarks.streams``: workload A, many concurrent token streams.

Owns the run: the settings (``FULL``, ``QUICK``), the rows measured one after
another, each alone on the machine with servers of its own started for it and
stopped after it (``benchmarks.streams.rows``), in an order rotated each
round, the result document and the command line, the GC table's too
(``--gc-table``: ``benchmarks.streams.gctable``). Results:
``benchmarks/results/streams.{json,md,png}`` (``benchmarks.streams.report``)
and ``streams-gc.{json,md}`` (``benchmarks.streams.gcreport``); a quick or
custom run's go to a new temporary directory unless ``--out`` names one.

    python -m benchmarks.streams                  # full: 2,000 connections, ~5 min
    python -m benchmarks.streams --quick          # 200 connections, 5 s a row, to a temp dir
    python -m benchmarks.streams --connections 500 --rows proxy --seconds 10
    python -m benchmarks.streams --backpressure 8192   # flatgate served with that backpressure
    python -m benchmarks.streams --gc-table       # the GC table: 1,000 connections, ~6 min
    python -m benchmarks.streams --gc-table --quick   # 200 connections, 4 s a line, ~2 min
    python -m benchmarks.streams --gc-table --rows proxy --settings cpython,flatgate
    python -m benchmarks.streams --from-json streams.json --out DIR   # re-render only

Every server is stopped when its row ends, on errors and on Ctrl-C or
SIGTERM. Must not: assert on figures, listen or send beyond 127.0.0.1, stop
processes it did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.harness.results import (
    MEASURED,
    Log,
    head,
    is_quick,
    names,
    source_revision,
)
from benchmarks.harness.sampling import fetch_json, peak_rss_kib
from benchmarks.harness.servers import ServerGroup, tool_version
from benchmarks.streams.client import Client
from benchmarks.streams.results import RowRun, add_comparisons, skipped, summarise
from benchmarks.streams.rows import ROWS, GcSetting, Row, Timing, call_for, start_row
from benchmarks.streams.sampler import Proc, Sampler

__all__ = [
    "FULL",
    "MEASURED_HERE",
    "QUICK",
    "Settings",
    "header",
    "measure_row",
    "raise_fd_limit",
    "run",
    "settings_of",
    "with_args",
]


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

# The code the servers run: a revision is marked "+changes" when it differs from HEAD.
MEASURED_HERE = (*MEASURED, "benchmarks/streams")


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


def measure_row(
    row: Row,
    k: int,
    s: Settings,
    workdir: Path,
    log: Log,
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
            peak_rss_kib={n: peak_rss_kib(p.pids) for n, p in procs.items()},
            stub_stats=fetch_json(group.servers["stub"].url + "/stats") or {},
            t0=client.t0,
            notes=notes,
        )
    finally:
        group.stop_all()


def header(s: Settings, revision: str) -> dict[str, Any]:
    t = s.timing
    served = (
        "the flatgate command with the default config (one granian worker) but for ports"
        if s.backpressure is None
        else f"granian's command line, one worker, backpressure {s.backpressure}"
    )
    doc = head(revision, ("granian", "msgspec", "flatbuffers", "httptools", "uvloop"))
    doc["versions"]["nginx"] = tool_version("nginx", s.without)
    return {
        **doc,
        "mode": s.mode,
        "settings": asdict(s),
        "method": (
            f"Workload A: {s.connections:,} keep-alive client connections, each running streams "
            f"back to back (closed loop), {t.prompt_tokens}-token prompt, {t.tokens} tokens a "
            f"stream; backend: the stub in cadence mode (first token after {t.ttft_ms:g} ms, "
            f"then one every {t.itl_ms:g} ms, frames built once, one timer), speaking .fbs or, "
            "for the *-openai rows, the OpenAI API (the gateway through its openai adapter), "
            "RSGI, granian "
            "backpressure raised past the connections. Each row alone on the machine with "
            f"servers of its own; {s.warmup:g} s warm-up, then streams that start within "
            f"{s.seconds:g} s are measured to their end. flatgate served by {served}. Client: "
            "one process, uvloop, llhttp, every stream's tokens and end checked. Latency: "
            "whole stream (request written to the answer's last byte) and time to first "
            "token; added = the row's percentile minus direct's. CPU: utime+stime of each "
            "process tree over the window, per token the client received in it; vs. nginx = "
            "the row's own servers' CPU per token over nginx's in front of a stub of the same "
            "protocol. GC: each "
            "flatgate process's /metrics (read on a keep-alive connection opened before the "
            "load) before and after the window, per 1,000 streams that ended in it. RSS: "
            "VmHWM of each tree's largest process."
        ),
    }


def run(settings: Settings, log: Log = print) -> dict[str, Any]:
    """Every row, every round; the result document."""
    s = settings
    rows = [r for r in ROWS if r.name in s.rows]
    revision = source_revision(MEASURED_HERE)
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
            results.append(summarise(row.name, row.note, runs[row.name], row.backend))
    add_comparisons(results)
    doc = header(s, revision)
    doc["elapsed_seconds"] = round(time.monotonic() - started, 1)
    doc["notes"] = notes
    doc["rows"] = results
    return doc


def with_args(s: Settings, args: argparse.Namespace, keys: Sequence[str]) -> Settings:
    """``s`` with each of ``keys`` the command line gives, and its ``--without``;
    ``SystemExit`` unless the result can run."""
    for key in keys:
        value = getattr(args, key)
        if value is not None:
            s = replace(s, **{key: value})
    if args.without:
        s = replace(s, without=names(args.without))
    if args.tokens is not None:
        s = replace(s, timing=replace(s.timing, tokens=args.tokens))
    if s.connections < 1 or s.seconds <= 0 or s.warmup < 0 or s.rounds < 1 or s.timing.tokens < 1:
        raise SystemExit(
            "need --connections >= 1, --seconds > 0, --warmup >= 0, --rounds >= 1, --tokens >= 1"
        )
    return s


def settings_of(args: argparse.Namespace) -> Settings:
    s = QUICK if is_quick(args.quick) else FULL
    if args.rows:
        wanted = names(args.rows, [r.name for r in ROWS], "rows")
        s = replace(s, rows=wanted if "direct" in wanted else ("direct", *wanted))
    s = with_args(s, args, ("connections", "seconds", "warmup", "rounds", "backpressure"))
    if s.mode == "full" and replace(s, rows=FULL.rows, without=()) != FULL:
        s = replace(s, mode="custom")  # not the committed run: a temp dir unless --out
    return s
