"""The load bench's embeddings workload: its bodies, its target, and a tiny run.

The tiny run starts the real servers (stubs, proxy, edge, gateway, nginx
where installed) on loopback and checks that every row ran (spot-checked
answers: the right number of vectors of 1536 floats) and that the report
carries the target line; it asserts on no figure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.harness.servers import find_tool
from benchmarks.load import embeddings_workload as ew
from benchmarks.load.report_embeddings import prepare, render_embeddings
from benchmarks.load.results import skipped_row
from flatgate.proxy.wire.embeddings import read_embedding_request
from tests.benchmarks.runs import leftovers, run_bench

_ROW = {r.name: r for r in ew.EMBEDDINGS_ROWS}


def test_bodies_carry_the_cases_inputs() -> None:
    for size, count in ew.CASES.items():
        fbs = ew.body_for(_ROW["proxy-fbs"], size)
        got = read_embedding_request(fbs.data)
        assert got.count == count and got.dimensions == ew.DIMENSIONS
        assert list(got.texts) == ew.texts(count)
        assert read_embedding_request(ew.body_for(_ROW["proxy-openai"], size).data).model_name
        doc = json.loads(ew.body_for(_ROW["gateway"], size).data)
        assert doc["input"] == ew.texts(count) and doc["encoding_format"] == "base64"
        assert doc["dimensions"] == ew.DIMENSIONS
    # The two proxy rows reach different stubs: different models.
    a = read_embedding_request(ew.body_for(_ROW["proxy-fbs"], "1x1536").data).model_name
    b = read_embedding_request(ew.body_for(_ROW["proxy-openai"], "1x1536").data).model_name
    assert a != b


def test_spot_checks_refuse_a_wrong_answer() -> None:
    body = ew.body_for(_ROW["proxy-fbs"], "64x1536")
    assert body.check is not None
    assert not body.check(b"not a buffer")
    json_body = ew.body_for(_ROW["edge"], "64x1536")
    assert json_body.check is not None
    assert not json_body.check(b'{"data": [{"embedding": "AAAA"}]}')


def _ok(name: str, size: str, cpu: float, sys_: float) -> dict[str, object]:
    server = _ROW[name].hop[0]
    return {
        "row": name,
        "size": size,
        "status": "ok",
        "note": "",
        "cpu_us_per_req": {server: cpu},
        "sys_us_per_req": {server: sys_},
        "hop_cpu_us_per_req": cpu,
        "peak_rss_mib": {server: 50.0},
    }


def test_target_is_the_user_cpu_ratio() -> None:
    rows = [
        _ok("proxy-fbs", "1x1536", 150.0, 50.0),
        _ok("proxy-fbs", "64x1536", 200.0, 90.0),
        skipped_row("nginx-fbs", "nginx is not installed", "64x1536"),
    ]
    doc = prepare({"rows": rows})
    [target] = doc["targets"]
    assert target["ratio"] == pytest.approx(110.0 / 100.0) and target["met"] is True
    rows[1] = _ok("proxy-fbs", "64x1536", 400.0, 90.0)
    [target] = prepare({"rows": rows})["targets"]
    assert target["met"] is False
    [target] = prepare({"rows": rows[:1]})["targets"]
    assert target["met"] is None


@pytest.mark.integration
def test_tiny_run_has_every_row_and_the_target(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--workload", "embeddings", "--tiny", "--out", str(out), "--no-plot"]
    done = run_bench(tmp_path, "benchmarks.load", *args, timeout=150.0)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "load-embeddings.json").read_text())
    assert doc["workload"] == "embeddings" and doc["mode"] == "tiny"
    got = {(r["row"], r["size"]): r for r in doc["rows"]}
    assert set(got) == {(name, size) for name in _ROW for size in ew.CASES}
    nginx = find_tool("nginx") is not None
    for (name, _), r in got.items():
        if name == "nginx-fbs" and not nginx:
            assert r["status"] == "skipped" and "nginx" in r["reason"]
            continue
        assert r["status"] == "ok", r
        assert r["unloaded_requests"] > 0
        assert r["hop_user_cpu_us_per_req"] is not None
    [target] = doc["targets"]
    assert target["bound"] == ew.TARGET_BOUND
    md = (out / "load-embeddings.md").read_text()
    assert md == render_embeddings(doc) + "\n"
    assert re.search(
        rf"\*\*Target:\*\* {re.escape(ew.TARGET_NAME)}: .*at most 1.2x: (met|missed)", md
    )
    for name in _ROW:
        assert f"| {name} |" in md
    assert leftovers(tmp_path) == []
