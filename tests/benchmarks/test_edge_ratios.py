"""Issue 41's ``make bench`` rows (``benchmarks.edge_ratios``, and the Gemini
rows of ``benchmarks/bench_translate.py``): the Gemini edge's translate does
the work the Chat Completions one does, on the same conversation, and its
render writes a Gemini stream event; the report holds each ratio to 1.2x.

A row that skipped work would look fast: the two translations are read back
and compared message by message (roles, text, the tool call and its answer,
the tool's schema, the sampling slots), and the Gemini event is decoded as a
``GenerateContentResponse`` by the one model of it.
"""

from __future__ import annotations

import msgspec
import pytest

from benchmarks import edge_ratios
from benchmarks.codecs.common import MODELS
from benchmarks.codecs.flatgate import translate_gemini_json, translate_json
from benchmarks.payloads import PROMPT_SIZES, make_request, to_gemini
from flatgate.proxy.apis.gemini.answer import GenerateContentResponse
from flatgate.proxy.wire.request.decode import read_request


@pytest.mark.parametrize("size", edge_ratios.SIZES)
def test_the_gemini_translate_writes_what_the_chat_one_writes(size: str) -> None:
    chat = make_request(PROMPT_SIZES[size], 1)
    model = next(iter(MODELS))
    a = read_request(translate_json(msgspec.json.encode(chat), models=MODELS))
    g = read_request(
        translate_gemini_json(msgspec.json.encode(to_gemini(chat)), model=model, models=MODELS)
    )
    # Chat's system and developer notes are two System messages; Gemini's
    # systemInstruction one, its parts joined.
    a_system = "".join(m.content or "" for m in a.messages if m.role == g.messages[0].role)
    assert g.messages[0].content == a_system
    rest_a = [m for m in a.messages if m.role != g.messages[0].role]
    rest_g = g.messages[1:]
    # A functionResponse's text is its response's JSON: {"output": ...}.
    texts_g = [
        msgspec.json.decode(m.content or "{}")["output"] if m.tool_call_id else (m.content or "")
        for m in rest_g
    ]
    assert texts_g == [m.content or "" for m in rest_a]
    assert [m.role for m in rest_g] == [m.role for m in rest_a]
    calls_a = [(c.id, c.function.name) for m in rest_a for c in m.tool_calls or ()]
    calls_g = [(c.id, c.function.name) for m in rest_g for c in m.tool_calls or ()]
    assert calls_g == calls_a and calls_a
    assert [m.tool_call_id for m in rest_g] == [m.tool_call_id for m in rest_a]
    assert [t.function.name for t in g.tools] == [t.function.name for t in a.tools]
    schema = [msgspec.json.decode(t.function.parameters or b"") for t in g.tools]
    assert schema == [msgspec.json.decode(t.function.parameters or b"") for t in a.tools]
    assert (g.temperature, g.top_p, g.max_tokens, g.seed, list(g.stop)) == (
        a.temperature,
        a.top_p,
        a.max_tokens,
        a.seed,
        list(a.stop),
    )
    assert not g.extras


def test_the_render_row_writes_a_gemini_event() -> None:
    ops = edge_ratios.operations(["1KB"])
    event = ops[("render", "", "gemini")][0]()
    assert isinstance(event, bytes) and event.startswith(b"data: ")
    answer = msgspec.json.decode(event[len(b"data: ") :].strip(), type=GenerateContentResponse)
    assert answer.candidates and answer.candidates[0].content is not None
    assert answer.candidates[0].content.parts[0].text == "token "
    chat = ops[("render", "", "chat")][0]()
    assert isinstance(chat, bytes) and b'"content":"token "' in chat


def test_the_report_holds_each_ratio_to_the_target() -> None:
    best = edge_ratios.measure(["1KB"], rounds=1)
    assert set(best) == set(edge_ratios.operations(["1KB"]))
    best[("translate", "1KB", "gemini")] = best[("translate", "1KB", "chat")] * 1.1
    best[("render", "", "gemini")] = best[("render", "", "chat")] * 1.3
    lines = edge_ratios.report(best, ["1KB"]).splitlines()
    translate = next(line for line in lines if line.startswith("| translate 1KB"))
    render = next(line for line in lines if line.startswith("| render"))
    assert "1.10x" in translate and translate.endswith("| met |")
    assert "1.30x" in render and "**missed**" in render
