"""Metrics across worker processes (``plumbing.aggregate``): snapshots, their
directory, the merge and its rendering, and ``Metrics`` sharing a directory.

Another "worker" here is a pid that is alive (this process's parent) or gone
(a child that has exited), whose snapshot is written as that worker would."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from flatgate.proxy.plumbing import aggregate
from flatgate.proxy.plumbing.aggregate import (
    ENV_METRICS_DIR,
    Family,
    Sample,
    Snapshot,
    WorkerDir,
    merge,
    render,
    take,
)
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.wire.builders import BuilderPool
from tests.edge import fakes

ALIVE = os.getppid()  # another process that is alive: pytest's parent


@pytest.fixture(autouse=True)
def _no_shared_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_METRICS_DIR, raising=False)


@contextmanager
def no_gc() -> Iterator[None]:
    """No collection while comparing two renderings: the GC figures are in both."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def registry(requests: dict[tuple[str, str], float], active: float = 0.0) -> CollectorRegistry:
    r = CollectorRegistry()
    c = Counter("t_requests", "Requests.", ["route", "status"], registry=r)
    for (route, status), n in requests.items():
        c.labels(route, status).inc(n)
    Gauge("t_active", "Active.", registry=r).set(active)
    return r


def values(text: bytes) -> dict[str, float]:
    """Sample line -> value (``# `` lines dropped)."""
    out = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_one_snapshot_renders_as_its_registry() -> None:
    m = Metrics("flatgate", BuilderPool(), shared_dir="")
    m.count("echo-*", 200)
    m.upstream_ttfb_of("stub").observe(0.003)
    m.upstream_failure_of("stub", "timeout").inc()
    m.active_streams.inc()
    with no_gc():
        assert render(merge([take(m.registry)])) == generate_latest(m.registry)


def test_snapshot_round_trips_and_carries_custom_collectors() -> None:
    m = Metrics("flatgate", BuilderPool(), shared_dir="")
    snap = take(m.registry, pid=123)
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(snap), type=Snapshot)
    assert again == snap and again.pid == 123
    names = {f.name for f in snap.families}
    assert {"flatgate_gc_collections", "flatgate_builder_pool_hits"} <= names


def test_merge_sums_counters_and_gauges_keeping_every_label_set() -> None:
    a = take(registry({("r1", "200"): 3, ("r1", "500"): 1}, active=2), pid=1)
    b = take(registry({("r1", "200"): 2, ("r2", "200"): 5}, active=1), pid=2)
    got = values(render(merge([a, b])))
    assert got['t_requests_total{route="r1",status="200"}'] == 5
    assert got['t_requests_total{route="r1",status="500"}'] == 1
    assert got['t_requests_total{route="r2",status="200"}'] == 5
    assert got["t_active"] == 3


def test_merge_sums_histograms_and_keeps_the_earliest_created() -> None:
    snaps = []
    for pid, observed in ((1, [0.1, 2.0]), (2, [0.1, 0.5, 9.0])):
        r = CollectorRegistry()
        h = Histogram("t_seconds", "Time.", ["backend"], buckets=(0.2, 1.0), registry=r)
        for v in observed:
            h.labels("b").observe(v)
        snaps.append(take(r, pid=pid))
    got = values(render(merge(snaps)))
    assert got['t_seconds_bucket{backend="b",le="0.2"}'] == 2
    assert got['t_seconds_bucket{backend="b",le="1.0"}'] == 3
    assert got['t_seconds_bucket{backend="b",le="+Inf"}'] == 5
    assert got['t_seconds_count{backend="b"}'] == 5
    assert got['t_seconds_sum{backend="b"}'] == pytest.approx(11.7)
    created = [
        s.value for snap in snaps for f in snap.families for s in f.samples if "created" in s.name
    ]
    assert got['t_seconds_created{backend="b"}'] == min(created)


def test_merge_leaves_out_a_family_of_another_type() -> None:
    gauge = Family("t_x", "gauge", "X.", "", [Sample("t_x", {}, 1.0)])
    counter = Family("t_x", "counter", "X.", "", [Sample("t_x_total", {}, 5.0)])
    [metric] = merge([Snapshot(1, [gauge]), Snapshot(2, [counter]), Snapshot(3, [gauge])])
    assert metric.type == "gauge" and [s.value for s in metric.samples] == [2.0]


def test_worker_dir_reads_live_workers_and_removes_gone_ones(tmp_path: Path) -> None:
    me = WorkerDir(str(tmp_path))
    me.write(take(registry({("r", "200"): 1}), me.pid))
    other = WorkerDir(str(tmp_path), ALIVE)
    other.write(take(registry({("r", "200"): 4}), ALIVE))
    dead = gone_pid()
    WorkerDir(str(tmp_path), dead).write(take(registry({("r", "200"): 100}), dead))
    (tmp_path / f".{dead}.tmp").write_bytes(b"half")
    (tmp_path / "notes.snap").write_bytes(b"x")
    for odd in ("0.snap", "007.snap", "\u00b2.snap", "12345678901.snap", "1.snap.tmp"):
        (tmp_path / odd).write_bytes(b"x")
    found = me.others()
    assert [s.pid for s in found] == [ALIVE]  # not this worker's own, not the dead one's
    assert not (tmp_path / f"{dead}.snap").exists()
    assert not (tmp_path / f".{dead}.tmp").exists()
    assert (tmp_path / f"{ALIVE}.snap").exists() and (tmp_path / "notes.snap").exists()


def test_worker_dir_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    me = WorkerDir(str(tmp_path))
    for n in range(3):
        me.write(take(registry({("r", "200"): n}), me.pid))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{me.pid}.snap"]


def bad_snapshots() -> list[tuple[str, bytes]]:
    good = msgspec.msgpack.encode(take(registry({("r", "200"): 1}), ALIVE))
    odd = [
        Family("t x", "gauge", "X.", "", []),  # not a metric name
        Family("t_x", "weird", "X.", "", []),  # not a type
        Family("t_x", "gauge", "X.", "", [Sample("other", {}, 1.0)]),  # not its sample
        Family("t_x", "gauge", "X.", "", [Sample("t_x", {"a-b": "1"}, 1.0)]),  # label name
        Family("t_x", "gauge", "X.", "seconds", []),  # unit not in the name
    ]
    return [
        ("garbage", b"\x00\xffnot msgpack at all"),
        ("torn", good[: len(good) // 2]),
        ("empty", b""),
        ("wrong type", msgspec.msgpack.encode({"pid": ALIVE})),
        ("another pid", msgspec.msgpack.encode(take(registry({}), ALIVE + 1))),
        *(
            (f"bad family {i}", msgspec.msgpack.encode(Snapshot(ALIVE, [f])))
            for i, f in enumerate(odd)
        ),
    ]


@pytest.mark.parametrize(("what", "data"), bad_snapshots(), ids=[w for w, _ in bad_snapshots()])
def test_a_file_that_is_no_snapshot_is_left_out(tmp_path: Path, what: str, data: bytes) -> None:
    (tmp_path / f"{ALIVE}.snap").write_bytes(data)
    assert WorkerDir(str(tmp_path)).others() == []
    assert (tmp_path / f"{ALIVE}.snap").exists()  # its worker is alive: not removed


def test_an_oversized_file_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    WorkerDir(str(tmp_path), ALIVE).write(take(registry({("r", "200"): 1}), ALIVE))
    assert len(WorkerDir(str(tmp_path)).others()) == 1
    monkeypatch.setattr(aggregate, "MAX_SNAPSHOT_BYTES", 16)
    assert WorkerDir(str(tmp_path)).others() == []


def test_render_without_a_shared_dir_is_this_workers_registry() -> None:
    m = Metrics("flatgate")
    m.count("r", 200)
    with no_gc():
        assert m.render() == generate_latest(m.registry)
    assert b"flatgate_workers" not in m.render()


def test_render_sums_every_live_worker_and_shares_its_own_first(tmp_path: Path) -> None:
    m = Metrics("flatgate", BuilderPool(), shared_dir=str(tmp_path))
    other = Metrics("flatgate", BuilderPool(), shared_dir="")
    for _ in range(3):
        other.count("echo-*", 200)
    other.count("exact", 500)
    WorkerDir(str(tmp_path), ALIVE).write(take(other.registry, ALIVE))
    dead = gone_pid()
    WorkerDir(str(tmp_path), dead).write(take(other.registry, dead))
    m.count("echo-*", 200)
    got = values(m.render())
    assert got['flatgate_requests_total{route="echo-*",status="200"}'] == 4
    assert got['flatgate_requests_total{route="exact",status="500"}'] == 1
    assert got["flatgate_workers"] == 2
    # What this scrape showed of this worker is on disk already, for the next
    # scrape whichever worker answers it.
    m.count("echo-*", 200)
    [mine] = WorkerDir(str(tmp_path), ALIVE).others()
    shown = {(s.name, tuple(s.labels.values())): s.value for f in mine.families for s in f.samples}
    assert shown["flatgate_requests_total", ("echo-*", "200")] == 1


def test_render_reads_the_directory_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_METRICS_DIR, str(tmp_path))
    m = Metrics("flatgate_edge")
    assert values(m.render())["flatgate_edge_workers"] == 1
    assert (tmp_path / f"{os.getpid()}.snap").exists()


def test_render_goes_on_when_the_directory_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    m = Metrics("flatgate", shared_dir=str(tmp_path / "gone"))
    m.count("r", 200)
    for _ in range(2):
        got = values(m.render())
        assert got['flatgate_requests_total{route="r",status="200"}'] == 1
        assert got["flatgate_workers"] == 1
    assert len([r for r in caplog.records if "cannot share" in r.message]) == 1


async def test_install_writes_a_snapshot_now_and_then_periodically(tmp_path: Path) -> None:
    m = Metrics("flatgate", shared_dir=str(tmp_path), snapshot_seconds=0.01)
    reader = WorkerDir(str(tmp_path), ALIVE)
    loop = asyncio.get_running_loop()
    m.install(loop)
    m.install(loop)  # once per worker
    await asyncio.sleep(0)
    [first] = reader.others()
    assert first.pid == os.getpid()
    m.count("r", 200)
    await asyncio.sleep(0.1)
    [later] = reader.others()
    assert later != first
    m.stop()
    m.count("r", 200)
    stopped = reader.others()
    await asyncio.sleep(0.05)
    assert reader.others() == stopped


async def test_install_without_a_directory_schedules_nothing() -> None:
    m = Metrics("flatgate")
    m.install(asyncio.get_running_loop())
    assert m._timer is None


async def test_server_app_installs_the_metrics_once(tmp_path: Path) -> None:
    m = Metrics("flatgate", shared_dir=str(tmp_path), snapshot_seconds=60)

    async def ok(ex: object) -> None:
        await ex.respond(200, [], b"ok")  # type: ignore[attr-defined]

    app = ServerApp(ok, metrics=m)
    app.__rsgi_init__(asyncio.get_running_loop())
    await app.__rsgi__(fakes.Scope("GET", "/"), fakes.Protocol())
    await asyncio.sleep(0)
    assert (tmp_path / f"{os.getpid()}.snap").exists()
    m.stop()
