"""``/metrics`` of a server with two worker processes answers for both, whichever
worker a scrape reaches (``plumbing.aggregate``).

granian balances connections, not requests: every request here is on a
connection of its own, several at a time, so both workers serve some. The
server's snapshot directory is made under the ``TMPDIR`` the test gives it, so
the test can read each worker's own snapshot, and see the directory go at exit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import msgspec
import pytest

from flatgate.proxy.plumbing.aggregate import SNAPSHOT_SECONDS, Snapshot
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES
from tests.servers import Server, running
from tests.stacks import write_stack

pytestmark = pytest.mark.integration

BATCH = 16
MAX_REQUESTS = 640
SCRAPES = 8


def sum_of(text: str, name: str, route: str | None = None) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith((f"{name} ", f"{name}{{")) and (route is None or route in line):
            total += float(line.rpartition(" ")[2])
    return total


def send_until_both_serve(send: Callable[[], str | None]) -> tuple[int, set[str]]:
    """Send batches of concurrent requests, each on a new connection, until two
    workers are seen (``send`` returns who served, or ``None`` if it cannot
    tell) or ``MAX_REQUESTS``; the requests sent and the workers seen."""
    sent, seen = 0, set()
    with ThreadPoolExecutor(8) as pool:
        while sent < MAX_REQUESTS:
            seen |= {w for w in pool.map(lambda _: send(), range(BATCH)) if w is not None}
            sent += BATCH
            if len(seen) >= 2:
                break
    return sent, seen


def snapshots(tmp: Path, prefix: str) -> dict[int, float]:
    """Each worker's own ``{prefix}_requests_total`` from its snapshot file."""
    return worker_samples(tmp, f"{prefix}_requests", f"{prefix}_requests_total")


def worker_samples(tmp: Path, family: str, sample: str) -> dict[int, float]:
    """Each worker's own ``sample`` of ``family`` (summed over its labels),
    from its snapshot file."""
    [shared] = tmp.glob("flatgate-*-metrics-*")
    out = {}
    for path in shared.glob("*.snap"):
        snap = msgspec.msgpack.decode(path.read_bytes(), type=Snapshot)
        out[snap.pid] = sum(
            s.value
            for f in snap.families
            if f.name == family
            for s in f.samples
            if s.name == sample
        )
    return out


def scrape_every_time(server: Server, prefix: str, expected: int, route: str | None) -> None:
    # Another worker's figures are at most one snapshot interval old.
    time.sleep(SNAPSHOT_SECONDS * 1.5)
    for _ in range(SCRAPES):
        r = httpx.get(f"{server.url}/metrics", headers={"connection": "close"}, timeout=10)
        assert r.status_code == 200
        assert sum_of(r.text, f"{prefix}_requests_total", route) == expected, r.text
        assert sum_of(r.text, f"{prefix}_workers") == 2


def test_proxy_metrics_sum_both_workers(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with running("stub", ["--workers", "1"], tmp_path) as stub:
        cfg = write_stack(
            tmp_path / "proxy.toml", backends={"stub": stub.url}, routes={"echo-*": "stub"}
        )
        args = ["--config", cfg, "--workers", "2"]
        with running("proxy", args, tmp_path, env={"TMPDIR": str(tmp)}) as proxy:
            body = build_request("echo-1", [("user", "hello workers")])

            def send() -> str | None:
                r = httpx.post(
                    f"{proxy.url}/v1/completions",
                    content=body,
                    headers={"content-type": FLATBUFFERS, "accept": FRAMES},
                    timeout=10,
                )
                assert r.status_code == 200, r.content
                return r.headers["x-request-id"].split("-")[1]  # fg-<pid>-<n>

            sent, pids = send_until_both_serve(send)
            assert len(pids) == 2, f"one worker served all {sent} requests"
            scrape_every_time(proxy, "flatgate", sent, None)
            per_worker = snapshots(tmp, "flatgate")
            assert {str(pid) for pid in per_worker} == pids
            assert sum(per_worker.values()) == sent and all(per_worker.values())
    assert not list(tmp.glob("flatgate-*-metrics-*"))  # gone with the server


def test_edge_metrics_sum_both_workers(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # /v1/models needs no proxy (and no key: the default config has none).
    args = ["--workers", "2", "--proxy-url", "http://127.0.0.1:9"]
    with running("edge", args, tmp_path, env={"TMPDIR": str(tmp)}) as edge:

        def send() -> None:
            r = httpx.get(f"{edge.url}/v1/models", timeout=10)
            assert r.status_code == 200

        def both_served() -> bool:
            return len([n for n in snapshots(tmp, "flatgate_edge").values() if n]) == 2

        sent = 0
        with ThreadPoolExecutor(8) as pool:
            while sent < MAX_REQUESTS:
                list(pool.map(lambda _: send(), range(BATCH)))
                sent += BATCH
                time.sleep(SNAPSHOT_SECONDS * 1.5)
                if both_served():
                    break
        assert both_served(), f"one worker served all {sent} requests"
        scrape_every_time(edge, "flatgate_edge", sent, 'route="/v1/models"')
    assert not list(tmp.glob("flatgate-*-metrics-*"))
