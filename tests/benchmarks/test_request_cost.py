"""``benchmarks.request_cost`` (issue 43's per-request table): every row serves
its request in memory, each floor stands beside its rows, and the result
files carry every row's figures and every step's share; no timing asserted."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import msgspec

from benchmarks import request_cost
from benchmarks.cost_rows import build_rows
from benchmarks.cost_steps import CALLER, MODULE_STEPS, STEPS, module_of, step_of
from benchmarks.inprocess_gateway import (
    MODEL,
    answers,
    gateway_request,
    make_gateway,
    serve_gateway,
)


def test_every_row_answers_200_and_names_a_floor_that_is_there() -> None:
    async def go() -> None:
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            rows = build_rows(fd)
            names = {row.name for row in rows}
            for row in rows:
                assert row.serve() == 200, row.name
                assert not row.floor or row.floor in names
        finally:
            os.close(fd)

    asyncio.run(go())


def test_the_gateway_row_relays_the_openai_adapter_answer_whole_and_streamed() -> None:
    async def go() -> None:
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            edge, transport = make_gateway(fd)
            whole = serve_gateway(edge, gateway_request(stream=False))
            sent = msgspec.json.decode(transport.last_body)
            assert sent["model"] == MODEL and not sent.get("stream")
            doc = msgspec.json.decode(whole.out[0])
            assert doc["choices"][0]["message"]["content"] == "tok " * 32
            streamed = serve_gateway(edge, gateway_request(stream=True))
            text = b"".join(streamed.out)
            assert text.count(b'"content":"tok "') == 32 and text.endswith(b"data: [DONE]\n\n")
            await edge.aclose()
        finally:
            os.close(fd)

    assert len(answers()[1]) > 32  # the stream: one piece per event
    asyncio.run(go())


def test_every_module_maps_to_a_step() -> None:
    assert all(step == CALLER or step in STEPS for step in MODULE_STEPS.values())
    here = str(Path(request_cost.__file__).resolve().parents[1] / "proxy/wire/chunk/writer.py")
    assert module_of(here) == "flatgate.proxy.wire.chunk.writer"
    assert step_of(module_of(here)) == "frame"
    assert step_of(None) == CALLER
    assert step_of("somewhere.else") == "other"


def test_a_tiny_run_writes_every_row_and_step(tmp_path: Path) -> None:
    plan = request_cost.Plan(requests=20, rounds=1, calls=5, profile_requests=10)
    doc = request_cost.measure(plan, lambda m: None)
    paths = request_cost.write(doc, tmp_path)
    assert [p.name for p in paths] == ["request-cost.json", "request-cost.md"]
    written = json.loads(paths[0].read_text())
    rows = written["rows"]
    assert len(rows) == 7
    for row in rows:
        assert row["cpu_us"] > 0 and row["allocs"] > 0 and row["bytes"] > 0
        assert len(row["gc_per_1000"]) == len(row["gc_per_1000_cpython"]) == 3
        assert list(row["steps"]) == list(STEPS)
        assert abs(sum(row["steps"].values()) - 100.0) < 0.01
    md = paths[1].read_text()
    assert all(f"| {row['name']} |" in md for row in rows)
    assert "vs floor" in md
