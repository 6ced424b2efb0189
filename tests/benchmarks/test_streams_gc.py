"""The GC table of workload A (``benchmarks.streams --gc-table``): settings, accounting, report.

The pure pieces directly: each GC setting reaches the config as ``[proxy]``
and ``[edge]`` keys both services accept, the order of a round, the command
line, one line's figures from made-up runs. Then the harness itself, a few
seconds with 30 connections on the proxy row under two settings: every line
is there and its streams add up, and with the collector off the proxy counts
no collection (the setting reached the process); no timing is asserted.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.sampling import GcSample
from benchmarks.streams.client import Record
from benchmarks.streams.command import parser
from benchmarks.streams.gcreport import render_markdown, summary_table
from benchmarks.streams.gctable import (
    FULL_TABLE,
    GC_SETTINGS,
    QUICK_TABLE,
    plan_round,
    settings_of,
    summarise_entry,
)
from benchmarks.streams.results import RowRun, summarise
from benchmarks.streams.rows import ROWS, Timing, config_text
from benchmarks.streams.sampler import Sample
from flatgate.edge_translator.settings import parse_edge_settings
from flatgate.proxy.service.settings import ProxySection, config_problems, parse_config
from flatgate.proxy.stub.settings import stub_problems
from tests.benchmarks.runs import run_bench

ROW = {r.name: r for r in ROWS}
BY = {g.name: g for g in GC_SETTINGS}


def test_settings_are_the_issues_five() -> None:
    got = {g.name: (g.thresholds, g.freeze) for g in GC_SETTINGS}
    shipped = ProxySection()
    assert got == {
        "cpython": ((700, 10, 10), False),
        "cpython+freeze": ((700, 10, 10), True),
        "10k+freeze": ((10_000, 10, 10), True),
        "flatgate": (shipped.gc_thresholds, shipped.gc_freeze),
        "off": ((0, 10, 10), False),
    }


@pytest.mark.parametrize("name", [g.name for g in GC_SETTINGS])
def test_each_setting_reaches_proxy_and_edge(name: str) -> None:
    g = BY[name]
    doc = tomllib.loads(config_text(9001, 9002, Timing(), g))
    assert config_problems(doc, {}) == []
    assert stub_problems(doc, {}) == []
    proxy = parse_config(doc, {}).proxy
    assert (proxy.gc_thresholds, proxy.gc_freeze) == (g.thresholds, g.freeze)
    edge = parse_edge_settings(doc, environ={}).edge
    assert (edge.gc_thresholds, edge.gc_freeze) == (g.thresholds, g.freeze)


def test_rounds_start_with_direct_then_rotate() -> None:
    gc = GC_SETTINGS[:2]
    rows = [ROW["proxy"], ROW["gateway"]]
    first = [(g.name if g else None, r.name) for g, r in plan_round(0, gc, rows)]
    assert first == [
        (None, "direct"),
        ("cpython", "proxy"),
        ("cpython", "gateway"),
        ("cpython+freeze", "proxy"),
        ("cpython+freeze", "gateway"),
    ]
    second = [(g.name if g else None, r.name) for g, r in plan_round(1, gc, rows)]
    assert second[0] == (None, "direct") and second[1] == ("cpython", "gateway")
    assert sorted(map(str, second)) == sorted(map(str, first))


def _args(*argv: str) -> Any:
    return parser().parse_args(["--gc-table", *argv])


def test_settings_from_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_QUICK", raising=False)
    assert settings_of(_args()) == FULL_TABLE
    assert FULL_TABLE.streams.connections == 1000
    assert FULL_TABLE.streams.rows == ("direct", "proxy", "gateway")
    assert settings_of(_args("--quick")) == QUICK_TABLE
    s = settings_of(_args("--rows", "proxy", "--settings", "off,cpython", "--connections", "9"))
    assert s.mode == "custom" and s.streams.rows == ("direct", "proxy")
    assert [g.name for g in s.gc] == ["off", "cpython"] and s.streams.connections == 9
    for bad in (["--rows", "nginx"], ["--settings", "nope"], ["--connections", "0"]):
        with pytest.raises(SystemExit):
            settings_of(_args(*bad))


def _sample(t: float, mark: str, counts: tuple[int, int], coll: float, rss: int) -> Sample:
    """At ``t``: the client's (tokens, streams) so far, the proxy's collections and RSS."""
    tokens, finished = counts
    gc = {"proxy": GcSample((coll, 0.0, 0.0), (coll / 1000, 0.0, 0.0)), "stub": None}
    cpu = {"proxy": t, "stub": t / 2}
    return Sample(t, mark, tokens, finished, t / 4, cpu, {"proxy": rss, "stub": 1024}, gc)


def _run(row: str, extra_ms: float) -> RowRun:
    base = 1.9 + extra_ms / 1000
    records = [Record(1.0 + i / 100, 0.1, base, "", True) for i in range(100)]
    records.append(Record(2.0, math.nan, 0.5, "timeout", True))
    samples = [
        _sample(0.0, "", (0, 0), 0, 40 << 10),
        _sample(1.0, "from", (100, 10), 4, 50 << 10),
        _sample(3.0, "to", (2100, 210), 24, 52 << 10),
        _sample(3.0, "end", (2100, 210), 24, 52 << 10),
    ]
    peak = {"proxy": 60 << 10, "stub": 2048}
    return RowRun(row, 1, records, samples, peak, {}, 0.0)


def test_one_line_adds_up() -> None:
    floor = summarise("direct", "", [_run("direct", 0)])
    line = summarise_entry(BY["cpython"], ROW["proxy"], [_run("proxy", 7)], floor)
    assert (line["setting"], line["row"]) == ("cpython", "proxy")
    assert (line["streams"], line["streams_ok"], line["errors"]) == (101, 100, 1)
    assert line["errors_by_kind"] == {"timeout": 1}
    f = line["flatgate"]
    assert f["process"] == "proxy"
    # 20 collections and 20 ms of pause over 200 streams that ended in the window
    assert f["gc_collections_per_1k_streams"] == pytest.approx(100.0)
    assert f["gc_pause_ms_per_1k_streams"] == pytest.approx(100.0)
    assert f["gc_pause_ms_per_collection"] == pytest.approx(1.0)
    assert f["cpu_us_per_token"] == pytest.approx(1000.0)  # 2 s over 2,000 tokens
    assert f["peak_rss_mib"] == 60.0 and f["rss_growth_mib"] == 2.0
    assert line["added_duration_ms"]["p50"] == pytest.approx(7.0)
    assert "series" not in line
    doc = {
        "date": "d",
        "cpu": "c",
        "cores": 2,
        "python": "p",
        "revision": "r",
        "versions": {},
        "mode": "custom",
        "settings": {
            "connections": 10,
            "warmup": 1.0,
            "seconds": 2.0,
            "rounds": 1,
            "timing": {"ttft_ms": 90.0, "itl_ms": 14.0, "tokens": 128, "prompt_tokens": 400},
        },
        "method": "m",
        "gc_settings": [
            {"name": "cpython", "thresholds": [700, 10, 10], "freeze": False, "note": "n"}
        ],
        "floor": floor,
        "entries": [
            line,
            {"row": "gateway", "setting": "cpython", "status": "skipped", "reason": "no gateway"},
        ],
    }
    table = summary_table(doc)
    assert (
        len(table) == 4 and "| cpython: (700, 10, 10) | proxy | 100 | 1 (timeout 1) |" in table[2]
    )
    md = render_markdown(doc)
    assert "no gateway" in md and "The floor, direct" in md


# the harness, for real ------------------------------------------------------------


@pytest.mark.integration
def test_tiny_table_has_every_line_and_accounts_for_every_stream(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["benchmarks.streams", "--gc-table", "--connections", "30"]
    argv += ["--seconds", "0.5", "--warmup", "0.25", "--tokens", "32", "--rows", "proxy"]
    argv += ["--settings", "cpython,off", "--out", str(out)]
    done = run_bench(tmp_path, *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "streams-gc.json").read_text())
    assert doc["mode"] == "custom" and doc["settings"]["connections"] == 30
    assert doc["floor"]["status"] == "ok" and doc["floor"]["streams_ok"] > 0
    lines = {(r["setting"], r["row"]): r for r in doc["entries"]}
    assert set(lines) == {("cpython", "proxy"), ("off", "proxy")}
    for r in lines.values():
        assert r["status"] == "ok", r.get("reason")
        assert r["streams"] > 0 and r["streams"] == r["streams_ok"] + r["errors"]
        assert r["errors"] == sum(r["errors_by_kind"].values())
        assert {p["process"] for p in r["processes"]} == {"proxy", "stub"}
        f = r["flatgate"]
        assert f["process"] == "proxy" and f["peak_rss_mib"] > 0
        assert f["gc_collections_per_1k_streams"] is not None
        assert set(r["added_duration_ms"]) == {"p50", "p99", "p99.9", "max"}
    assert lines[("off", "proxy")]["flatgate"]["gc_collections_per_1k_streams"] == 0
    md = (out / "streams-gc.md").read_text()
    assert "| cpython: (700, 10, 10) | proxy |" in md and "| off: (0, 10, 10) | proxy |" in md
