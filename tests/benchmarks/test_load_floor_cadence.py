"""Issue 43's rows of the load bench: the ``.fbs`` workload's floor and the cadence streams.

The floor row (``benchmarks.load.floor_app`` with ``FLOOR_BODY=fbs``: a
granian app that parses nothing) stands in every size of the ``.fbs``
workload, with "vs. floor" ratios in its report; the OpenAI workload's
cadence cases send every row's stream from a stub in cadence mode. The
report's pieces are checked on made-up rows; the cadence case then runs in its
tiniest mode against the real servers, in a subprocess, and the result file
must hold its rows, measured (figures are not asserted; the floor's tiny run
is ``test_load_harness``'s, with every row of the ``.fbs`` workload).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.load import floor_app
from benchmarks.load.report import floor_lines, render_markdown
from benchmarks.load.results import Cell, add_comparisons, summarise
from benchmarks.load.rows import ROWS
from benchmarks.load.run import WORKLOADS, header
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES
from tests.benchmarks.runs import leftovers, run_bench

ROW = {r.name: r for r in ROWS}


def test_the_floor_is_a_row_of_every_size_that_streams_nothing() -> None:
    floor = ROW["floor"]
    assert (floor.server, floor.hop, floor.body, floor.stream_server) == (
        "floor",
        ("floor",),
        "fbs",
        None,
    )
    for s in WORKLOADS["fbs"].settings:
        assert "floor" in s.rows and "floor" in s.versus
        assert s.stream_rows is not None and "floor" not in s.stream_rows


def test_the_floor_sends_flatbuffers_on_and_answers_frames() -> None:
    fbs = floor_app._Floor("127.0.0.1:9", "fbs")
    assert f"content-type: {FLATBUFFERS}\r\naccept: {FRAMES}\r\n" in fbs._line
    assert fbs._answer == [("content-type", FRAMES)]
    # The OpenAI workload's floor as it was: JSON in, JSON out.
    js = floor_app._Floor("127.0.0.1:9")
    assert js._line.endswith("content-type: application/json\r\n")
    assert js._answer == [("content-type", "application/json")]


def _row(name: str, size: str, cpu: dict[str, float], rps: float, p99: float) -> dict[str, Any]:
    cell = Cell()
    cell.cpu_seconds.update(cpu)
    cell.rps.append(rps)
    cell.requests = 1000
    cell.latencies.append([p99 / 1e3] * 100)
    cell.rate = 100.0
    cell.rate_requests = 100
    cell.unloaded += [p99 / 2e3] * 10
    return summarise(ROW[name], size, cell, 2048)


def test_the_report_sets_each_row_beside_the_floor() -> None:
    size = "1KB"
    rows = [
        _row("direct", size, {"stub": 0.02}, 40000, 2.0),
        _row("floor", size, {"floor": 0.05, "stub": 0.03}, 15000, 2.5),
        _row("proxy-rsgi", size, {"proxy-rsgi": 0.1, "stub": 0.05}, 10000, 4.0),
    ]
    add_comparisons(rows, "direct", ("json-route", "floor"))
    proxy = rows[2]
    assert proxy["vs_floor"] == pytest.approx(10000 / 15000)
    assert proxy["cpu_vs_floor"] == pytest.approx(2.0)
    tiny = WORKLOADS["fbs"].settings[2]
    doc = {**header(tiny), "rows": rows, "streaming": [], "elapsed_seconds": 1}
    [line] = floor_lines(doc)
    assert line.startswith("- 1KB: the floor 50 µs per request")
    assert "proxy-rsgi 2.00x its CPU per request (100 µs)" in line
    md = render_markdown(doc)
    assert "| vs. floor |" in md and "| CPU vs. floor |" in md
    assert "## Against the floor" in md
    assert "| proxy-rsgi | 10,000 | 0.25x | - | 0.67x | 100 | 2.00x |" in md


# the harness, for real ------------------------------------------------------------


@pytest.mark.integration
def test_tiny_openai_run_streams_the_cadence_case(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["--workload", "openai", "--tiny", "--out", str(out), "--no-plot"]
    argv += ["--rows", "nginx-openai-cadence,gateway", "--sizes", "cadence-32"]
    done = run_bench(tmp_path, "benchmarks.load", *argv, timeout=150.0)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "load-openai.json").read_text())
    rows = {r["row"]: r for r in doc["rows"] if r["size"] == "cadence-32"}
    assert set(rows) == {"direct-openai-cadence", "nginx-openai-cadence", "gateway"}
    for name in ("direct-openai-cadence", "nginx-openai-cadence"):
        assert rows[name]["status"] == "ok", rows[name]
    gateway = rows["gateway"]
    assert gateway["status"] == "ok" or "gateway" in gateway["reason"], gateway
    for r in rows.values():
        if r["status"] == "ok":
            assert r["throughput_rps"] and r["unloaded_first_byte_p50_ms"] is not None
            assert "stub-cadence" in r["cpu_us_per_req"]
    assert rows["nginx-openai-cadence"]["hop_cpu_us_per_token"] is not None
    md = (out / "load-openai.md").read_text()
    assert "32-chunk stream, a token every 2 ms, c16" in md
    assert leftovers(tmp_path) == []
