"""The load bench (``benchmarks.load``) and its baselines (``benchmarks.baselines``).

Pure pieces are tested directly: the baselines' route readers, the request
bodies of every row, wrk's script and output, the summaries and comparisons,
the report (the servers, /proc and /metrics readings are
``tests/benchmarks/test_harness.py``'s). The
harness itself runs in its tiniest mode against the real servers, in a
subprocess, and the result file must hold every row (figures are not
asserted); with wrk and nginx treated as absent, their figures and row degrade
to "skipped" with a reason; Ctrl-C stops every server it started.
"""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from benchmarks.baselines import (
    PROTOBUF_TYPE,
    json_route,
    msgspec_route,
    protobuf_route,
)
from benchmarks.harness.sampling import GcSample
from benchmarks.load.clients import (
    LatencyRun,
    StreamRun,
    parse_wrk,
    run_wrk,
    wrk_script,
)
from benchmarks.load.measure import TINY, Harness
from benchmarks.load.report import render_markdown, targets
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
    ECHO_MODEL,
    ROWS,
    STREAM_TEXT,
    Row,
    request_body,
    row_names,
    stream_body,
)
from flatgate.proxy.stub import parse_request
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.schema import JSON
from tests.benchmarks.runs import ROOT, bench_env, leftovers, run_bench
from tests.tools import needed

ROW = {r.name: r for r in ROWS}


# baselines --------------------------------------------------------------------


@pytest.mark.parametrize("size", [1024, 16 << 10])
def test_every_body_format_carries_the_same_route(size: int) -> None:
    fbs = request_body("fbs", size)
    js = request_body("json", size)
    pb = request_body("protobuf", size)
    provider, model = read_route(fbs.data)
    assert (provider, bytes(model)) == (0, b"gpt-4o-mini")
    assert json_route(js.data) == (0, b"gpt-4o-mini")
    assert msgspec_route(js.data) == (0, b"gpt-4o-mini")
    assert protobuf_route(pb.data) == (0, b"gpt-4o-mini")
    assert dict(js.headers)["content-type"] == JSON
    assert dict(pb.headers)["content-type"] == PROTOBUF_TYPE
    # The prompt is really in every body, not just the route.
    assert len(fbs.data) > size and len(js.data) > size and len(pb.data) > size


def test_json_readers_read_provider_when_given() -> None:
    body = msgspec.json.encode({"model": "m", "provider": 2, "messages": []})
    assert json_route(body) == (2, b"m")
    assert msgspec_route(body) == (2, b"m")


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"messages": []}',
        b'{"model": 3, "messages": []}',
        b'{"model": "", "messages": []}',
        b'{"model": "m", "provider": "x", "messages": []}',
        b"\xff\xfe{}",
    ],
)
def test_json_readers_refuse_bad_bodies(body: bytes) -> None:
    with pytest.raises(MalformedBuffer):
        json_route(body)
    with pytest.raises(MalformedBuffer):
        msgspec_route(body)


def test_msgspec_reader_decodes_the_whole_body() -> None:
    # A wrong type deep inside the messages is found: the whole body is read.
    doc = {"model": "m", "messages": [{"role": "user", "content": 5}]}
    with pytest.raises(MalformedBuffer, match="messages"):
        msgspec_route(msgspec.json.encode(doc))
    assert json_route(msgspec.json.encode(doc)) == (0, b"m")


@pytest.mark.parametrize("body", [b"", b"\xff\xff\xff\xff", b"\x0a\xff"])
def test_protobuf_reader_refuses_bad_bodies(body: bytes) -> None:
    with pytest.raises(MalformedBuffer):
        protobuf_route(body)


def test_stream_body_asks_the_echo_stub_for_the_stream_text() -> None:
    req = parse_request(stream_body("fbs", 1024).data)
    assert req.model == ECHO_MODEL
    assert req.last_user == STREAM_TEXT
    assert req.stream
    doc = json.loads(stream_body("openai", 1024).data)
    assert doc["model"] == ECHO_MODEL and doc["stream"] is True
    assert doc["messages"][-1] == {"role": "user", "content": STREAM_TEXT}


def test_rows_have_their_servers() -> None:
    assert row_names()[0] == "direct"
    for r in ROWS:
        assert r.server
        assert all(isinstance(h, str) for h in r.hop)
    assert ROW["edge"].hop == ("edge", "proxy-edge")
    assert ROW["json-route"].stream_server is None


# clients: wrk -------------------------------------------------------


def test_parse_wrk_reads_the_json_line() -> None:
    out = (
        "Running 1s test @ http://127.0.0.1:1/x\n  1 threads and 32 connections\n"
        'WRKJSON {"requests": 12000, "duration_us": 2000000, "errors": 3, '
        '"p50_us": 1500.0, "p99_us": 4000.5}\n'
    )
    r = parse_wrk(out)
    assert r.requests == 12000 and r.errors == 3
    assert r.rps == pytest.approx(6000.0)
    assert r.p50_ms == pytest.approx(1.5) and r.p99_ms == pytest.approx(4.0005)
    with pytest.raises(ValueError):
        parse_wrk("Running 1s test\n")


def test_wrk_script_posts_the_body_file_with_the_headers(tmp_path: Path) -> None:
    path = tmp_path / 'odd "name".bin'
    text = wrk_script(path, [("content-type", "application/x-flatbuffers"), ("accept", "a/b")])
    assert 'wrk.method = "POST"' in text
    assert '\\"name\\"' in text  # quotes in the path are escaped for Lua
    assert 'wrk.headers["content-type"] = "application/x-flatbuffers"' in text
    assert 'wrk.headers["accept"] = "a/b"' in text
    assert "function done(summary, latency, requests)" in text


def test_wrk_posts_the_body_with_the_headers(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            if len(seen) < 3:
                seen.append((self.path, self.headers["content-type"], body))
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        body = tmp_path / "body.bin"
        body.write_bytes(b"\x00\x01flat")
        script = tmp_path / "s.lua"
        script.write_text(wrk_script(body, [("content-type", "application/x-flatbuffers")]))
        wrk = needed("wrk")
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/completions"
        r = run_wrk(wrk, url, script, connections=1, seconds=1)
    finally:
        server.shutdown()
        server.server_close()
    assert r.requests > 0 and r.errors == 0 and r.seconds > 0
    assert seen[0] == ("/v1/completions", "application/x-flatbuffers", b"\x00\x01flat")


# results and report -------------------------------------------------------------


def _row(
    name: str, rps: float, lat: list[float], unloaded: list[float], **kw: float
) -> dict[str, Any]:
    cell = Cell(rps=[rps], requests=int(rps), latencies=[lat], unloaded=unloaded, rate=1000.0)
    cell.cpu_seconds = {name: kw.get("cpu", 0.05), "stub": 0.02}
    add_gc(
        cell,
        {name: GcSample((0, 0, 0), (0, 0, 0))},
        {name: GcSample((kw.get("gc", 10.0), 0, 1), (0.001, 0, 0.002))},
    )
    return summarise(ROW[name], "16KB", cell, 17000)


def test_summaries_and_comparisons() -> None:
    direct = _row("direct", 20000, [0.001] * 100, [0.0002] * 10)
    proxy = _row("proxy-rsgi", 8000, [0.0015] * 99 + [0.004], [0.0004] * 10, gc=2.0)
    jsonr = _row("json-route", 4000, [0.002] * 100, [0.0005] * 10, gc=40.0)
    rows = [direct, proxy, jsonr, skipped_row("nginx", "nginx is not installed", "16KB")]
    add_comparisons(rows)
    assert proxy["vs_direct"] == pytest.approx(0.4)
    assert proxy["vs_json_route"] == pytest.approx(2.0)
    assert proxy["added_ms"]["p50"] == pytest.approx(0.5)
    assert proxy["added_ms"]["p99"] == pytest.approx(0.5)
    assert proxy["added_ms"]["p99.9"] == pytest.approx(3.0)
    assert proxy["unloaded_added_p50_ms"] == pytest.approx(0.2)
    assert proxy["cpu_us_per_req"]["proxy-rsgi"] == pytest.approx(0.05 / 8000 * 1e6)
    assert proxy["hop_cpu_us_per_req"] == pytest.approx(0.05 / 8000 * 1e6)
    assert proxy["gc"]["proxy-rsgi"]["collections"] == [2, 0, 1]
    assert proxy["gc"]["proxy-rsgi"]["collections_per_1k"] == pytest.approx(3 / 8000 * 1e3)
    assert proxy["gc"]["proxy-rsgi"]["pause_ms_total"] == pytest.approx(3.0)
    assert rows[-1]["status"] == "skipped" and "added_ms" not in rows[-1]

    doc = {
        "date": "2026-01-01 00:00 UTC",
        "cpu": "a CPU",
        "cores": 2,
        "platform": "Linux x86_64",
        "python": "CPython 3.11",
        "versions": {"granian": "1"},
        "mode": "tiny",
        "method": "the method",
        "settings": {"sizes": ["16KB"], "rates": {"16KB": 1000.0}},
        "rows": rows,
        "streaming": [skipped_row("json-route", "no stream")],
    }
    md = render_markdown(doc)
    for name in ("direct", "proxy-rsgi", "json-route", "nginx"):
        assert f"| {name} |" in md
    assert "skipped: nginx is not installed" in md
    assert "failed requests" not in md
    proxy["rate_errors"] = 3
    assert "| proxy-rsgi (3 failed requests) |" in render_markdown(doc)
    assert "| 0.40x | 2.00x |" in md
    assert "Caveats" in md
    lines = targets(doc)
    assert any("0.40x direct throughput (target >= 0.3x: met)" in x for x in lines)
    assert any("2.00x json-route (target >= 1.5x: met)" in x for x in lines)


def test_fixed_rate_percentiles_are_the_median_of_rounds() -> None:
    calm = [0.001] * 1000
    burst = [0.001] * 900 + [0.050] * 100  # a neighbour's burst in one round
    cell = Cell(latencies=[calm, burst, calm], rate=1000.0)
    row = summarise(ROW["proxy-rsgi"], "1KB", cell, 2000)
    assert row["latency_ms"]["p99"] == pytest.approx(1.0)
    assert row["latency_ms_pooled"]["p99"] == pytest.approx(50.0)
    assert row["throughput_rps"] is None and row["gc"] == {}
    # Throughput: the best round (a neighbour's load only ever takes some away).
    row = summarise(ROW["proxy-rsgi"], "1KB", Cell(rps=[5000.0, 9000.0, 7000.0]), 2000)
    assert row["throughput_rps"] == 9000.0
    assert row["throughput_runs"] == [5000.0, 9000.0, 7000.0]


def test_main_renders_an_existing_result_without_measuring(tmp_path: Path) -> None:
    from benchmarks.load.run import main

    src = ROOT / "benchmarks" / "results" / "load.json"
    assert src.exists(), "the last full run's benchmarks/results/load.json is committed"
    out = tmp_path / "out"
    assert main(["--from-json", str(src), "--out", str(out), "--no-plot"]) == 0
    md = (out / "load.md").read_text()
    doc = json.loads((out / "load.json").read_text())
    assert doc == json.loads(src.read_text())
    # Every row the document holds (one measured before a row was added lacks it).
    for name in {r["row"] for r in doc["rows"]}:
        assert f"| {name}" in md
    assert not (out / "load.png").exists()


@pytest.mark.parametrize(
    "argv", [["--rows", "proxy-rsgi,nope"], ["--sizes", "3KB"], ["--rows", "edge", "--sizes", "x"]]
)
def test_main_refuses_unknown_rows_and_sizes(argv: list[str], tmp_path: Path) -> None:
    from benchmarks.load.run import main

    with pytest.raises(SystemExit, match="unknown"):
        main([*argv, "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_stream_summaries() -> None:
    def run(ttft: float, tpot: float) -> StreamRun:
        return StreamRun(ttft=[ttft] * 5, tpot=[tpot] * 5, streams=5, tokens=160)

    direct = summarise_streams(ROW["direct"], [run(0.020, 0.002)])
    proxy = summarise_streams(ROW["proxy-rsgi"], [run(0.0205, 0.0021), run(0.0205, 0.0021)])
    rows = [direct, proxy]
    add_stream_comparisons(rows)
    assert proxy["streams"] == 10 and proxy["tokens"] == 320
    assert proxy["added_ttft_ms"] == pytest.approx(0.5)
    assert proxy["added_tpot_ms"] == pytest.approx(0.1)


def test_rounds_rotate_drop_failures_and_stop_at_the_budget() -> None:
    rows = [ROW["direct"], ROW["proxy-rsgi"], ROW["json-route"]]
    logged: list[str] = []
    h = Harness(cast(Any, None), TINY, cast(Any, None), logged.append)
    seen: list[str] = []

    def measure(r: Row) -> None:
        seen.append(r.name)
        if r.name == "json-route":
            raise RuntimeError("boom")

    reasons: dict[str, str] = {}
    assert h.rounds(rows, 3, "1KB", reasons, measure) == 3
    # Rotated one further each round; json-route failed in the first and left.
    d, p, j = "direct", "proxy-rsgi", "json-route"
    assert seen == [d, p, j, p, d, d, p]
    assert reasons == {"json-route": "failed in 1KB round 1: RuntimeError('boom')"}
    assert logged[0] == "1KB round 1: direct"
    assert h.rounds([], 2, "stream", {}, measure) == 2
    h.started -= TINY.budget_seconds + 1
    seen.clear()
    assert h.rounds(rows, 3, "1KB", {}, measure) == 1
    assert seen == ["direct", "proxy-rsgi", "json-route"]


def test_latency_run_defaults_are_independent() -> None:
    a, b = LatencyRun(), LatencyRun()
    a.latencies.append(1.0)
    assert b.latencies == []


# the harness, for real ------------------------------------------------------------


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    out = ["--tiny", "--out", str(tmp_path / "out")]
    return run_bench(tmp_path, "benchmarks.load", *out, *args, timeout=100.0)


@pytest.mark.integration
def test_tiny_run_has_every_row(tmp_path: Path) -> None:
    done = _bench(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "load.json").read_text())
    assert doc["mode"] == "tiny"
    for key in ("date", "cpu", "python", "versions", "method"):
        assert doc[key]
    sizes = TINY.sizes
    got = {(r["row"], r["size"]) for r in doc["rows"]}
    assert got == {(name, size) for name in row_names() for size in sizes}
    for r in doc["rows"]:
        assert r["status"] in ("ok", "skipped"), r
        if r["status"] == "skipped":
            assert r["reason"]
        else:
            assert r["latency_ms"]["p50"] is not None
            assert r["rate_requests"] > 0
    # The floor (issue 43): at saturation, at the fixed rate and unloaded, beside every row.
    floor = next(r for r in doc["rows"] if r["row"] == "floor")
    assert floor["status"] == "ok", floor
    assert floor["throughput_rps"] and floor["unloaded_p50_ms"] is not None
    proxy = next(r for r in doc["rows"] if r["row"] == "proxy-rsgi")
    assert proxy["vs_floor"] is not None and proxy["cpu_vs_floor"] is not None
    # The floor relays no stream: it reads content-length answers only.
    assert {r["row"] for r in doc["streaming"]} == set(row_names()) - {"floor"}
    assert "## Against the floor" in (tmp_path / "out" / "load.md").read_text()
    md = (tmp_path / "out" / "load.md").read_text()
    for name in row_names():
        assert f"| {name}" in md
    assert (tmp_path / "out" / "load.png").stat().st_size > 0
    assert leftovers(tmp_path) == []


@pytest.mark.integration
def test_without_wrk_and_nginx_rows_degrade(tmp_path: Path) -> None:
    done = _bench(tmp_path, "--rows", "proxy-rsgi,nginx", "--without", "wrk,nginx", "--no-plot")
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "load.json").read_text())
    rows = {r["row"]: r for r in doc["rows"]}
    assert set(rows) == {"direct", "proxy-rsgi", "nginx"}
    assert rows["nginx"]["status"] == "skipped" and "nginx" in rows["nginx"]["reason"]
    proxy = rows["proxy-rsgi"]
    assert proxy["status"] == "ok" and proxy["throughput_rps"] is None
    assert any("wrk" in n for n in proxy["notes"])
    assert proxy["latency_ms"]["p99"] is not None
    assert doc["versions"]["wrk"] == "absent"
    assert leftovers(tmp_path) == []


@pytest.mark.integration
def test_interrupt_stops_every_server(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "benchmarks.load", "--tiny", "--out", str(tmp_path / "out")],
        cwd=ROOT,
        env=bench_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stderr is not None
            # Wait until measuring has begun: every server is up by then.
            for line in proc.stderr:
                if line.startswith("stream "):
                    break
            assert leftovers(tmp_path), "servers should be running"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert leftovers(tmp_path) == []
    assert not (tmp_path / "out" / "load.json").exists()
