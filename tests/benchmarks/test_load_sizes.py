"""The load bench's sizes: the 1 MB row of the full run, and CPU per request by size.

The full run has a 1 MB prompt (one round, its own fixed rate), nginx keeps
such a body in memory, and the report sets every row's CPU per request at
128 KB and 1 MB against its 1 KB figure, with the targets of the proxy rows.
Pure: nothing is started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness.servers import nginx_config
from benchmarks.load.measure import FULL, QUICK
from benchmarks.load.report import cpu_by_size, per_kb_note, render_markdown, targets
from benchmarks.load.results import Cell, summarise
from benchmarks.load.rows import ROWS
from benchmarks.payloads import PROMPT_SIZES

ROW = {r.name: r for r in ROWS}


def test_full_run_has_a_1mb_row_of_one_round_at_its_own_rate() -> None:
    assert FULL.sizes == ("1KB", "16KB", "128KB", "1MB")
    assert all(size in PROMPT_SIZES for size in FULL.sizes)
    assert FULL.rounds["1MB"] == 1 and FULL.rounds["128KB"] == 1
    assert FULL.rates["1MB"] < FULL.rates["128KB"]
    assert "1MB" not in QUICK.sizes  # the quick run stays under its two minutes


def test_nginx_holds_a_1mb_body_in_memory(tmp_path: Path) -> None:
    conf = nginx_config(tmp_path, 18001, 18002)
    assert "client_body_buffer_size 2m;" in conf and "client_max_body_size 8m;" in conf


def _row(name: str, size: str, hop_us: float, stub_us: float, body: int) -> dict[str, Any]:
    """A row at ``size`` whose hop spends ``hop_us`` per request (a fifth of it
    in the kernel) and takes as many page faults, its stub ``stub_us`` (and
    one fault), over 1,000 requests."""
    cell = Cell(rps=[1000.0], requests=1000, latencies=[[0.001] * 10], rate=100.0)
    hop = ROW[name].hop
    cell.cpu_seconds = {"stub": stub_us / 1000, **dict.fromkeys(hop, hop_us / 1000)}
    cell.sys_seconds = {"stub": stub_us / 5000, **dict.fromkeys(hop, hop_us / 5000)}
    cell.minor_faults = {"stub": 1000, **dict.fromkeys(hop, int(hop_us) * 1000)}
    return summarise(ROW[name], size, cell, body)


def _doc() -> dict[str, Any]:
    bodies = {"1KB": 2048, "128KB": 132_000, "1MB": 1_049_624}
    figures = {
        "direct": {"1KB": (0, 30), "128KB": (0, 90), "1MB": (0, 480)},
        "proxy-rsgi": {"1KB": (100, 60), "128KB": (140, 80), "1MB": (500, 350)},
        "proxy-asgi": {"1KB": (100, 60), "128KB": (200, 80), "1MB": (1000, 350)},
        "nginx": {"1KB": (16, 35), "128KB": (45, 90), "1MB": (410, 410)},
    }
    rows = [
        _row(name, size, hop, stub, bodies[size])
        for name, by_size in figures.items()
        for size, (hop, stub) in by_size.items()
    ]
    return {
        "date": "d",
        "cpu": "c",
        "cores": 2,
        "platform": "p",
        "python": "py",
        "versions": {},
        "mode": "custom",
        "method": "m",
        "settings": {"sizes": ["1KB", "128KB", "1MB"], "rates": {}},
        "rows": rows,
        "streaming": [],
    }


def test_cpu_by_size_sets_each_row_against_its_1kb_figure() -> None:
    doc = _doc()
    r = summarise(ROW["proxy-rsgi"], "1MB", Cell(requests=1), 1)
    assert "sys_us_per_req" in r
    table = cpu_by_size(doc)
    assert len(table) == 2 + 4
    by = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert by["direct"].startswith("| direct | 30 | 90 | 480 | 3.00x | 16.00x |")
    assert by["proxy-rsgi"].startswith("| proxy-rsgi | 100 | 140 | 500 | 1.40x | 5.00x |")
    assert "| 20% | 500 | 60 / 350 |" in by["proxy-rsgi"]  # the kernel's fifth; the stub behind
    # (500 - 100) µs over (1,049,624 - 2,048) bytes
    assert f"| {400 / ((1_049_624 - 2048) / 1024):.3f} |" in by["proxy-rsgi"]
    note = " ".join(per_kb_note(doc))
    assert "proxy-rsgi 0.391 µs" in note and "nginx, which receives it" in note
    assert "proxy-rsgi 20% and 500; nginx 20% and 410" in note
    md = render_markdown(doc)
    assert "## CPU per request by prompt size" in md


def test_targets_report_the_cpu_ratios_of_the_proxy_rows() -> None:
    lines = [x for x in targets(_doc()) if "CPU per request against" in x]
    assert lines == [
        "- proxy-rsgi CPU per request against its 100 µs at 1 KB: 140 µs at 128KB, 1.40x "
        "(target <= 1.5x: met); 500 µs at 1MB, 5.00x (target <= 4x: missed).",
        "- proxy-asgi CPU per request against its 100 µs at 1 KB: 200 µs at 128KB, 2.00x "
        "(target <= 1.5x: missed); 1,000 µs at 1MB, 10.00x (target <= 4x: missed).",
    ]


def test_no_size_table_without_a_larger_size() -> None:
    doc = _doc()
    doc["settings"]["sizes"] = ["1KB"]
    assert cpu_by_size(doc) == [] and per_kb_note(doc) == []
