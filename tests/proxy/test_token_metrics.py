"""Time to first token, time per output token and output tokens on ``/metrics``.

A real proxy with two workers before the stub, which paces its deltas
(``ttft_ms``, then ``itl_ms`` after each): streams and whole answers through
a pattern route, until both workers have served some; then one scrape sums
both workers' histograms (``plumbing.aggregate``), labelled by the route's
model name (never the caller's) and the backend. Sums are bounded below by
the stub's pacing and above generously: nothing here is timed.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import httpx
import pytest

from flatgate.proxy.plumbing.aggregate import SNAPSHOT_SECONDS
from flatgate.proxy.plumbing.metrics import TTFT_BUCKETS
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES
from tests.lifecycle.test_workers_scrape import send_until_both_serve, sum_of, worker_samples
from tests.servers import running
from tests.stacks import QUIET, write_stack, write_stub

pytestmark = pytest.mark.integration

TTFT_MS = 30
ITL_MS = 10
WORDS = "one two three four five"
TOKENS = len(WORDS.split())  # the stub's echo: a delta per word
LABELS = 'backend="stub",model="echo-*"'
TTFT = "flatgate_time_to_first_token_seconds"
TPOT = "flatgate_time_per_output_token_seconds"
OUTPUT = "flatgate_output_tokens_total"
# Generous: a loaded machine is slow, never faster than the stub's sleeps.
MAX_SECONDS = 30.0


def worker_counts(tmp: Path) -> dict[int, float]:
    """Each worker's own time-to-first-token count, from its snapshot file."""
    return worker_samples(tmp, TTFT, f"{TTFT}_count")


def test_token_histograms_sum_both_workers(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    stub_cfg = write_stub(tmp_path / "stub.toml", ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    with running("stub", ["--config", stub_cfg, "--workers", "1"], tmp_path) as stub:
        cfg = write_stack(
            tmp_path / "proxy.toml",
            proxy=QUIET,  # the figures must not depend on the access log
            backends={"stub": stub.url},
            routes={"echo-*": "stub"},
        )
        args = ["--config", cfg, "--workers", "2"]
        with running("proxy", args, tmp_path, env={"TMPDIR": str(tmp)}) as proxy:
            streamed = build_request("echo-1", [("user", WORDS)])
            whole = build_request("echo-2", [("user", WORDS)], stream=False)
            order = itertools.count()  # next() is atomic: send runs on 8 threads

            def post(body: bytes) -> httpx.Response:
                return httpx.post(
                    f"{proxy.url}/v1/completions",
                    content=body,
                    headers={"content-type": FLATBUFFERS, "accept": FRAMES},
                    timeout=MAX_SECONDS,
                )

            def send() -> str | None:
                # Alternate: the even ones streamed, the odd ones whole.
                r = post(whole if next(order) % 2 else streamed)
                assert r.status_code == 200, r.content
                return r.headers["x-request-id"].split("-")[1]  # fg-<pid>-<n>

            sent, pids = send_until_both_serve(send)
            assert len(pids) == 2, f"one worker served all {sent} requests"
            # Not answered: no route, so no figures (and no label of its own).
            assert post(build_request("unrouted", [("user", WORDS)])).status_code == 404

            # Another worker's figures are at most one snapshot interval old.
            time.sleep(SNAPSHOT_SECONDS * 1.5)
            r = httpx.get(f"{proxy.url}/metrics", headers={"connection": "close"}, timeout=10)
            assert r.status_code == 200
            text = r.text
            per_worker = worker_counts(tmp)

    assert sum_of(text, "flatgate_workers") == 2
    streams = (sent + 1) // 2
    assert next(order) == sent and sent - streams > 0

    # Labels: the route's model name and the backend, never the caller's.
    assert f"{TTFT}_count{{{LABELS}}}" in text, text
    assert 'model="echo-1"' not in text and 'model="echo-2"' not in text
    assert "unrouted" not in text

    # Time to first token: every answer, streamed or whole; each at least
    # the stub's ttft_ms.
    assert sum_of(text, f"{TTFT}_count", LABELS) == sent
    ttft_sum = sum_of(text, f"{TTFT}_sum", LABELS)
    assert sent * TTFT_MS / 1000 <= ttft_sum <= sent * MAX_SECONDS
    buckets = [line for line in text.splitlines() if line.startswith(f"{TTFT}_bucket")]
    assert len(buckets) == len(TTFT_BUCKETS) + 1  # and +Inf
    below = f'le="{TTFT_BUCKETS[1]}"'  # 10 ms, under the stub's 30
    assert sum_of(text, f"{TTFT}_bucket", below) == 0
    assert sum_of(text, f"{TTFT}_bucket", 'le="+Inf"') == sent

    # Time per output token: streams only, each at least itl_ms (the stub
    # sleeps that long after every delta).
    assert sum_of(text, f"{TPOT}_count", LABELS) == streams
    tpot_sum = sum_of(text, f"{TPOT}_sum", LABELS)
    assert streams * ITL_MS / 1000 <= tpot_sum <= streams * MAX_SECONDS

    # Output tokens: every answer's, from the backend's usage.
    assert sum_of(text, OUTPUT, LABELS) == sent * TOKENS

    # One scrape summed both workers' histograms.
    assert {str(pid) for pid in per_worker} == pids
    assert sum(per_worker.values()) == sent and all(per_worker.values())


def test_the_gateway_shows_its_routers_token_figures(tmp_path: Path) -> None:
    stub_cfg = write_stub(tmp_path / "stub.toml", ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    with running("stub", ["--config", stub_cfg], tmp_path) as stub:
        cfg = write_stack(
            tmp_path / "gateway.toml",
            proxy=QUIET,
            backends={"stub": stub.url},
            routes={"echo-*": "stub"},
            edge=QUIET,
            models={"echo-1": "SelfHosted"},
        )
        with running("gateway", ["--config", cfg], tmp_path) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            ask = {"model": "echo-1", "messages": [{"role": "user", "content": WORDS}]}
            for stream in (True, False):
                r = httpx.post(url, json={**ask, "stream": stream}, timeout=MAX_SECONDS)
                assert r.status_code == 200, r.content
            text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    assert sum_of(text, f"{TTFT}_count", LABELS) == 2, text
    assert 2 * TTFT_MS / 1000 <= sum_of(text, f"{TTFT}_sum", LABELS) <= 2 * MAX_SECONDS
    assert sum_of(text, f"{TPOT}_count", LABELS) == 1
    assert ITL_MS / 1000 <= sum_of(text, f"{TPOT}_sum", LABELS) <= MAX_SECONDS
    assert sum_of(text, OUTPUT, LABELS) == 2 * TOKENS
