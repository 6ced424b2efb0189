"""``make bench``'s harness, run for real in quick mode on tiny inputs.

Checks the shape of what it writes (a row for every format, op and size, every
figure positive or zero and finite, the report and plot present), never a
figure's value: those depend on the machine.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest

from benchmarks import micro
from benchmarks.codecs import FORMATS, LABELS, OPS, cases
from benchmarks.harness.results import RESULTS, is_quick, output_dir
from benchmarks.micro_report import render_markdown

SIZES = {"tiny": 120, "small": 3000}
TINY = micro.Settings(
    min_time=10e-6,
    max_time=0.01,
    min_rounds=3,
    warmup_time=0.001,
    gc_time=0.005,
    gc_min_ops=3,
    gc_max_ops=100_000,
    alloc_time=0.001,
    alloc_min_ops=1,
    alloc_max_ops=20,
    alloc_max_records=4000,
    name="test",
)
POSITIVE = ("ns_per_op", "allocs_per_op", "bytes_per_op")
NON_NEGATIVE = ("gc_per_100k", "gc_time_pct", "py_calls_per_op")
STATS = ("min", "max", "mean", "median", "q1", "q3", "p99", "ops")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench")
    return out, micro.run(SIZES, TINY, out)


def test_writes_every_row_once(run: tuple[Path, dict[str, Any]]) -> None:
    out, doc = run
    on_disk = json.loads((out / "micro.json").read_text(encoding="utf-8"))
    assert on_disk == doc
    keys = [(r["format"], r["op"], r["size"]) for r in doc["rows"]]
    expected = [(f, op, s) for s in SIZES for f, op in cases()]
    assert sorted(keys) == sorted(expected)
    assert len(keys) == len(set(keys))
    # Every format and every op appears somewhere.
    assert {k[0] for k in keys} == set(FORMATS)
    assert {k[1] for k in keys} == set(OPS)


def test_figures_are_positive_and_finite(run: tuple[Path, dict[str, Any]]) -> None:
    _, doc = run
    for row in doc["rows"]:
        where = (row["format"], row["op"], row["size"])
        for key in POSITIVE:
            assert math.isfinite(row[key]) and row[key] > 0, (where, key, row[key])
        for key in NON_NEGATIVE:
            assert math.isfinite(row[key]) and row[key] >= 0, (where, key, row[key])
        for key in STATS:
            value = row["stats"][key]
            assert math.isfinite(value) and value > 0, (where, key, value)
        assert row["stats"]["rounds"] >= TINY.min_rounds
        assert row["stats"]["min"] <= row["ns_per_op"] <= row["stats"]["max"]
        assert TINY.gc_min_ops <= row["gc_ops"] <= TINY.gc_max_ops
        assert row["alloc_ops"] in range(1, TINY.alloc_max_ops + 1)
        assert row["prompt_bytes"] == SIZES[row["size"]]


def test_header_says_what_ran(run: tuple[Path, dict[str, Any]]) -> None:
    _, doc = run
    header = doc["header"]
    assert header["mode"] == "test"
    assert header["sizes"] == SIZES
    assert header["protobuf_backend"] in ("upb", "cpp", "python")
    assert set(header["libraries"]) >= {"flatbuffers", "msgspec", "protobuf", "memray"}
    assert all(header["libraries"].values())
    for key in ("date", "cpu", "python", "method"):
        assert header[key]


def test_report_and_plot(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    md = (out / "micro.md").read_text(encoding="utf-8")
    for label in LABELS.values():
        assert label in md
    for op in OPS:
        assert f"### {op}:" in md
    for section in ("## Summary", "## Targets", "## Caveats", "## Method"):
        assert section in md
    assert (out / "micro.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_flags_a_noisy_run(run: tuple[Path, dict[str, Any]]) -> None:
    _, doc = run
    quiet = {**doc, "header": {**doc["header"], "load_start": 0.1, "load_end": 1.1}}
    noisy = {**doc, "header": {**doc["header"], "load_start": 1.8, "load_end": 2.9}}
    assert "Noisy run" not in render_markdown(quiet)
    assert "Noisy run" in render_markdown(noisy)


def test_parse_sizes() -> None:
    assert micro.parse_sizes("1KB, tiny=200") == {"1KB": 1024, "tiny": 200}
    for bad in ("", "2KB", "tiny=abc", ","):
        with pytest.raises(ValueError):
            micro.parse_sizes(bad)


def test_settings_are_validated() -> None:
    bad_fields: list[dict[str, Any]] = [
        {"max_time": 0},
        {"min_rounds": 0},
        {"gc_min_ops": 5, "gc_max_ops": 4},
    ]
    for bad in bad_fields:
        with pytest.raises(ValueError):
            dataclasses.replace(TINY, **bad)


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown formats: yaml"):
        micro.run(SIZES, TINY, tmp_path, formats=("json", "yaml"))


def test_quick_runs_never_write_to_the_committed_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("BENCH_QUICK", raising=False)
    assert not is_quick(False) and is_quick(True)
    assert output_dir(None, False, "micro") == RESULTS
    assert output_dir(tmp_path / "mine", True, "micro") == tmp_path / "mine"
    quick = output_dir(None, True, "micro")
    assert quick.parent == tmp_path and quick.is_dir()
    monkeypatch.setenv("BENCH_QUICK", "0")
    assert not is_quick(False)
    monkeypatch.setenv("BENCH_QUICK", "1")
    assert is_quick(False)


def test_quick_main_says_where_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the worker's scratch files too
    monkeypatch.setenv("BENCH_QUICK", "1")
    assert micro.main(["--sizes", "tiny=100", "--formats", "msgspec-partial"]) == 0
    out = capsys.readouterr().out
    written = [p for p in tmp_path.iterdir() if p.name.startswith("flatgate-micro-")]
    assert len(written) == 1 and f"wrote {written[0]}/micro." in out
    doc = json.loads((written[0] / "micro.json").read_text(encoding="utf-8"))
    assert doc["header"]["mode"] == "quick"
    assert [(r["format"], r["size"]) for r in doc["rows"]] == [("msgspec-partial", "tiny")]


def test_sites_lists_an_op_by_site(capsys: pytest.CaptureFixture[str]) -> None:
    assert micro.main(["--sites", "flatgate", "route", "--calls", "20"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flatgate route at 1KB, per call:")
    assert "route.py:" in out
