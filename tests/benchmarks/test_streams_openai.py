"""Workload A's real-path rows: the stub speaking the OpenAI API in cadence mode.

``nginx-openai`` (nginx in front of it) and ``gateway-openai`` (the gateway
through its ``openai`` adapter): their config is valid and points the
gateway's openai backend at the stub's ``/v1``; what the cadence stub sends
in OpenAI mode is a right stream to the client's checker (the nginx row
relays exactly those bytes); each row's own CPU per token is set against the
nginx row in front of a stub of its own protocol. Pure: nothing is started.
"""

from __future__ import annotations

import tomllib
from typing import Any

import msgspec
import pytest

from benchmarks.streams.client import _Check, _classify_event, _Memo
from benchmarks.streams.results import add_comparisons, server_cpu_per_token
from benchmarks.streams.rows import ROWS, Timing, call_for, config_text
from benchmarks.streams.run import FULL
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.service.settings import config_problems
from flatgate.proxy.stub.cadence import TOKEN, prebuilt
from flatgate.proxy.stub.settings import stub_problems

ROW = {r.name: r for r in ROWS}
T = Timing()


def test_the_openai_rows_are_in_the_full_run() -> None:
    assert {"nginx-openai", "gateway-openai"} <= set(FULL.rows)
    gateway, nginx = ROW["gateway-openai"], ROW["nginx-openai"]
    assert (gateway.backend, gateway.front, gateway.kind) == ("openai", "gateway", "openai")
    assert (nginx.backend, nginx.front, nginx.kind) == ("openai", "nginx", "openai")
    assert gateway.charged == ("gateway", "stub") and nginx.charged == ("nginx", "stub")
    head, _, body = call_for(gateway, 1234, T).request.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert msgspec.json.decode(body)["stream"] is True


def test_openai_config_points_the_adapter_at_the_stubs_v1() -> None:
    doc = tomllib.loads(config_text(9001, 9002, T, backend="openai"))
    assert config_problems(doc) == [] and stub_problems(doc) == []
    assert doc["stub"]["protocol"] == "openai" and doc["stub"]["cadence"] is True
    [backend] = doc["backends"]
    assert (backend["url"], backend["protocol"]) == ("http://127.0.0.1:9001/v1", "openai")
    assert doc["models"][0]["provider"] == "OpenAI"
    # The fbs rows' config is as it was.
    fbs = tomllib.loads(config_text(9001, 9002, T))
    assert "protocol" not in fbs["stub"] and fbs["backends"][0]["protocol"] == "fbs"


def _header(name: str) -> str | None:
    return "text/event-stream" if name == "accept" else None


@pytest.mark.parametrize("tokens", [1, 3, 128])
def test_the_cadence_stubs_openai_stream_is_a_right_stream(tokens: int) -> None:
    built = prebuilt(OpenAIWire(), tokens, _header)
    data = built.first + built.delta * (tokens - 1) + built.final
    check = _Check(_Memo(TOKEN, _classify_event), tokens)
    for i in range(0, len(data), 61):  # cut anywhere, as the socket does
        check.feed_events(data[i : i + 61])
    assert check.verdict() == ""
    short = _Check(_Memo(TOKEN, _classify_event), tokens + 1)
    short.feed_events(data)
    assert short.verdict() == "bad_content"


def _row(name: str, backend: str, **cpu: float | None) -> dict[str, Any]:
    procs = [{"process": p, "cpu_us_per_token": v} for p, v in cpu.items()]
    return {"row": name, "status": "ok", "backend": backend, "processes": procs}


def test_each_row_is_set_against_the_nginx_of_its_protocol() -> None:
    rows = [
        _row("nginx", "fbs", nginx=1.0, stub=3.0),
        _row("proxy", "fbs", proxy=4.0, stub=3.0),
        _row("edge+proxy", "fbs", edge=5.0, proxy=4.0, stub=3.0),
        _row("nginx-openai", "openai", nginx=2.0, stub=3.0),
        _row("gateway-openai", "openai", gateway=5.0, stub=3.0),
        _row("gateway-unsampled", "openai", gateway=None, stub=3.0),
        {"row": "gateway", "status": "skipped", "reason": "x"},
    ]
    add_comparisons(rows)
    got = {r["row"]: r.get("cpu_vs_nginx") for r in rows}
    assert got == {
        "nginx": 1.0,
        "proxy": 4.0,
        "edge+proxy": 9.0,
        "nginx-openai": 1.0,
        "gateway-openai": 2.5,
        "gateway-unsampled": None,
        "gateway": None,
    }
    assert server_cpu_per_token(rows[2]) == 9.0
    assert server_cpu_per_token({"processes": [{"process": "stub", "cpu_us_per_token": 1}]}) is None
