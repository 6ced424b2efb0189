"""``make bench-load``: the run that starts the servers and measures every row.

Owns the run: the workloads (``WORKLOADS``: "fbs", the proxy's rows, whose
servers ``start_servers`` starts on one config; "openai", an OpenAI chat
request through flatgate and its peers, ``benchmarks.load.openai_workload``;
"embeddings", one embeddings request per protocol, edge and proxy,
``benchmarks.load.embeddings_workload``),
the order of the measurements (streams, then each size;
``benchmarks.load.measure`` takes them), the result document's header, the
sizes skipped once the time budget is spent, and the command line. Every
server is stopped when the run ends, on errors and on Ctrl-C or SIGTERM too.
Results: ``benchmarks/results/load.{json,md,png}`` (the openai workload's:
``load-openai.*``, the embeddings workload's: ``load-embeddings.*``;
``benchmarks.load.report``); a quick or tiny run's go to a new temporary
directory unless ``--out`` names one.

    python -m benchmarks.load                # full run (make bench-load), < 10 min
    BENCH_QUICK=1 python -m benchmarks.load  # every row, one round, < 2 min, to a temp dir
    python -m benchmarks.load --tiny --out /tmp/x   # the harness test's mode
    python -m benchmarks.load --rows proxy-rsgi,json-route --sizes 16KB --without nginx
    BENCH_PEERS=1 python -m benchmarks.load --workload openai --quick   # with the peers
    python -m benchmarks.load --workload openai --sizes stream-512 --rows gateway,nginx-openai-512

Must not: assert on figures, listen or send beyond 127.0.0.1, stop processes
it did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.harness.results import (
    MEASURED,
    Log,
    finish,
    is_quick,
    names,
    rerender,
    source_revision,
)
from benchmarks.harness.results import write_results as _write
from benchmarks.harness.servers import (
    HOST,
    ServerGroup,
    gateway_config,
)
from benchmarks.load import embeddings_workload, floor_app, openai_workload
from benchmarks.load import report as load_report
from benchmarks.load.cases import target_records
from benchmarks.load.measure import (
    FULL,
    QUICK,
    TINY,
    Harness,
    Settings,
    Started,
    document_head,
    measure_size,
    measure_streams,
    row_skips,
)
from benchmarks.load.peers import peers_requested
from benchmarks.load.report_embeddings import plot_embeddings, prepare, render_embeddings
from benchmarks.load.report_openai import render_openai
from benchmarks.load.results import skipped_row
from benchmarks.load.rows import ADAPTER_MODEL, CANNED_DELTAS, ECHO_MODEL, PROXY_SECTION, ROWS, Row
from benchmarks.payloads import PROMPT_SIZES

__all__ = [
    "MEASURED_HERE",
    "WORKLOADS",
    "Workload",
    "header",
    "main",
    "run",
    "start_servers",
    "write_results",
]


def _config_text(canned: int, echo: int, canned_openai: int) -> str:
    return gateway_config(
        {
            "canned": (f"http://{HOST}:{canned}", "fbs"),
            "canned-openai": (f"http://{HOST}:{canned_openai}/v1", "openai"),
            "echo": (f"http://{HOST}:{echo}", "fbs"),
        },
        {ADAPTER_MODEL: ["canned-openai"], ECHO_MODEL: ["echo"], "*": ["canned"]},
        {"gpt-4o-mini": "OpenAI", ECHO_MODEL: "OpenAI"},
        before=PROXY_SECTION,
    )


# The proxies the rows call: (interface, upstream transport); proxy-edge is the edge's hop.
_PROXIES = {
    "proxy-rsgi": ("rsgi", "fast"),
    "proxy-asgi": ("asgi", "fast"),
    "proxy-httpx": ("rsgi", "httpx"),
    "proxy-edge": ("rsgi", "fast"),
}
_BASELINES = {
    "json-route": "benchmarks.baselines:create_json_app",
    "msgspec-route": "benchmarks.baselines:create_msgspec_app",
    "protobuf-route": "benchmarks.baselines:create_protobuf_app",
}


def start_servers(group: ServerGroup, settings: Settings) -> dict[str, str]:
    """Start every server the selected rows need; the ones that failed, with why."""
    wanted = {n for r in ROWS if r.name in settings.rows for n in (r.server, *r.hop)}
    skipped: dict[str, str] = {}
    stub = group.flatgate("stub", "stub", ["--canned", str(CANNED_DELTAS), "--interface", "rsgi"])
    timing = ["--ttft-ms", str(settings.ttft_ms), "--itl-ms", str(settings.itl_ms)]
    echo = group.flatgate("echo", "stub", [*timing, "--interface", "rsgi"])
    openai_stub = group.flatgate(
        "stub-openai",
        "stub",
        ["--protocol", "openai", "--canned", str(CANNED_DELTAS), "--interface", "rsgi"],
    )
    config = group.workdir / "gateway.toml"
    config.write_text(_config_text(stub.port, echo.port, openai_stub.port))
    cfg = ["--config", str(config)]
    for name, (iface, transport) in _PROXIES.items():
        if name in wanted:
            args = [*cfg, "--interface", iface, "--transport", transport]
            group.flatgate(name, "proxy", args, metrics=True)
    env = {"FLATGATE_CONFIG": str(config), "FLATGATE_PROXY_TRANSPORT": '"fast"'}
    for name, target in _BASELINES.items():
        if name in wanted:
            group.granian(name, target, "rsgi", env=env)
    if "floor" in wanted:
        upstream = {"FLOOR_UPSTREAM": f"{HOST}:{stub.port}", "FLOOR_BODY": "fbs"}
        group.granian("floor", floor_app.TARGET, "rsgi", env=upstream, metrics=False)
    if "edge" in wanted:
        hop = group.servers["proxy-edge"].url
        group.flatgate("edge", "edge", [*cfg, "--proxy-url", hop], metrics=True)
    if "nginx" in wanted:
        upstreams = {"nginx": stub.port, "nginx-echo": echo.port}
        if (why := group.nginx_in_front(upstreams, settings.without)) is not None:
            skipped["nginx"] = why
    failed = group.wait_healthy()
    skipped.update(failed)
    return skipped


# The code the servers run: a revision is marked "+changes" when it differs from HEAD.
MEASURED_HERE = (*MEASURED, "benchmarks/baselines.py", "benchmarks/load", "benchmarks/peers")


def header(settings: Settings, revision: str = "unknown") -> dict[str, Any]:
    s = settings
    method = (
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
    )
    packages = ("granian", "msgspec", "flatbuffers", "protobuf", "httptools", "uvloop", "httpx")
    return document_head(s, revision, packages, method)


# The fbs workload's settings: "vs. floor" beside "vs. json-route"; the floor
# relays no stream (it reads content-length answers only).
_FBS = tuple(
    replace(
        s, versus=(*s.versus, "floor"), stream_rows=tuple(r.name for r in ROWS if r.name != "floor")
    )
    for s in (FULL, QUICK, TINY)
)


def _start_fbs(group: ServerGroup, settings: Settings) -> Started:
    return Started(start_servers(group, settings))


@dataclass(frozen=True, slots=True)
class Workload:
    rows: tuple[Row, ...]
    start: Callable[[ServerGroup, Settings], Started]
    header: Callable[[Settings, str], dict[str, Any]]
    settings: tuple[Settings, Settings, Settings]  # full, quick, tiny
    sizes: tuple[str, ...]  # the sizes it knows
    results: str  # the name of its result files: <results>.{json,md,png}


WORKLOADS = {
    "fbs": Workload(
        ROWS, _start_fbs, header, (_FBS[0], _FBS[1], _FBS[2]), tuple(PROMPT_SIZES), "load"
    ),
    "openai": Workload(
        openai_workload.OPENAI_ROWS,
        openai_workload.start,
        openai_workload.header,
        (openai_workload.OPENAI_FULL, openai_workload.OPENAI_QUICK, openai_workload.OPENAI_TINY),
        openai_workload.OPENAI_FULL.sizes,
        "load-openai",
    ),
    "embeddings": Workload(
        embeddings_workload.EMBEDDINGS_ROWS,
        embeddings_workload.start,
        embeddings_workload.header,
        (
            embeddings_workload.EMBEDDINGS_FULL,
            embeddings_workload.EMBEDDINGS_QUICK,
            embeddings_workload.EMBEDDINGS_TINY,
        ),
        embeddings_workload.EMBEDDINGS_FULL.sizes,
        "load-embeddings",
    ),
}


def run(settings: Settings, log: Log = print) -> dict[str, Any]:
    """Start the servers, measure every row, stop the servers; the result document."""
    workload = WORKLOADS[settings.workload]
    rows = [r for r in workload.rows if r.name in settings.rows]
    revision = source_revision(MEASURED_HERE)  # before the servers start: what they import
    with tempfile.TemporaryDirectory(prefix="flatgate-load-") as tmp:
        group = ServerGroup(Path(tmp))
        try:
            log(f"starting servers ({settings.workload} workload, {settings.mode} mode)")
            started = workload.start(group, settings)
            for name, why in started.skipped.items():
                log(f"  {name}: {why}")
            # A row is skipped when any server it needs failed to start.
            skips = row_skips(rows, started.skipped)
            streamed = settings.stream_rows
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                h = Harness(group, settings, runner, log)
                stream_rows = measure_streams(
                    h,
                    [r for r in rows if streamed is None or r.name in streamed],
                    skips,
                    started.stream_body,
                )
                results: list[dict[str, Any]] = []
                for size in settings.sizes:
                    if h.over_budget():
                        planned = settings.plan(size).rows
                        results += [
                            skipped_row(r.name, "time budget spent", size)
                            for r in rows
                            if not planned or r.name in planned
                        ]
                        continue
                    results += measure_size(h, rows, size, skips, started.size_body)
            elapsed = time.monotonic() - h.started
        finally:
            group.stop_all()
    doc = workload.header(settings, revision)
    doc["versions"].update(started.versions)
    doc["elapsed_seconds"] = round(elapsed, 1)
    doc["rows"] = results
    doc["streaming"] = stream_rows
    return doc


def _settings(args: argparse.Namespace) -> Settings:
    workload = WORKLOADS[args.workload]
    full, quick, tiny = workload.settings
    s = tiny if args.tiny else quick if is_quick(args.quick) else full
    if args.rows:
        rows = names(args.rows, [r.name for r in workload.rows], "rows")
        # Every floor a chosen row is compared with: the workload's, its cases'.
        floors = {p.floor for p in s.plans.values() if p.floor and set(p.rows) & set(rows)}
        keep = {s.floor, *floors, *rows}
        s = replace(s, rows=tuple(r.name for r in workload.rows if r.name in keep))
    if args.sizes:
        s = replace(s, sizes=names(args.sizes, workload.sizes, "sizes"))
    if args.without:
        s = replace(s, without=names(args.without))
    return replace(s, peers=peers_requested(args.peers))


def write_results(
    doc: Mapping[str, Any], out: Path, *, plot: bool = True, name: str = "load"
) -> list[Path]:
    """Write ``<name>.json``, ``<name>.md`` and (with ``plot``) ``<name>.png``
    under ``out``; the OpenAI workload's document renders as
    ``benchmarks.load.report_openai`` says, and keeps its targets
    (``benchmarks.load.cases.target_records``); the embeddings workload's as
    ``benchmarks.load.report_embeddings`` says, with its own plot."""
    plotter = load_report.plot
    if doc.get("workload") == "openai":
        doc = {**doc, "targets": target_records(doc["rows"])}
        markdown = render_openai(doc)
    elif doc.get("workload") == "embeddings":
        doc = prepare(doc)
        markdown = render_embeddings(doc)
        plotter = plot_embeddings
    else:
        markdown = load_report.render_markdown(doc)
    draw = (lambda path: plotter(doc, path)) if plot else None
    return _write(out, name, doc, markdown + "\n", draw, indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__)
    parser.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="fbs",
        help="fbs: the proxy's rows (default); openai: an OpenAI chat request, with the "
        "peers; embeddings: an embeddings request per protocol, edge and proxy",
    )
    parser.add_argument(
        "--peers", action="store_true", help="openai workload: the peer rows (also BENCH_PEERS=1)"
    )
    parser.add_argument("--quick", action="store_true", help="one round (also BENCH_QUICK=1)")
    parser.add_argument("--tiny", action="store_true", help="seconds per row, 1 KB only (tests)")
    parser.add_argument("--rows", help="comma-separated rows (direct is always included)")
    parser.add_argument("--sizes", help="comma-separated prompt sizes, e.g. 1KB,16KB")
    parser.add_argument("--without", help="tools to treat as absent, e.g. wrk,nginx")
    parser.add_argument("--out", type=Path, help="results directory (default: see above)")
    parser.add_argument("--no-plot", action="store_true", help="skip load.png")
    parser.add_argument(
        "--from-json", type=Path, help="measure nothing: render load.md/png from this load.json"
    )
    args = parser.parse_args(argv)

    def write(doc: dict[str, Any], out: Path) -> list[Path]:
        name = WORKLOADS[doc.get("workload", "fbs")].results
        return write_results(doc, out, plot=not args.no_plot, name=name)

    if args.from_json:
        rerender(args.from_json, write, args.out)
        return 0
    settings = _settings(args)
    doc = finish(
        lambda log: run(settings, log=log),
        write,
        out=args.out,
        quick=settings.mode != "full",
        name=WORKLOADS[settings.workload].results,
    )
    return 130 if doc is None else 0
