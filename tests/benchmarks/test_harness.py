"""The harness every bench shares (``benchmarks.harness``), and the tests' servers.

Pure pieces directly: percentiles and the figures of the tables, the
comma-separated options, the config a run's servers read, nginx's, GC and
gauge parsing, the result files and the plot. Then, with short child
processes: the ``/proc`` readings of a process tree, a server stopped with
its whole process group, one that exits early, and the sampling thread.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from benchmarks.harness.plot import Panel, Series, timeseries
from benchmarks.harness.report import head_facts, num, percentile, signed, times
from benchmarks.harness.results import names, write_results
from benchmarks.harness.sampling import (
    GcSample,
    Ticker,
    cpu_seconds,
    parse_gc,
    peak_rss_kib,
    tree_pids,
    usage,
)
from benchmarks.harness.servers import (
    ServerGroup,
    find_tool,
    gateway_config,
    nginx_config,
    start,
)
from flatgate.proxy.service.settings import config_problems
from tests.tools import needed

PNG = b"\x89PNG\r\n\x1a\n"

# report and results ----------------------------------------------------------------


def test_percentile_nearest_rank() -> None:
    values = [float(x) for x in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 99.9) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0
    assert percentile([i / 1000 for i in range(1, 1001)], 99.9) == 0.999  # not 1.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_figures_as_the_tables_show_them() -> None:
    assert num(1234.5678, 1) == "1,234.6" and num(2056) == "2,056" and num(0.4) == "0"
    assert num(None) == num(math.nan) == signed(None) == times(None) == "-"
    assert signed(0.25, 3) == "+0.250" and signed(-1.26) == "-1.3"
    assert times(1.5) == "1.50x" and num(50.0, 0, "%") == "50%"
    doc = {"date": "d", "cpu": "c", "cores": 2, "python": "p", "versions": {"x": "1"}}
    assert dict(head_facts(doc)) == {
        "date": "d",
        "machine": "c, 2 cores",
        "python": "p",
        "source": "unknown",
        "versions": "x 1",
    }


def test_names_are_checked_against_what_is_known() -> None:
    assert names(" a, b,,") == ("a", "b")
    assert names("a", ["a", "b"], "rows") == ("a",)
    with pytest.raises(SystemExit, match=r"unknown rows: c \(known: a, b\)"):
        names("a,c", ["a", "b"], "rows")


def test_results_are_json_markdown_and_a_plot(tmp_path: Path) -> None:
    def draw(path: Path) -> None:
        path.write_bytes(PNG)

    paths = write_results(tmp_path / "out", "x", {"a": 1}, "# x\n", draw)
    assert [p.name for p in paths] == ["x.json", "x.md", "x.png"]
    assert paths[0].read_text() == '{\n "a": 1\n}\n' and paths[1].read_text() == "# x\n"
    assert [p.name for p in write_results(tmp_path, "y", {}, "")] == ["y.json", "y.md"]


def test_timeseries_draws_gaps_markers_and_shades(tmp_path: Path) -> None:
    nan = math.nan
    panels = [
        Panel("a", [Series("s", [(0, 1), (1, nan), (2, 3), (3, 4)]), Series("lone", [(1, 2)])]),
        Panel("empty", []),
    ]
    path = tmp_path / "t.png"
    timeseries(
        panels, path, title="t", x_label="x", markers=[(1.5, "restart")], shades=[(0, 0.5, "w")]
    )
    assert path.read_bytes()[:8] == PNG


# servers ----------------------------------------------------------------------------


def test_gateway_config_is_what_every_service_reads() -> None:
    text = gateway_config(
        {"a": ("http://127.0.0.1:1", "fbs"), "b": ("http://127.0.0.1:2/v1", "openai")},
        {"m": ["a"], "*": ["a", "b"]},
        {"m": "OpenAI"},
        before="[proxy]\npool_limit = 4\n",
    )
    doc = tomllib.loads(text)
    assert config_problems(doc, environ={}) == []
    assert doc["proxy"] == {"pool_limit": 4} and doc["edge"] == {"host": "127.0.0.1"}
    assert [r["model"] for r in doc["routes"]] == ["m", "*"]  # in order
    assert doc["routes"][1]["backends"] == ["a", "b"]
    assert doc["backends"][1] == {"name": "b", "url": "http://127.0.0.1:2/v1", "protocol": "openai"}
    assert doc["models"] == [{"name": "m", "provider": "OpenAI"}]


def test_find_tool_honours_without() -> None:
    assert find_tool("sh") is not None
    assert find_tool("sh", without=("sh",)) is None
    assert find_tool("no-such-tool-flatgate") is None


def test_nginx_config_is_loopback_unbuffered_keepalive(tmp_path: Path) -> None:
    conf = nginx_config(tmp_path, 18001, 18002)
    assert "listen 127.0.0.1:18001;" in conf
    assert "server 127.0.0.1:18002;" in conf
    assert "proxy_buffering off;" in conf and "keepalive 256;" in conf
    assert "proxy_http_version 1.1;" in conf and "worker_processes 1;" in conf
    assert f"pid {tmp_path}/nginx.pid;" in conf and "daemon off;" in conf


def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_config(tmp_path, 18001, 18002))
    nginx = needed("nginx")
    done = subprocess.run(
        [nginx, "-t", "-c", str(conf), "-p", str(tmp_path), "-e", str(tmp_path / "e.log")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    # A leader that ignores SIGINT, with a child: both must go.
    code = "import signal, subprocess, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    code += "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    code += "print('up', flush=True)\ntime.sleep(60)\n"
    server = start("sleeper", [sys.executable, "-c", code], 1, tmp_path / "s.log")
    deadline = time.monotonic() + 10
    while "up" not in server.log_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = tree_pids(server.proc.pid)
    assert len(pids) == 2 and os.getpgid(pids[1]) == server.proc.pid
    server.stop(grace=0.5)
    deadline = time.monotonic() + 5  # SIGKILL is delivered at once, but not reaped at once
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.alive() and not any(_alive(pid) for pid in pids)


def test_a_server_that_exits_early_says_so_with_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('no config'); raise SystemExit(3)"]
    group = ServerGroup(tmp_path)
    server = group.spawn("broken", argv, 1)
    with pytest.raises(RuntimeError, match="broken exited early:\nno config"):
        server.wait_healthy(10)
    assert "exited early: no config" in group.wait_healthy(10)["broken"]
    group.stop_all()


# sampling ---------------------------------------------------------------------------


def test_parse_gc_sums_generations() -> None:
    text = (
        "# HELP flatgate_gc_collections_total Python GC collections, by generation.\n"
        'flatgate_gc_collections_total{generation="0"} 120.0\n'
        'flatgate_gc_collections_total{generation="1"} 10.0\n'
        'flatgate_gc_collections_total{generation="2"} 1.0\n'
        'flatgate_gc_pause_seconds_total{generation="0"} 0.012\n'
        'flatgate_gc_pause_seconds_total{generation="2"} 0.5\n'
        'flatgate_requests_total{route="*",status="200"} 5.0\n'
    )
    got = parse_gc(text)
    assert got == GcSample((120.0, 10.0, 1.0), (0.012, 0.0, 0.5))
    assert got.total_collections == 131.0 and got.total_pause == pytest.approx(0.512)
    edge = parse_gc('flatgate_edge_gc_collections_total{generation="1"} 4.0\n')
    assert edge is not None and edge.collections == (0.0, 4.0, 0.0)
    assert parse_gc("flatgate_requests_total 1\n") is None


def test_gc_of_one_process_counted_once() -> None:
    # The one-process gateway: the edge's and the proxy's metrics count one process.
    page = "\n".join(
        [
            'flatgate_gc_collections_total{generation="0"} 5',
            'flatgate_gc_collections_total{generation="1"} 1',
            'flatgate_gc_pause_seconds_total{generation="0"} 0.5',
            'flatgate_edge_gc_collections_total{generation="0"} 6',
            'flatgate_edge_gc_pause_seconds_total{generation="0"} 0.25',
        ]
    )
    got = parse_gc(page)
    assert got is not None and (got.total_collections, got.total_pause) == (6.0, 0.5)
    assert parse_gc("nothing here") is None


def test_tree_readings_cover_children() -> None:
    # A parent that spins a child burning CPU and holding ~40 MB.
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', "
        '\'import time\\nx = bytearray(40 << 20)\\nx[::4096] = b"1" * len(x[::4096])\\n'
        "t = time.process_time()\\nwhile time.process_time() - t < 0.3: pass\\n"
        "time.sleep(30)'])\n"
        "print('ok', flush=True)\n"
        "c.wait()\n"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) as proc:
        pids = [proc.pid]
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == b"ok"
            deadline = time.monotonic() + 10
            while cpu_seconds(tree_pids(proc.pid)) < 0.25 and time.monotonic() < deadline:
                time.sleep(0.05)
            pids = tree_pids(proc.pid)
            assert len(pids) == 2 and pids[0] == proc.pid
            assert cpu_seconds(pids) >= 0.25  # the child's CPU counts
            assert peak_rss_kib(pids) >= 40 << 10  # the child's peak, in KiB
        finally:
            for pid in reversed(pids):
                os.kill(pid, 9)


def test_usage_splits_the_cpu_and_counts_page_faults() -> None:
    code = "import time\nx = bytearray(16 << 20)\nt = time.process_time()\n"
    code += "while time.process_time() - t < 0.3: pass\ntime.sleep(30)\n"
    with subprocess.Popen([sys.executable, "-c", code]) as proc:
        try:
            deadline = time.monotonic() + 10
            while cpu_seconds([proc.pid]) < 0.25 and time.monotonic() < deadline:
                time.sleep(0.05)
            use = usage([proc.pid])  # (process_time() is a system call: both count)
            assert use.user > 0 and use.system >= 0 and use.user + use.system >= 0.25
            total = cpu_seconds([proc.pid])
            assert use.user + use.system == pytest.approx(total, abs=0.05)
            assert use.minor_faults >= (16 << 20) // 4096  # the bytearray's pages, zeroed
        finally:
            proc.kill()


def test_ticker_takes_ticks_and_marks_and_outlives_a_failure() -> None:
    taken: list[tuple[str, float]] = []
    errors: list[Exception] = []
    done = threading.Event()

    def take(mark: str) -> None:
        taken.append((mark, time.monotonic() - ticker.t0))
        if len(taken) == 2:
            raise RuntimeError("a failed sample")
        if len(taken) >= 5:
            done.set()

    ticker = Ticker(take, 0.05, marks={"from": 0.07}, on_error=errors.append)
    ticker.start()
    assert done.wait(5)
    ticker.stop(timeout=5)
    marks = [m for m, _ in taken]
    assert marks[:4] == ["", "", "from", ""]  # 0, 0.05, 0.07, 0.10
    assert ticker.failed == 1 and [str(e) for e in errors] == ["a failed sample"]
    assert all(t >= at - 0.01 for (_, t), at in zip(taken, (0, 0.05, 0.07, 0.10), strict=False))
    with pytest.raises(ValueError):
        Ticker(take, 0)
