"""The load bench's measurements: how long they run, and taking them.

Owns ``Settings`` (``FULL``, ``QUICK``, ``TINY``: rounds, durations, rates,
the time budget) and ``Harness``, which measures the rows side by side in
rounds, the row order rotated each round, so that a noisy neighbour hits every
row alike and ratios hold:

1. ``measure_streams``: streaming (1 KB prompts, the echo stub with
   ``ttft_ms`` / ``itl_ms``): time to the first token and time per token, for
   every row with a stream;
2. ``measure_size``, for each prompt size, ascending: for each round, for each
   row, wrk at saturation (32 connections, one thread), with the CPU seconds
   of every server and the GC counters of every hop server read before and
   after; then the open-loop fixed rate; then one connection, unloaded. Each
   row is spot-checked once first (and, with ``warmup_seconds``, run
   unrecorded under wrk before its first measurement). A size can have a ``Plan`` of its own
   (``Settings.plans``: the OpenAI workload's cases, one answer length and
   mode each): which rows it measures, its connections, wrk seconds,
   unloaded seconds, whether it runs the fixed rate, the backend whose CPU
   is read beside the hop's, the floor its added latency is taken over, and
   the tokens of its answer (CPU per token). The unloaded run also times each
   answer's first body byte (a stream's first event).

Peak RSS (``VmHWM``) is read after each size, so a size's figure is the peak
over that size and the smaller ones. Past the time budget the remaining rounds
are skipped, and the rows say so. A row that fails is skipped with the reason;
the run goes on. The summaries are ``benchmarks.load.results``'. Must not
assert on figures, or start or stop servers (``benchmarks.load.run`` does).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.harness.results import Log, head
from benchmarks.harness.sampling import CpuUsage, GcSample, gc_of, peak_rss_kib, tree_pids, usage
from benchmarks.harness.servers import Server, ServerGroup, find_tool, tool_version
from benchmarks.load.clients import (
    StreamRun,
    answer_text,
    fixed_rate,
    one_connection,
    run_wrk,
    sse_text,
    streams,
    wrk_script,
)
from benchmarks.load.results import (
    Cell,
    add_comparisons,
    add_gc,
    add_stream_comparisons,
    skipped_row,
    summarise,
    summarise_streams,
)
from benchmarks.load.rows import (
    CANNED_DELTAS,
    ROWS,
    STREAM_TEXT,
    Body,
    Row,
    request_body,
    stream_body,
)
from benchmarks.payloads import PROMPT_SIZES
from flatgate.proxy.wire.chunk.frames import FrameSplitter
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.schema import FinishReason

__all__ = [
    "FULL",
    "QUICK",
    "TINY",
    "Harness",
    "Plan",
    "Settings",
    "SizeBody",
    "Started",
    "StreamBody",
    "document_head",
    "measure_size",
    "measure_streams",
    "row_skips",
]

Measure = Callable[[Row], None]
# The request body of a row at a prompt size, and of its streamed request.
SizeBody = Callable[[Row, str], Body]
StreamBody = Callable[[Row], Body]


@dataclass(frozen=True, slots=True)
class Started:
    """What starting a workload's servers gave: the servers (or rows) that
    cannot run, with why; the bodies its rows send (``None``: the fbs
    workload's, ``rows.request_body`` / ``rows.stream_body``); versions found."""

    skipped: dict[str, str]
    size_body: SizeBody | None = None
    stream_body: StreamBody | None = None
    versions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """How one size is measured where it differs from the settings' (``None``:
    the settings' own): a case of a workload, one answer length and mode."""

    rows: tuple[str, ...] = ()  # the rows measured at it (empty: every row)
    connections: int | None = None  # wrk's
    wrk_seconds: int | None = None
    unloaded_seconds: float | None = None
    fixed_rate: bool = True
    backend: str = "stub"  # the server the rows' requests end at (its CPU is read too)
    floor: str | None = None  # the row "added" is over
    tokens: int = 0  # tokens in each answer (> 0: CPU per token is reported)
    stream: bool = False  # the answer is streamed (SSE)


@dataclass(frozen=True, slots=True)
class Settings:
    mode: str
    sizes: tuple[str, ...]
    rounds: Mapping[str, int]
    wrk_seconds: int
    rate_seconds: float
    unloaded_seconds: float
    stream_seconds: float
    stream_rounds: int
    rates: Mapping[str, float]  # offered requests/s at the fixed rate, per size
    connections: int = 32
    stream_concurrency: int = 4
    ttft_ms: float = 20.0
    itl_ms: float = 2.0
    budget_seconds: float = 560.0
    rows: tuple[str, ...] = field(default_factory=lambda: tuple(r.name for r in ROWS))
    # External tools to behave as if absent (their rows or figures are skipped).
    without: tuple[str, ...] = ()
    # What is measured: "fbs" (the rows above, FlatBuffers and JSON bodies) or
    # "openai" (benchmarks.load.openai_workload: OpenAI chat bodies, the peers).
    workload: str = "fbs"
    floor: str = "direct"  # the row every other is compared with ("added", "vs. direct")
    versus: tuple[str, ...] = ("json-route",)  # more "vs." throughput ratio columns
    peers: bool = False  # start the peers (BENCH_PEERS=1 or --peers; openai workload)
    plans: Mapping[str, Plan] = field(default_factory=dict)  # per size, where it differs
    # > 0: wrk runs this long, unrecorded, on each row before its first
    # measurement (a JIT-compiled peer, node's, starts cold).
    warmup_seconds: int = 0
    # The rows of the streaming measurement (``None``: every row with a stream server).
    stream_rows: tuple[str, ...] | None = None

    def plan(self, size: str) -> Plan:
        return self.plans.get(size) or Plan()


FULL = Settings(
    mode="full",
    sizes=("1KB", "16KB", "128KB", "1MB"),
    rounds={"1KB": 3, "16KB": 3, "128KB": 1, "1MB": 1},
    wrk_seconds=3,
    rate_seconds=2.0,
    unloaded_seconds=1.0,
    stream_seconds=2.0,
    stream_rounds=2,
    rates={"1KB": 2000.0, "16KB": 1000.0, "128KB": 300.0, "1MB": 100.0},
)
QUICK = replace(
    FULL,
    mode="quick",
    sizes=("1KB", "16KB"),
    rounds={"1KB": 1, "16KB": 1},
    wrk_seconds=2,
    rate_seconds=1.5,
    unloaded_seconds=0.5,
    stream_seconds=1.0,
    stream_rounds=1,
    budget_seconds=105.0,
)
TINY = replace(
    QUICK,
    mode="tiny",
    sizes=("1KB",),
    rounds={"1KB": 1},
    wrk_seconds=1,
    rate_seconds=0.25,
    unloaded_seconds=0.1,
    stream_seconds=0.2,
    rates={"1KB": 500.0},
    budget_seconds=75.0,
)
# A row at the fixed rate is offered at most this share of its own saturation
# throughput (the reference transport cannot take the common rate).
_MAX_LOAD = 0.35


def _cpu(servers: Sequence[Server]) -> dict[str, CpuUsage]:
    """Each server's CPU seconds (user, system) and minor page faults so far."""
    return {s.name: usage(tree_pids(s.proc.pid)) for s in servers}


def _gc(servers: Sequence[Server]) -> dict[str, GcSample | None]:
    return {s.name: gc_of(s) for s in servers}


def _add_cpu(
    total: dict[str, float],
    before: Mapping[str, CpuUsage],
    after: Mapping[str, CpuUsage],
    cell: Cell | None = None,
) -> None:
    """Add each server's CPU seconds between two readings to ``total`` (user +
    system) and, with ``cell``, its system seconds and minor page faults to
    the cell's."""
    for name, b in after.items():
        a = before[name]
        total[name] = total.get(name, 0.0) + b.user + b.system - a.user - a.system
        if cell is not None:
            cell.sys_seconds[name] = cell.sys_seconds.get(name, 0.0) + b.system - a.system
            faults = b.minor_faults - a.minor_faults
            cell.minor_faults[name] = cell.minor_faults.get(name, 0) + faults


class Harness:
    """Measures rows on the running servers of ``group``; ``started`` sets the budget."""

    def __init__(
        self,
        group: ServerGroup,
        settings: Settings,
        runner: asyncio.Runner,
        log: Log,
    ) -> None:
        self.group = group
        self.settings = settings
        self.runner = runner
        self.log = log
        self.started = time.monotonic()
        self.warmed: set[str] = set()  # the rows wrk has warmed up

    def over_budget(self) -> bool:
        return time.monotonic() - self.started > self.settings.budget_seconds

    def url(self, row: Row, streaming: bool = False) -> str:
        name = row.stream_server if streaming else row.server
        assert name is not None
        return self.group.servers[name].url + row.path

    def watched(self, row: Row, backend: str = "stub") -> list[Server]:
        names = [*row.hop, backend]
        return [self.group.servers[n] for n in names if n in self.group.servers]

    def _post(self, row: Row, body: Body, streaming: bool, timeout: float) -> bytes | str:
        """One request: the answer's bytes, or the problem (``str``)."""
        what = "stream spot check" if streaming else "spot check"
        req = urllib.request.Request(
            self.url(row, streaming), data=body.data, headers=dict(body.headers), method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, data = r.status, r.read()
        except OSError as exc:
            return f"{what} failed: {exc}"
        return bytes(data) if status == 200 else f"{what}: status {status}"

    def check(self, row: Row, body: Body) -> str | None:
        """One request before measuring; the problem, if the answer is wrong."""
        data = self._post(row, body, streaming=False, timeout=10)
        if isinstance(data, str):
            return data
        if body.check is not None:
            ok = body.check(data)
        elif body.expect is not None:
            try:
                ok = answer_text(row.body, data) == body.expect
            except (ValueError, KeyError, IndexError, TypeError):
                ok = False
        elif row.body == "openai":
            content = json.loads(data)["choices"][0]["message"]["content"]
            ok = content == "tok " * CANNED_DELTAS
        elif row.body == "responses":
            [message] = [i for i in json.loads(data)["output"] if i["type"] == "message"]
            ok = message["content"][0]["text"] == "tok " * CANNED_DELTAS
        else:
            chunks = [decode_chunk(memoryview(f)[4:]) for f in FrameSplitter().feed(data)]
            text = "".join(c.content for c in chunks)
            ok = bool(chunks) and chunks[-1].finish_reason == FinishReason.STOP
            ok = ok and text == "tok " * CANNED_DELTAS
        return None if ok else f"spot check: unexpected answer {data[:120]!r}"

    def check_stream(self, row: Row, body: Body) -> str | None:
        """One streamed request before measuring; the problem, if its text is wrong."""
        data = self._post(row, body, streaming=True, timeout=30)
        if isinstance(data, str):
            return data
        if row.body in ("openai", "responses"):
            text = sse_text(data)
        else:
            frames = FrameSplitter().feed(data)
            text = "".join(decode_chunk(memoryview(f)[4:]).content for f in frames)
        if text != STREAM_TEXT:
            return f"stream spot check: unexpected text {text[:80]!r}"
        return None

    def saturation(
        self, row: Row, wrk: str, script: Path, cell: Cell, plan: Plan | None = None
    ) -> None:
        p = plan or Plan()
        watched = self.watched(row, p.backend)
        hop = [s for s in watched if s.name in row.hop]
        gc0, cpu0 = _gc(hop), _cpu(watched)
        s = self.settings
        connections = p.connections or s.connections
        seconds = p.wrk_seconds or s.wrk_seconds
        result = run_wrk(wrk, self.url(row), script, connections=connections, seconds=seconds)
        _add_cpu(cell.cpu_seconds, cpu0, _cpu(watched), cell)
        add_gc(cell, gc0, _gc(hop))
        cell.rps.append(result.rps)
        cell.requests += result.requests
        cell.wrk_errors += result.errors
        cell.wrk_p99_ms.append(result.p99_ms)

    def at_rate(self, row: Row, body: Body, cell: Cell, rate: float, backend: str = "stub") -> None:
        watched = self.watched(row, backend)
        cpu0 = _cpu(watched)
        seconds = self.settings.rate_seconds
        run = self.runner.run(
            fixed_rate(self.url(row), body.data, body.headers, rate=rate, seconds=seconds)
        )
        _add_cpu(cell.rate_cpu_seconds, cpu0, _cpu(watched))
        # The lowest rate any round ran at: below the common rate marks the row.
        cell.rate = min(cell.rate, rate) if cell.rate else rate
        cell.latencies.append(run.latencies)
        cell.rate_errors += run.errors
        cell.rate_requests += len(run.latencies)
        cell.max_lag_ms = max(cell.max_lag_ms, run.max_lag * 1e3)

    def unloaded(self, row: Row, body: Body, cell: Cell, seconds: float | None = None) -> None:
        seconds = seconds or self.settings.unloaded_seconds
        run = self.runner.run(
            one_connection(self.url(row), body.data, body.headers, seconds=seconds)
        )
        cell.unloaded += run.latencies
        cell.unloaded_first += run.first_bytes
        cell.rate_errors += run.errors

    def rounds(
        self, rows: Sequence[Row], n: int, what: str, reasons: dict[str, str], measure: Measure
    ) -> int:
        """``n`` rounds of ``measure`` over the rows, their order rotated each
        round; a row that fails leaves with the reason. The rounds run: after
        the first, a spent time budget ends them."""
        for k in range(n):
            if k and self.over_budget():
                return k
            j = k % max(1, len(rows))
            for r in [*rows[j:], *rows[:j]]:
                if r.name not in reasons:
                    self.log(f"{what} round {k + 1}: {r.name}")
                    try:
                        measure(r)
                    except Exception as exc:
                        reasons[r.name] = f"failed in {what} round {k + 1}: {exc!r}"
        return n

    def stream(self, row: Row, body: Body) -> StreamRun:
        s = self.settings
        return self.runner.run(
            streams(
                self.url(row, streaming=True),
                body.data,
                body.headers,
                expect=STREAM_TEXT,
                sse=row.body in ("openai", "responses"),
                seconds=s.stream_seconds,
                concurrency=s.stream_concurrency,
            )
        )


def document_head(
    s: Settings, revision: str, packages: Sequence[str], method: str
) -> dict[str, Any]:
    """A workload's result document before its rows: the machine, the source,
    the versions of ``packages`` and of wrk and nginx, the settings, ``method``."""
    doc = head(revision, packages)
    doc["versions"].update({tool: tool_version(tool, s.without) for tool in ("wrk", "nginx")})
    settings = {k: v for k, v in asdict(s).items() if k != "rows"}
    return {**doc, "workload": s.workload, "mode": s.mode, "settings": settings, "method": method}


def row_skips(rows: Sequence[Row], skipped: Mapping[str, str]) -> dict[str, str]:
    """The rows that cannot run, with why: any server a row needs failed to start
    (``skipped``: server name to reason); the echo servers' own failures too."""
    out: dict[str, str] = {}
    for r in rows:
        needed = {r.server, *r.hop}
        bad = [n for n in needed if n in skipped]
        if bad:
            out[r.name] = f"{bad[0]}: {skipped[bad[0]]}"
    for name, why in skipped.items():
        if name not in out and name.endswith("echo"):
            out[name] = why
    return out


def measure_streams(
    h: Harness,
    rows: Sequence[Row],
    skipped: Mapping[str, str],
    body_for: StreamBody | None = None,
) -> list[Any]:
    s = h.settings
    make = body_for or (lambda r: stream_body(r.body, PROMPT_SIZES["1KB"]))
    runs: dict[str, list[StreamRun]] = {r.name: [] for r in rows}
    reasons: dict[str, str] = {}
    for r in rows:
        if r.stream_server is None:
            reasons[r.name] = "the echo stub reads FlatBuffers only; the relay is the proxy's"
        elif r.name in skipped or r.stream_server in skipped:
            reasons[r.name] = skipped.get(r.name) or skipped.get(r.stream_server, "")
    bodies = {r.name: make(r) for r in rows if r.name not in reasons}
    for r in rows:
        if r.name in bodies and (problem := h.check_stream(r, bodies[r.name])) is not None:
            reasons[r.name] = problem
    live = [r for r in rows if r.name not in reasons]
    h.rounds(
        live,
        s.stream_rounds,
        "stream",
        reasons,
        lambda r: runs[r.name].append(h.stream(r, bodies[r.name])),
    )
    out = [
        skipped_row(r.name, reasons[r.name])
        if r.name in reasons
        else summarise_streams(r, runs[r.name])
        for r in rows
    ]
    add_stream_comparisons(out, s.floor, s.versus)
    return out


def measure_size(
    h: Harness,
    rows: Sequence[Row],
    size: str,
    skipped: Mapping[str, str],
    body_for: SizeBody | None = None,
) -> list[dict[str, Any]]:
    s = h.settings
    plan = s.plan(size)
    if plan.rows:  # in the plan's order: its floor first
        by_name = {r.name: r for r in rows}
        rows = [by_name[n] for n in plan.rows if n in by_name]
    make = body_for or (lambda r, sz: request_body(r.body, PROMPT_SIZES[sz]))
    reasons: dict[str, str] = {r.name: skipped[r.name] for r in rows if r.name in skipped}
    wrk = find_tool("wrk", s.without)
    bodies: dict[str, Body] = {}
    scripts: dict[str, Path] = {}
    for r in rows:
        if r.name in reasons:
            continue
        body = make(r, size)
        problem = h.check(r, body)
        if problem is not None:
            reasons[r.name] = problem
            continue
        bodies[r.name] = body
        path = h.group.workdir / f"body-{r.name}-{size}.bin"
        path.write_bytes(body.data)
        script = h.group.workdir / f"wrk-{r.name}-{size}.lua"
        script.write_text(wrk_script(path, body.headers))
        scripts[r.name] = script
    live = [r for r in rows if r.name not in reasons]
    cells = {r.name: Cell() for r in live}
    if wrk is not None and s.warmup_seconds > 0:
        for r in live:
            if r.name not in h.warmed:
                h.log(f"{size} warm-up: {r.name}")
                h.warmed.add(r.name)
                run_wrk(
                    wrk,
                    h.url(r),
                    scripts[r.name],
                    connections=plan.connections or s.connections,
                    seconds=s.warmup_seconds,
                )

    def measure(r: Row) -> None:
        cell = cells[r.name]
        if wrk is not None:
            h.saturation(r, wrk, scripts[r.name], cell, plan)
        if plan.fixed_rate:
            rate = s.rates.get(size, 1000.0)
            if cell.rps and max(cell.rps) * _MAX_LOAD < rate:
                rate = max(50.0, round(max(cell.rps) * _MAX_LOAD, -1))
            h.at_rate(r, bodies[r.name], cell, rate, plan.backend)
        h.unloaded(r, bodies[r.name], cell, plan.unloaded_seconds)

    wanted = s.rounds.get(size, 1)
    done = h.rounds(live, wanted, size, reasons, measure)
    if done < wanted:
        for c in cells.values():
            c.notes.append(f"time budget: {done} of {wanted} rounds")
    out = []
    for r in rows:
        if r.name in reasons:
            out.append(skipped_row(r.name, reasons[r.name], size))
            continue
        cell = cells[r.name]
        for srv in h.watched(r, plan.backend):
            cell.peak_rss_kib[srv.name] = peak_rss_kib(tree_pids(srv.proc.pid))
        if wrk is None:
            cell.notes.append("wrk is not installed: no saturation figures")
        out.append(summarise(r, size, cell, len(bodies[r.name].data), plan.tokens))
    add_comparisons(out, plan.floor or s.floor, s.versus)
    return out
