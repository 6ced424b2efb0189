"""``make bench-load``: the harness that starts the servers and measures every row.

Owns the run: which servers start (``start_servers``), the order of the
measurements (their summaries are ``benchmarks.load.results``'), the result
document's header, and the bounds on time (a budget past which the remaining
rounds and sizes are skipped and say so). Rows are measured side by side in
rounds, the row order rotated each round, so that a noisy neighbour hits
every row alike and ratios hold:

1. streaming (1 KB prompts, the echo stub with ``ttft_ms`` / ``itl_ms``):
   time to the first token and time per token, for every row with a stream;
2. for each prompt size, ascending, for each round, for each row:
   wrk at saturation (32 connections, one thread), with the CPU seconds of
   every server and the GC counters of every hop server read before and after;
   then the open-loop fixed rate; then one connection, unloaded.

Peak RSS (``VmHWM``) is read after each size, so a size's figure is the peak
over that size and the smaller ones. Every server is stopped when the run
ends, on errors and on Ctrl-C or SIGTERM too. Results:
``benchmarks/results/load.{json,md,png}`` (``benchmarks.load.report``).

    python -m benchmarks.load                # full run (make bench-load), < 10 min
    BENCH_QUICK=1 python -m benchmarks.load  # every row, one round, < 2 min
    python -m benchmarks.load --tiny --out /tmp/x   # the harness test's mode
    python -m benchmarks.load --rows proxy-rsgi,json-route --sizes 16KB --without nginx

Must not: assert on figures, listen or send beyond 127.0.0.1, stop processes
it did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.load.clients import (
    LatencyRun,
    StreamRun,
    fixed_rate,
    one_connection,
    run_wrk,
    streams,
    wrk_script,
)
from benchmarks.load.procs import GcSample, Server, ServerGroup, find_tool
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
from flatgate.proxy.wire.frames import FrameSplitter, decode_chunk
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["FULL", "QUICK", "RESULTS", "TINY", "Settings", "main", "run"]

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
T = TypeVar("T")


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


FULL = Settings(
    mode="full",
    sizes=("1KB", "16KB", "128KB"),
    rounds={"1KB": 3, "16KB": 3, "128KB": 1},
    wrk_seconds=3,
    rate_seconds=2.0,
    unloaded_seconds=1.0,
    stream_seconds=2.0,
    stream_rounds=2,
    rates={"1KB": 2000.0, "16KB": 1000.0, "128KB": 300.0},
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
    rate_seconds=0.5,
    unloaded_seconds=0.2,
    stream_seconds=0.4,
    rates={"1KB": 500.0},
    budget_seconds=75.0,
)
# A row at the fixed rate is offered at most this share of its own saturation
# throughput (the reference transport cannot take the common rate).
_MAX_LOAD = 0.35


# servers --------------------------------------------------------------------


def _config_text(canned: int, echo: int) -> str:
    return f"""[proxy]
max_body_bytes = 8388608
pool_limit = 256

[[backends]]
name = "canned"
url = "http://127.0.0.1:{canned}"
protocol = "fbs"

[[backends]]
name = "echo"
url = "http://127.0.0.1:{echo}"
protocol = "fbs"

[[routes]]
model = "bench-echo"
backends = ["echo"]

[[routes]]
model = "*"
backends = ["canned"]

[edge]
host = "127.0.0.1"

[[models]]
name = "gpt-4o-mini"
provider = "OpenAI"

[[models]]
name = "bench-echo"
provider = "OpenAI"
"""


def start_servers(group: ServerGroup, settings: Settings) -> dict[str, str]:
    """Start every server the selected rows need; the ones that failed, with why."""
    wanted = {r.name for r in ROWS if r.name in settings.rows}
    skipped: dict[str, str] = {}
    stub = group.flatgate("stub", "stub", ["--canned", str(CANNED_DELTAS), "--interface", "rsgi"])
    timing = ["--ttft-ms", str(settings.ttft_ms), "--itl-ms", str(settings.itl_ms)]
    echo = group.flatgate("echo", "stub", [*timing, "--interface", "rsgi"])
    config = group.workdir / "gateway.toml"
    config.write_text(_config_text(stub.port, echo.port))
    cfg = ["--config", str(config)]
    proxies = {
        "proxy-rsgi": ["--interface", "rsgi", "--transport", "fast"],
        "proxy-asgi": ["--interface", "asgi", "--transport", "fast"],
        "proxy-httpx": ["--interface", "rsgi", "--transport", "httpx"],
    }
    for name, args in proxies.items():
        if name in wanted:
            group.flatgate(name, "proxy", [*cfg, *args], metrics=True)
    baselines = {
        "json-route": "benchmarks.baselines:create_json_app",
        "msgspec-route": "benchmarks.baselines:create_msgspec_app",
        "protobuf-route": "benchmarks.baselines:create_protobuf_app",
    }
    for name, target in baselines.items():
        if name in wanted:
            group.granian(name, target, "rsgi", config)
    if "edge" in wanted:
        hop = group.flatgate(
            "proxy-edge",
            "proxy",
            [*cfg, "--interface", "rsgi", "--transport", "fast"],
            metrics=True,
        )
        group.flatgate("edge", "edge", [*cfg, "--proxy-url", hop.url], metrics=True)
    if "nginx" in wanted:
        nginx = find_tool("nginx", settings.without)
        if nginx is None:
            skipped["nginx"] = "nginx is not installed (benchmarks/setup_tools.sh installs it)"
        else:
            group.nginx("nginx", stub.port, nginx)
            group.nginx("nginx-echo", echo.port, nginx)
    failed = group.wait_healthy()
    skipped.update(failed)
    return skipped


# one measurement -------------------------------------------------------------


def _cpu(servers: Sequence[Server]) -> dict[str, float]:
    return {s.name: s.cpu_seconds() for s in servers}


def _gc(servers: Sequence[Server]) -> dict[str, GcSample | None]:
    return {s.name: s.gc() for s in servers}


class Harness:
    def __init__(
        self,
        group: ServerGroup,
        settings: Settings,
        runner: asyncio.Runner,
        log: Callable[[str], None],
    ) -> None:
        self.group = group
        self.settings = settings
        self.runner = runner
        self.log = log
        self.started = time.monotonic()

    def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    def over_budget(self) -> bool:
        return time.monotonic() - self.started > self.settings.budget_seconds

    def url(self, row: Row, streaming: bool = False) -> str:
        name = row.stream_server if streaming else row.server
        assert name is not None
        return self.group.servers[name].url + row.path

    def watched(self, row: Row) -> list[Server]:
        names = [*row.hop, "stub"]
        return [self.group.servers[n] for n in names if n in self.group.servers]

    def check(self, row: Row, body: Body) -> str | None:
        """One request before measuring; the problem, if the answer is wrong."""
        req = urllib.request.Request(
            self.url(row), data=body.data, headers=dict(body.headers), method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, data = r.status, r.read()
        except OSError as exc:
            return f"spot check failed: {exc}"
        if status != 200:
            return f"spot check: status {status}"
        if row.body == "openai":
            import json

            content = json.loads(data)["choices"][0]["message"]["content"]
            ok = content == "tok " * CANNED_DELTAS
        else:
            chunks = [decode_chunk(memoryview(f)[4:]) for f in FrameSplitter().feed(data)]
            text = "".join(c.content for c in chunks)
            ok = bool(chunks) and chunks[-1].finish_reason == FinishReason.STOP
            ok = ok and text == "tok " * CANNED_DELTAS
        return None if ok else f"spot check: unexpected answer {data[:120]!r}"

    def saturation(self, row: Row, wrk: str, script: Path, cell: Cell) -> None:
        watched = self.watched(row)
        hop = [s for s in watched if s.name in row.hop]
        gc0, cpu0 = _gc(hop), _cpu(watched)
        result = run_wrk(
            wrk,
            self.url(row),
            script,
            connections=self.settings.connections,
            seconds=self.settings.wrk_seconds,
        )
        cpu1, gc1 = _cpu(watched), _gc(hop)
        cell.rps.append(result.rps)
        cell.requests += result.requests
        cell.wrk_errors += result.errors
        cell.wrk_p99_ms.append(result.p99_ms)
        for name in cpu1:
            cell.cpu_seconds[name] = cell.cpu_seconds.get(name, 0.0) + cpu1[name] - cpu0[name]
        add_gc(cell, gc0, gc1)

    def at_rate(self, row: Row, body: Body, cell: Cell, rate: float) -> None:
        watched = self.watched(row)
        cpu0 = _cpu(watched)
        run: LatencyRun = self.run_async(
            fixed_rate(
                self.url(row),
                body.data,
                body.headers,
                rate=rate,
                seconds=self.settings.rate_seconds,
            )
        )
        cpu1 = _cpu(watched)
        # The lowest rate any round ran at: below the common rate marks the row.
        cell.rate = min(cell.rate, rate) if cell.rate else rate
        cell.latencies.append(run.latencies)
        cell.rate_errors += run.errors
        cell.rate_requests += len(run.latencies)
        cell.max_lag_ms = max(cell.max_lag_ms, run.max_lag * 1e3)
        for name in cpu1:
            cell.rate_cpu_seconds[name] = (
                cell.rate_cpu_seconds.get(name, 0.0) + cpu1[name] - cpu0[name]
            )

    def unloaded(self, row: Row, body: Body, cell: Cell) -> None:
        run = self.run_async(
            one_connection(
                self.url(row), body.data, body.headers, seconds=self.settings.unloaded_seconds
            )
        )
        cell.unloaded += run.latencies
        cell.rate_errors += run.errors

    def stream(self, row: Row, body: Body) -> StreamRun:
        s = self.settings
        return self.run_async(
            streams(
                self.url(row, streaming=True),
                body.data,
                body.headers,
                expect=STREAM_TEXT,
                sse=row.body == "openai",
                seconds=s.stream_seconds,
                concurrency=s.stream_concurrency,
            )
        )


def _rotate(items: Sequence[T], k: int) -> list[T]:
    k %= max(1, len(items))
    return [*items[k:], *items[:k]]


def _measure_streams(h: Harness, rows: Sequence[Row], skipped: Mapping[str, str]) -> list[Any]:
    s = h.settings
    runs: dict[str, list[StreamRun]] = {r.name: [] for r in rows}
    reasons: dict[str, str] = {}
    for r in rows:
        if r.stream_server is None:
            reasons[r.name] = "the echo stub reads FlatBuffers only; the relay is the proxy's"
        elif r.name in skipped or r.stream_server in skipped:
            reasons[r.name] = skipped.get(r.name) or skipped.get(r.stream_server, "")
    live = [r for r in rows if r.name not in reasons]
    bodies = {r.name: stream_body(r.body, PROMPT_SIZES["1KB"]) for r in live}
    for k in range(s.stream_rounds):
        for r in _rotate(live, k):
            h.log(f"stream {r.name} round {k + 1}")
            try:
                runs[r.name].append(h.stream(r, bodies[r.name]))
            except Exception as exc:
                reasons[r.name] = f"stream failed: {exc!r}"
    out = [
        skipped_row(r.name, reasons[r.name])
        if r.name in reasons
        else summarise_streams(r, runs[r.name])
        for r in rows
    ]
    add_stream_comparisons(out)
    return out


def _measure_size(
    h: Harness, rows: Sequence[Row], size: str, skipped: dict[str, str]
) -> list[dict[str, Any]]:
    s = h.settings
    nbytes = PROMPT_SIZES[size]
    reasons: dict[str, str] = {r.name: skipped[r.name] for r in rows if r.name in skipped}
    wrk = find_tool("wrk", s.without)
    bodies: dict[str, Body] = {}
    scripts: dict[str, Path] = {}
    for r in rows:
        if r.name in reasons:
            continue
        body = request_body(r.body, nbytes)
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
    for k in range(s.rounds.get(size, 1)):
        if k and h.over_budget():
            for c in cells.values():
                c.notes.append(f"time budget: {k} of {s.rounds.get(size, 1)} rounds")
            break
        for r in _rotate(live, k):
            if r.name in reasons:
                continue
            cell = cells[r.name]
            h.log(f"{size} round {k + 1}: {r.name}")
            try:
                if wrk is not None:
                    h.saturation(r, wrk, scripts[r.name], cell)
                rate = s.rates.get(size, 1000.0)
                if cell.rps and max(cell.rps) * _MAX_LOAD < rate:
                    rate = max(50.0, round(max(cell.rps) * _MAX_LOAD, -1))
                h.at_rate(r, bodies[r.name], cell, rate)
                h.unloaded(r, bodies[r.name], cell)
            except Exception as exc:
                reasons[r.name] = f"measurement failed: {exc!r}"
    out = []
    for r in rows:
        if r.name in reasons:
            out.append(skipped_row(r.name, reasons[r.name], size))
            continue
        cell = cells[r.name]
        for srv in h.watched(r):
            cell.peak_rss_kib[srv.name] = srv.peak_rss_kib()
        if wrk is None:
            cell.notes.append("wrk is not installed: no saturation figures")
        out.append(summarise(r, size, cell, len(bodies[r.name].data)))
    add_comparisons(out)
    return out


def _versions(without: Sequence[str]) -> dict[str, str]:
    out = {}
    for pkg in ("granian", "msgspec", "flatbuffers", "protobuf", "httptools", "uvloop", "httpx"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "absent"
    for tool in ("wrk", "nginx"):
        path = find_tool(tool, without)
        if path is None:
            out[tool] = "absent"
            continue
        done = subprocess.run([path, "-v"], capture_output=True, text=True, check=False)
        found = re.search(r"\S*\d+\.\d+\S*", done.stdout + done.stderr)
        out[tool] = found.group() if found else "unknown"
    return out


_MEASURED = ("proxy", "edge_translator", "generated", "benchmarks/baselines.py", "benchmarks/load")


def _source_revision() -> str:
    """The commit the servers ran, ``+changes`` if the measured code differed from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *_MEASURED],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+changes" if dirty else head


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header(settings: Settings, revision: str = "unknown") -> dict[str, Any]:
    s = settings
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "revision": revision,
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": f"{platform.system()} {platform.machine()}",
        "versions": _versions(s.without),
        "mode": s.mode,
        "settings": {k: v for k, v in asdict(s).items() if k != "rows"},
        "method": (
            "All servers on 127.0.0.1, one granian worker each (nginx: one worker), started "
            "once and measured side by side in rounds with the row order rotated each round. "
            f"Backend: the built-in stub in canned mode ({CANNED_DELTAS} deltas and a final "
            "frame, built once). Saturation: wrk, one thread, "
            f"{s.connections} keep-alive connections, {s.wrk_seconds} s per round; CPU from "
            "/proc utime+stime of each server's process tree over the wrk run; GC from each "
            "server's /metrics before and after. Fixed rate: an open-loop asyncio client "
            "(uvloop, the proxy's llhttp pool) starting requests on a fixed schedule, "
            "latency from each request's start to its last byte; added latency = the row's "
            "percentile minus direct's. Unloaded: one connection, one request at a time. "
            f"Streaming: the echo stub (ttft {s.ttft_ms} ms, {s.itl_ms} ms between tokens, "
            f"32 tokens), {s.stream_concurrency} concurrent streams, 1 KB prompts. Peak RSS: "
            "VmHWM of each server's largest process, read after each size (sizes ascend)."
        ),
    }


def run(settings: Settings, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the servers, measure every row, stop the servers; the result document."""
    rows = [r for r in ROWS if r.name in settings.rows]
    revision = _source_revision()  # before the servers start: what they import
    with tempfile.TemporaryDirectory(prefix="flatgate-load-") as tmp:
        group = ServerGroup(Path(tmp))
        loop_factory = None
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            pass
        try:
            log(f"starting servers ({settings.mode} mode)")
            skipped = start_servers(group, settings)
            for name, why in skipped.items():
                log(f"  {name}: {why}")
            # A row is skipped when any server it needs failed to start.
            row_skips: dict[str, str] = {}
            for r in rows:
                needed = {r.server, *r.hop}
                bad = [n for n in needed if n in skipped]
                if bad:
                    row_skips[r.name] = f"{bad[0]}: {skipped[bad[0]]}"
            for name in ("echo", "nginx-echo"):
                if name in skipped:
                    row_skips.setdefault(name, skipped[name])
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                h = Harness(group, settings, runner, log)
                stream_rows = _measure_streams(h, rows, row_skips)
                results: list[dict[str, Any]] = []
                for size in settings.sizes:
                    if h.over_budget():
                        results += [skipped_row(r.name, "time budget spent", size) for r in rows]
                        continue
                    results += _measure_size(h, rows, size, row_skips)
            elapsed = time.monotonic() - h.started
        finally:
            group.stop_all()
    doc = header(settings, revision)
    doc["elapsed_seconds"] = round(elapsed, 1)
    doc["rows"] = results
    doc["streaming"] = stream_rows
    return doc


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _settings(args: argparse.Namespace) -> Settings:
    if args.tiny or os.environ.get("BENCH_LOAD_TINY") == "1":
        s = TINY
    elif args.quick or os.environ.get("BENCH_QUICK") == "1":
        s = QUICK
    else:
        s = FULL
    if args.rows:
        names = tuple(x.strip() for x in args.rows.split(",") if x.strip())
        unknown = [n for n in names if n not in {r.name for r in ROWS}]
        if unknown:
            raise SystemExit(f"unknown rows: {', '.join(unknown)}")
        if "direct" not in names:
            names = ("direct", *names)
        s = replace(s, rows=names)
    if args.sizes:
        sizes = tuple(x.strip() for x in args.sizes.split(",") if x.strip())
        unknown = [x for x in sizes if x not in PROMPT_SIZES]
        if unknown:
            raise SystemExit(
                f"unknown sizes: {', '.join(unknown)} (known: {', '.join(PROMPT_SIZES)})"
            )
        s = replace(s, sizes=sizes)
    if args.without:
        s = replace(s, without=tuple(x.strip() for x in args.without.split(",") if x.strip()))
    return s


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.load.report import write_results

    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round (also BENCH_QUICK=1)")
    parser.add_argument("--tiny", action="store_true", help="seconds per row, 1 KB only (tests)")
    parser.add_argument("--rows", help="comma-separated rows (direct is always included)")
    parser.add_argument("--sizes", help="comma-separated prompt sizes, e.g. 1KB,16KB")
    parser.add_argument("--without", help="tools to treat as absent, e.g. wrk,nginx")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    parser.add_argument("--no-plot", action="store_true", help="skip load.png")
    parser.add_argument(
        "--from-json", type=Path, help="measure nothing: render load.md/png from this load.json"
    )
    args = parser.parse_args(argv)
    if args.from_json:
        import json

        doc = json.loads(args.from_json.read_text())
        for p in write_results(doc, args.out, plot=not args.no_plot):
            print(f"wrote {p}")
        return 0
    settings = _settings(args)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        doc = run(settings, log=lambda m: print(m, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print("interrupted: every server was stopped; no results written", file=sys.stderr)
        return 130
    paths = write_results(doc, args.out, plot=not args.no_plot)
    for p in paths:
        print(f"wrote {p}")
    return 0
