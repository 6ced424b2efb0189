"""The soak test (``benchmarks.soak``): its accounting, its verdict, its report.

Pure pieces are tested directly: the mix and the outcome buckets, the
verdict over made-up samples (flat passes, a leak fails, a lost request
fails), Prometheus and ``/stats`` parsing, the config (every edge model has a
route), the plot. The client's classification runs against a fake edge on a
loopback port that answers each way a gateway can. The harness itself runs
once in quick mode (600 requests, a sample a second, the backend restart) in
a subprocess: every request must get a defined outcome, the outcomes must add
up, and the results must be written where ``--out`` says; SIGTERM stops every
server it started. Figures are not asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchmarks.harness.sampling import parse_gauges, requests_by_status
from benchmarks.soak import report
from benchmarks.soak.report import checks, not_rising, plot, render_markdown, rss_flat
from benchmarks.soak.run import Settings, config_text, main
from benchmarks.soak.sampler import GAUGES
from benchmarks.soak.traffic import (
    MIX,
    UNDEFINED,
    Kind,
    Outcome,
    exchange,
    http_bucket,
    is_defined,
    plan,
    prompt,
)
from flatgate.edge_translator.settings import edge_problems
from flatgate.proxy.backends.dialect import split_model
from flatgate.proxy.service.settings import config_problems, unrouted_models
from flatgate.proxy.stub.settings import stub_problems
from flatgate.proxy.transport.fast import PoolTransport
from tests.benchmarks.runs import ROOT, bench_env, leftover_pids, leftovers, run_bench

PNG = b"\x89PNG\r\n\x1a\n"
ACCOUNTING = (
    "every request sent",
    "outcomes add up",
    "every outcome defined",
    "the edge counted every request",
    "backend restarted",
)

# the mix and the buckets ---------------------------------------------------------


def test_mix_weights_are_per_thousand_and_names_unique() -> None:
    assert sum(k.weight for k in MIX) == 1000
    assert len({k.name for k in MIX}) == len(MIX)
    for k in MIX:
        assert is_defined(k.expect), k


def test_plan_is_seeded_and_follows_the_weights() -> None:
    a, b = plan(20_000, 7), plan(20_000, 7)
    assert a == b
    assert plan(200, 8) != plan(200, 7)
    for k in MIX:
        share = sum(1 for x in a if x is k) / len(a)
        assert abs(share - k.weight / 1000) < 0.02, k.name


def test_fault_models_ask_the_stub_for_their_fault() -> None:
    faults = {k.name: split_model(k.model) for k in MIX if "@" in k.model}
    assert faults == {
        "fail": ("soak-echo", "fail", 0),
        "rate-limit": ("soak-echo", "rate_limit", 0),
        "error-mid-stream": ("soak-echo", "error", 2),
        "die-mid-stream": ("soak-echo", "die", 2),
    }


def test_defined_and_undefined_buckets() -> None:
    for ok in ("ok_stream", "ok_json", "stream_error_event", "client_disconnect"):
        assert is_defined(ok)
    for status in (400, 404, 429, 499, 502, 503, 504):
        assert is_defined(http_bucket(status))
    for bad in UNDEFINED:
        assert not is_defined(bad)
    assert not is_defined(http_bucket(500))
    assert not is_defined(http_bucket(302))
    assert not is_defined("http_abc")
    assert not is_defined("something_else")


def test_prompt_is_twelve_words() -> None:
    assert len(prompt(123).split()) == 12
    assert "123" in prompt(123)


# the config ------------------------------------------------------------------------


def test_config_routes_every_edge_model(tmp_path: Path) -> None:
    data = tomllib.loads(config_text(18101, 18102, Settings()))
    assert config_problems(data, environ={}) == []
    assert stub_problems(data, environ={}) == []
    assert edge_problems(data, environ={}) == []
    models = [(m["name"], m["provider"]) for m in data["models"]]
    assert {name for name, _ in models} >= {k.model for k in MIX if k.name != "unknown-model"}
    assert unrouted_models(data, models) == []
    assert "soak-no-such-model" not in {name for name, _ in models}
    # The stub drains quickly, so that the restart is short.
    assert data["stub"]["drain_grace_seconds"] < data["stub"]["drain_seconds"] <= 5


# the client against a fake edge ------------------------------------------------------


def _sse(*events: object, done: bool = True) -> bytes:
    out = b"".join(b"data: " + msgspec.json.encode(e) + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def _delta(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}}]}


def _chunked(body: bytes, *, end: bool = True) -> bytes:
    out = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
    return out + (b"0\r\n\r\n" if end else b"")


def _answer(model: str, text: str) -> bytes:
    """What the fake edge sends for ``model``: one way a gateway can answer."""
    sse_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    sse_head += b"transfer-encoding: chunked\r\n\r\n"
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1].rstrip()
    if model == "ok-stream":
        return sse_head + _chunked(b": keep-alive\n\n" + _sse(*map(_delta, words)))
    if model == "wrong-text":
        return sse_head + _chunked(_sse(_delta("something else")))
    if model == "no-done":
        return sse_head + _chunked(_sse(_delta(text), done=False))
    if model == "after-done":
        return sse_head + _chunked(_sse(_delta(text)) + _sse(_delta("x"), done=False))
    if model == "error-event":
        err = {"error": {"message": "boom", "type": "api_error", "code": "backend_disconnected"}}
        return sse_head + _chunked(_sse(_delta(words[0]), err, done=False))
    if model == "cut":
        return sse_head + _chunked(_sse(_delta(words[0]), done=False), end=False)
    if model.startswith("status-"):
        body = b'{"error": {}}'
        head = f"HTTP/1.1 {model[7:]} X\r\ncontent-length: {len(body)}\r\n\r\n"
        return head.encode() + body
    if model == "json":
        doc = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        body = msgspec.json.encode(doc)
        return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    if model == "json-garbage":
        return b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nnope!"
    return b""  # "reset": nothing, the connection closes


async def _fake_edge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        doc = json.loads(await reader.readexactly(length))
        writer.write(_answer(doc["model"], doc["messages"][-1]["content"]))
        await writer.drain()
    finally:
        writer.close()


@pytest.fixture
async def edge_url() -> AsyncIterator[str]:
    server = await asyncio.start_server(_fake_edge, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("model", "stream", "expected"),
    [
        ("ok-stream", True, Outcome.OK_STREAM),
        ("wrong-text", True, Outcome.BAD_ANSWER),
        ("no-done", True, Outcome.STREAM_TRUNCATED),
        ("after-done", True, Outcome.BAD_ANSWER),
        ("error-event", True, Outcome.STREAM_ERROR_EVENT),
        ("cut", True, Outcome.TRANSPORT_ERROR),
        ("reset", True, Outcome.TRANSPORT_ERROR),
        ("status-503", True, "http_503"),
        ("status-500", False, Outcome.HTTP_500),
        ("json", False, Outcome.OK_JSON),
        ("json-garbage", False, Outcome.BAD_ANSWER),
    ],
)
async def test_exchange_classifies_every_answer(
    edge_url: str, model: str, stream: bool, expected: str
) -> None:
    transport = PoolTransport(limit=2)
    try:
        kind = Kind(model, 1, model, stream, Outcome.OK_STREAM)
        bucket, detail = await exchange(transport, edge_url, kind, 41)
    finally:
        await transport.aclose()
    assert bucket == expected
    assert bool(detail) == (bucket == Outcome.TRANSPORT_ERROR)


async def test_disconnect_closes_after_the_first_event(edge_url: str) -> None:
    transport = PoolTransport(limit=2)
    try:
        kind = Kind("disconnect", 1, "error-event", True, Outcome.CLIENT_DISCONNECT, True)
        # The whole answer may arrive at once: an error event then counts as such.
        bucket, _ = await exchange(transport, edge_url, kind, 3)
        assert bucket in (Outcome.CLIENT_DISCONNECT, Outcome.STREAM_ERROR_EVENT)
        kind = Kind("disconnect", 1, "cut", True, Outcome.CLIENT_DISCONNECT, True)
        assert (await exchange(transport, edge_url, kind, 3))[0] == Outcome.CLIENT_DISCONNECT
        assert transport.stats()["open"] == 0  # the cut connection was not pooled
    finally:
        await transport.aclose()


# sampling ---------------------------------------------------------------------------


def test_parse_gauges_reads_only_the_unlabelled_gauges_of_its_prefix() -> None:
    text = (
        "# HELP flatgate_edge_upstream_pool_open Upstream connections open.\n"
        "flatgate_edge_upstream_pool_open 31.0\n"
        "flatgate_edge_upstream_pool_idle 29.0\n"
        "flatgate_edge_in_flight 2.0\n"
        "flatgate_edge_active_streams 1.0\n"
        "flatgate_edge_upstream_pool_waits_total 7.0\n"
        'flatgate_edge_requests_total{route="/v1/chat/completions",status="200"} 5.0\n'
    )
    assert parse_gauges(text, "flatgate_edge", GAUGES) == {
        "pool_open": 31.0,
        "pool_idle": 29.0,
        "in_flight": 2.0,
        "active_streams": 1.0,
    }
    assert parse_gauges(text, "flatgate", GAUGES) == {}  # the edge's lines are not the proxy's
    assert set(GAUGES.values()) >= {"pool_open", "pool_idle", "in_flight"}


def test_requests_by_status_of_one_route() -> None:
    text = (
        'flatgate_edge_requests_total{route="/v1/chat/completions",status="200"} 880.0\n'
        'flatgate_edge_requests_total{route="/v1/chat/completions",status="502"} 12.0\n'
        'flatgate_edge_requests_total{route="/healthz",status="200"} 3.0\n'
    )
    got = requests_by_status(text, "flatgate_edge", "/v1/chat/completions")
    assert got == {200: 880, 502: 12}
    assert requests_by_status(text, "flatgate_edge", "/nope") == {}


# the verdict --------------------------------------------------------------------------


def _usage(rss_mib: float, fds: int, in_flight: float = 20.0) -> dict[str, Any]:
    gauges = {"pool_open": 30.0, "pool_idle": 5.0, "pool_waiting": 0.0}
    gauges |= {"in_flight": in_flight, "active_streams": in_flight / 2}
    return {"rss_kib": int(rss_mib * 1024), "fds": fds, "gauges": gauges}


def _doc(
    n: int = 20, *, leak_mib: float = 0.0, fd_leak: int = 0, after_in_flight: float = 0.0
) -> dict[str, Any]:
    samples = []
    for i in range(n):
        rss = 80 + leak_mib * i / n
        samples.append(
            {
                "t": 10.0 * i,
                "phase": "traffic",
                "epoch": 1 if i < n // 2 else 2,
                "sent": 1000 * i,
                "finished": 1000 * i,
                "services": {"edge": _usage(rss, 90 + fd_leak * i // n)},
            }
        )
    # While the stub is down: pools and descriptors move, and no epoch counts it.
    down = {"edge": _usage(80, 500)}
    samples.insert(n // 2, {**samples[n // 2], "phase": "restart", "services": down})
    after = _usage(80, 70, in_flight=after_in_flight)
    samples.append(
        {
            "t": 10.0 * n,
            "phase": "after",
            "epoch": 2,
            "sent": 1000,
            "finished": 1000,
            "services": {"edge": after},
        }
    )
    doc: dict[str, Any] = {
        "settings": {"requests": 1000, "concurrency": 32, "warmup_fraction": 0.2},
        "sent": 1000,
        "outcomes": {"ok_stream": 900, "http_502": 100},
        "edge_requests": {"200": 900, "502": 100},
        "restart": {"wanted": True, "ok": True, "at_request": 500, "t": 95.0, "down_seconds": 2.0},
        "services": ["edge"],
        "samples": samples,
    }
    return doc


def _verdicts(doc: dict[str, Any]) -> dict[str, str]:
    return {c.name: c.verdict for c in checks(doc)}


def test_a_flat_run_passes() -> None:
    got = _verdicts(_doc())
    assert set(got.values()) == {"PASS"}, got
    for name in ACCOUNTING:
        assert name in got
    for epoch in ("before the restart", "after the restart"):
        for what in ("RSS flat", "FDs flat", "pool flat", "in flight bounded"):
            assert got[f"{what}: edge ({epoch})"] == "PASS"
    assert got["drained after the traffic"] == "PASS"


def test_leaks_fail() -> None:
    assert _verdicts(_doc(leak_mib=60))["RSS flat: edge (after the restart)"] == "FAIL"
    assert _verdicts(_doc(fd_leak=200))["FDs flat: edge (after the restart)"] == "FAIL"
    assert _verdicts(_doc(after_in_flight=1))["drained after the traffic"] == "FAIL"


def test_lost_or_undefined_requests_fail() -> None:
    doc = _doc()
    doc["outcomes"] = {"ok_stream": 899, "http_502": 100}
    got = _verdicts(doc)
    assert got["outcomes add up"] == "FAIL" and got["every outcome defined"] == "PASS"
    doc["outcomes"] = {"ok_stream": 899, "http_502": 100, "stream_truncated": 1}
    got = _verdicts(doc)
    assert got["outcomes add up"] == "PASS" and got["every outcome defined"] == "FAIL"
    doc["edge_requests"] = {"200": 999}
    assert _verdicts(doc)["the edge counted every request"] == "FAIL"
    doc["sent"] = 999
    assert _verdicts(doc)["every request sent"] == "FAIL"
    doc["restart"] = {"wanted": True, "ok": False, "error": "did not come back", "t": 1.0}
    assert _verdicts(doc)["backend restarted"] == "FAIL"


def test_too_few_samples_skip() -> None:
    got = _verdicts(_doc(n=4))
    assert got["flat: edge (before the restart)"] == "SKIP"
    assert "FAIL" not in got.values()


def test_rules() -> None:
    assert rss_flat([80 * 1024, 81 * 1024, 85 * 1024, 89 * 1024, 89 * 1024])[0]
    assert not rss_flat([80 * 1024, 80 * 1024, 80 * 1024, 95 * 1024, 95 * 1024, 95 * 1024])[0]
    # 10% of a large process is more than 10 MiB.
    assert rss_flat([1000 * 1024] * 3 + [1090 * 1024] * 3)[0]
    assert not_rising([90, 100, 95, 96, 98, 101], 4)[0]
    assert not not_rising([90, 100, 95, 130, 140, 150], 4)[0]
    # One spike at the end does not decide.
    assert not_rising([90, 100, 95, 96, 98, 160, 97], 4)[0]


# the report ---------------------------------------------------------------------------


def test_plot_has_a_gap_where_the_stub_was_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _doc()
    doc |= {"services": ["edge", "stub"], "verdict": "PASS"}
    for sample in doc["samples"]:
        if sample["phase"] != "restart":  # the stub is not sampled while it restarts
            sample["services"] = {**sample["services"], "stub": _usage(40, 20)}
    plot(doc, tmp_path / "soak.png")
    assert (tmp_path / "soak.png").read_bytes()[:8] == PNG
    drawn: list[Any] = []
    monkeypatch.setattr(report, "timeseries", lambda panels, path, **kw: drawn.append(panels))
    plot(doc, tmp_path / "unused.png")
    rss = {series.name: series.points for series in drawn[0][0].series}
    gaps = [t for t, y in rss["stub"] if math.isnan(y)]
    assert gaps == [doc["samples"][10]["t"]] and not any(math.isnan(y) for _, y in rss["edge"])


# the harness, for real -----------------------------------------------------------------


@pytest.mark.integration
def test_quick_soak_accounts_for_every_request(tmp_path: Path) -> None:
    args = ["--requests", "600", "--sample-seconds", "1", "--concurrency", "16"]
    done = run_bench(tmp_path, "benchmarks.soak", "--out", str(tmp_path / "out"), *args)
    # 1: a flatness criterion failed on a noisy machine; accounting is asserted below.
    assert done.returncode in (0, 1), done.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "soak.json").read_text())
    assert doc["sent"] == 600
    assert sum(doc["outcomes"].values()) == 600
    assert sum(sum(k.values()) for k in doc["by_kind"].values()) == 600
    assert [b for b in doc["outcomes"] if not is_defined(b)] == [], doc["undefined_examples"]
    verdicts = {c["name"]: c["verdict"] for c in doc["checks"]}
    for name in ACCOUNTING:
        assert verdicts[name] == "PASS", (name, doc["checks"])
    failed = [n for n, v in verdicts.items() if v == "FAIL"]
    assert (done.returncode == 1) == bool(failed)
    assert doc["restart"]["ok"] and doc["restart"]["at_request"] >= 300
    assert [s for s in doc["samples"] if s["phase"] == "after"]
    for line in ("every request sent", "soak: "):
        assert line in done.stdout
    md = (tmp_path / "out" / "soak.md").read_text()
    assert "## Outcomes" in md and "soak.png" in md
    assert (tmp_path / "out" / "soak.png").read_bytes()[:8] == PNG
    assert render_markdown(doc) == md
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "args", [["--requests", "0"], ["--sample-seconds", "-1"], ["--warmup", "1.5"]]
)
def test_refuses_bad_arguments(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert "--" in capsys.readouterr().err


@pytest.mark.integration
def test_sigterm_stops_every_server(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "benchmarks.soak", "--out", str(tmp_path / "out")]
    argv += ["--requests", "5000", "--concurrency", "1"]
    stopped = False
    env = bench_env(tmp_path)
    with subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stderr is not None
            for line in proc.stderr:  # the first sample: every server is up, traffic flows
                if line.startswith("traffic t="):
                    break
            # Keep reading what it writes, so that it never blocks on a full pipe.
            said: list[str] = []
            err = proc.stderr
            rest = threading.Thread(target=lambda: said.append(err.read()), daemon=True)
            rest.start()
            running = [cmd for cmd in leftovers(tmp_path) if "gateway.cli" in cmd]
            assert len(running) >= 4, running  # edge, proxy, two stubs (and their workers)
            proc.terminate()
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGUSR1)  # the soak dumps its threads' stacks
                time.sleep(2)
                proc.kill()
                rest.join(5)
                pytest.fail(
                    f"the soak did not stop within 60 s of SIGTERM: {''.join(said)[-6000:]}"
                )
            assert code == 130
            stopped = True
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if not stopped:  # a failure: end what the soak left behind
                for pid in leftover_pids(tmp_path):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
    assert leftovers(tmp_path) == []
    assert not (tmp_path / "out").exists()
