"""The Responses WebSocket against HTTP (``benchmarks.load.socket_rows``): a tiny run.

The tiny run starts the OpenAI workload's stubs and gateway on loopback,
spot-checks each mode's answer (the stub's 32 tokens, over HTTP streamed and
whole, over a socket fresh and chained), measures every mode for a fraction
of a second and writes the result files; this checks their shape and that
every server is gone. It asserts on no figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.load import socket_rows
from tests.benchmarks.runs import leftovers, run_bench

_FIGURES = ("rps", "cpu_us_per_response", "user_us_per_response", "cpu_vs_http_stream")


def test_summary_takes_medians_and_ratios_to_http_stream() -> None:
    http = (0.1, 0.2, 0.9)  # CPU seconds of 100 responses in rounds 1, 2, 3
    records = [
        {"round": n, "mode": mode, "responses": 100, "errors": 0, "seconds": 1.0}
        | {"user_s": http[n - 1] if mode == "http-stream" else 0.4, "system_s": 0.0}
        | {"stub_cpu_s": 0.01}
        for mode in socket_rows.MODES
        for n in (1, 2, 3)
    ]
    got = {m["mode"]: m for m in socket_rows.summarise(records)}
    assert got["http-stream"]["cpu_us_per_response"] == 2000.0
    assert got["ws"]["cpu_us_per_response"] == 4000.0
    assert got["ws"]["cpu_vs_http_stream"] == 2.0
    assert got["ws"]["rps_vs_http_stream"] == 1.0
    assert got["ws"]["cpu_vs_http_stream_by_round"] == [0.444, 2.0, 4.0]


@pytest.mark.integration
def test_tiny_run_writes_every_mode(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_bench(
        tmp_path, "benchmarks.load.socket_rows", "--tiny", "--out", str(out), timeout=150.0
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / f"{socket_rows.NAME}.json").read_text())
    assert doc["mode"] == "tiny" and doc["skipped"] == {} and doc["spot_check"] == {}
    assert [m["mode"] for m in doc["modes"]] == list(socket_rows.MODES)
    for m in doc["modes"]:
        assert m["responses"] > 0 and m["errors"] == 0, m
        assert all(m[k] is not None for k in _FIGURES), m
    assert {r["mode"] for r in doc["rounds"]} == set(socket_rows.MODES)
    md = (out / f"{socket_rows.NAME}.md").read_text()
    assert md == socket_rows.render(doc)
    for mode in socket_rows.MODES:
        assert f"| {mode} |" in md
    assert leftovers(tmp_path) == []
