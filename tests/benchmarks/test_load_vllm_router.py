"""The vllm-router row of the OpenAI workload, run for real in tiny mode.

With ``--peers``: where ``benchmarks/peers/setup_peers.sh`` installed the
router (``BENCH_PEERS=1 sh benchmarks/setup_tools.sh``), the row is measured
in front of the 2 KB case's stub, and the streaming measurement's router in
front of the echo stub; where it did not, or where the stub does not answer
the ``GET /health`` the router waits for, the row is skipped with the reason.
Either way the result file has the row, the report its column, and no router
outlives the run. Figures are never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.runs import leftovers, run_bench


@pytest.mark.integration
def test_tiny_openai_run_has_the_vllm_router_row(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["--workload", "openai", "--tiny", "--peers", "--out", str(out), "--no-plot"]
    argv += ["--rows", "vllm-router", "--sizes", "2KB"]
    done = run_bench(tmp_path, "benchmarks.load", *argv, timeout=150.0)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "load-openai.json").read_text())
    rows = {r["row"]: r for r in doc["rows"] if r["size"] == "2KB"}
    assert set(rows) == {"direct-openai", "vllm-router"}
    router = rows["vllm-router"]
    if router["status"] == "ok":
        assert router["throughput_rps"] and router["hop_cpu_us_per_req"]
        assert router["unloaded_p50_ms"] is not None
        assert doc["versions"]["vllm-router"] == "0.1.17"
    else:
        reason = router["reason"]
        assert "not installed" in reason or "GET /health" in reason, reason
    streams = {r["row"]: r for r in doc["streaming"]}
    assert "vllm-router" in streams
    md = (out / "load-openai.md").read_text()
    assert "| vs. vllm-router |" in md and "| vllm-router |" in md
    assert leftovers(tmp_path) == []
