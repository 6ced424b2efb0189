"""The schema-specific writer against the stock builder, the wire checks, and golden bytes.

Regenerate the golden ``.fgrq`` files after an intended change with
``FLATGATE_REGEN_GOLDEN=1 .venv/bin/pytest tests/edge/test_translate.py``
and review the diff.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.codecs.flatgate import translate_json
from benchmarks.codecs.stock_writer import write_request_stock
from flatgate.edge_translator.catalog import resolve_model
from flatgate.edge_translator.errors import InvalidRequest, ModelNotFound
from flatgate.edge_translator.openai.mapping import new_request_id
from flatgate.edge_translator.openai.translate import write_request
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.openai_chat.request import decode_request, extras_json
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER
from tests.edge.helpers import decode_request_fb

GOLDEN = Path(__file__).parent / "golden"
MODELS = {
    m.name: m
    for m in (
        ModelConfig("flatgate-echo", "SelfHosted"),
        ModelConfig("gpt-4o", "OpenAI"),
        ModelConfig("claude", "Anthropic", aliases=("claude-latest",)),
    )
}
MODELS["claude-latest"] = MODELS["claude"]


def both(raw: bytes, **kw: Any) -> tuple[bytes, bytes]:
    req = decode_request(raw)
    args = {"provider": 2, "model_name": "m", "tenant": "acme", "request_id": "rid", **kw}
    fast = write_request(req, **args)
    stock = write_request_stock(BuilderPool(debug=True), req, **args)
    return fast, stock


def assert_same(raw: bytes, **kw: Any) -> dict[str, Any]:
    fast, stock = both(raw, **kw)
    verify_request(fast)
    decoded = decode_request_fb(fast)
    reference = decode_request_fb(stock)
    # The stock writer writes no extras (the fields with no slot): they are
    # what models.extras_json makes, tagged OpenAIChat.
    extras = extras_json(decode_request(raw))
    assert (decoded.pop("extras"), decoded.pop("extrasDialect")) == (
        (extras, 1) if extras else (None, 0)
    )
    del reference["extras"], reference["extrasDialect"]
    assert decoded == reference
    return decoded


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_golden_bytes(name: str):
    raw = (GOLDEN / f"{name}.json").read_bytes()
    out = translate_json(raw, models=MODELS, tenant="acme", request_id=f"chatcmpl-golden-{name}")
    path = GOLDEN / f"{name}.fgrq"
    if os.environ.get("FLATGATE_REGEN_GOLDEN"):
        path.write_bytes(out)
    assert out == path.read_bytes(), f"{name}: writer output changed; see module docstring"
    verify_request(out)
    provider, model = read_route(out)
    assert (provider, bytes(model)) == (
        MODELS[json.loads(raw)["model"]].provider_id,
        json.loads(raw)["model"].encode(),
    )


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_golden_requests_match_the_stock_builder(name: str):
    assert_same((GOLDEN / f"{name}.json").read_bytes())


def test_fields_carry_the_request():
    d = assert_same((GOLDEN / "tools_and_history.json").read_bytes(), provider=1)
    assert d["requestId"] == b"rid" and d["tenant"] == b"acme" and d["provider"] == 1
    assert d["maxTokens"] == 64  # max_completion_tokens wins over max_tokens
    assert d["toolChoice"] == 4 and d["toolChoiceName"] == b"get_weather"
    assert [m["role"] for m in d["messages"]] == [2, 0, 3, 4, 4, 0]
    assert d["messages"][1]["name"] == b"alice"
    assert d["messages"][2]["content"] is None
    assert [c["id"] for c in d["messages"][2]["toolCalls"]] == [b"call_1", b"call_2"]
    assert d["messages"][3]["toolCallId"] == b"call_1"
    assert d["tools"][0]["strict"] is True and d["tools"][1]["strict"] is False
    assert d["tools"][0]["parameters"].startswith(b'{"type": "object"')
    assert d["tools"][1]["parameters"] is None
    assert d["stop"] == [b"\n\n", b"END"]
    assert d["seed"] == -9007199254740993
    assert [kv["key"] for kv in d["metadata"]] == [b"env", b"team"]  # sorted by key
    assert d["stream"] is True and d["includeUsage"] is True
    assert d["parallelToolCalls"] is False
    assert d["responseFormat"] == b'{"type": "json_object"}'
    raw = (GOLDEN / "tools_and_history.json").read_bytes()
    assert extras_json(decode_request(raw)) == b'{"logprobs":false}'  # no slot: in the extras


def test_absent_optionals_stay_absent():
    d = assert_same(b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}')
    assert d["temperature"] is None and d["topP"] is None and d["seed"] is None
    assert d["presencePenalty"] is None and d["frequencyPenalty"] is None
    assert d["parallelToolCalls"] is None and d["responseFormat"] is None
    assert d["maxTokens"] == 0 and d["n"] == 0 and d["stream"] is False
    assert d["tools"] is None and d["stop"] is None and d["metadata"] is None


def test_include_usage_needs_stream():
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "x"}],'
    d = assert_same(raw + b' "stream_options": {"include_usage": true}}')
    assert d["includeUsage"] is False


def test_content_parts_are_joined_and_unicode_is_exact():
    d = assert_same((GOLDEN / "unicode_parts.json").read_bytes())
    assert d["messages"][0]["content"].decode() == "Réponds en français."
    assert d["messages"][1]["content"].decode() == "  héllo\tworld ☃ 🎉\n  spaced   out  "
    assert d["temperature"] == 0.0 and d["toolChoice"] == 2


def test_empty_content_messages():
    raw = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": ""},
                {"role": "assistant", "content": []},
                {"role": "assistant"},
            ],
        }
    ).encode()
    d = assert_same(raw)
    assert [m["content"] for m in d["messages"]] == [None, None, None]


def test_seed_is_8_aligned_and_root_table_4_aligned():
    fast, _ = both(b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": 7}')
    root = struct.unpack_from("<I", fast)[0]
    assert fast[4:8] == REQUEST_IDENTIFIER
    assert root % 8 == 4
    assert struct.unpack_from("<q", fast, root + 4)[0] == 7


def test_large_prompt_round_trips():
    text = "word " * 200_000
    d = assert_same(
        json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
    )
    assert d["messages"][0]["content"] == text.encode()


def test_resolve_model_and_translate_json():
    assert resolve_model(MODELS, "claude-latest").name == "claude"
    with pytest.raises(ModelNotFound) as info:
        resolve_model(MODELS, "gpt-5")
    assert info.value.param == "model" and info.value.status == 404
    out = translate_json(
        b'{"model": "claude-latest", "messages": [{"role": "user", "content": "x"}]}',
        models=MODELS,
    )
    d = decode_request_fb(out)
    assert d["modelName"] == b"claude" and d["provider"] == 1
    assert d["requestId"].startswith(b"chatcmpl-") and d["tenant"] is None
    with pytest.raises(InvalidRequest):
        translate_json(b"{}", models=MODELS)


def test_request_ids_are_unique():
    ids = {new_request_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("chatcmpl-") and 33 < len(i) < 64 for i in ids)


# -- randomized: any valid request writes the same through both writers -------

_text = st.text(max_size=40)
_name = st.text(min_size=1, max_size=12)
_call = st.fixed_dictionaries(
    {
        "id": _name,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": _name, "arguments": _text}),
    }
)
_content = st.one_of(
    _text, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _text}), max_size=3)
)
_message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "user"]), "content": _content},
        optional={"name": _name},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={
            "content": st.one_of(st.none(), _content),
            "name": _name,
            "tool_calls": st.lists(_call, max_size=3),
        },
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "content": _content, "tool_call_id": _name}),
)
_tool = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": _name},
            optional={
                "description": _text,
                "parameters": st.dictionaries(_name, st.integers(), max_size=3),
                "strict": st.booleans(),
            },
        ),
    }
)
_unit = st.floats(0, 1, allow_nan=False)
_request = st.fixed_dictionaries(
    {"model": _name, "messages": st.lists(_message, min_size=1, max_size=6)},
    optional={
        "temperature": st.floats(0, 2, allow_nan=False),
        "top_p": _unit,
        "max_tokens": st.integers(1, 2**31 - 1),
        "max_completion_tokens": st.integers(1, 2**31 - 1),
        "stop": st.one_of(_text, st.lists(_text, max_size=4)),
        "seed": st.integers(-(2**63), 2**63 - 1),
        "presence_penalty": st.floats(-2, 2, allow_nan=False),
        "frequency_penalty": st.floats(-2, 2, allow_nan=False),
        "n": st.integers(1, 8),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "user": _text,
        "metadata": st.dictionaries(_name, _text, max_size=4),
        "tools": st.lists(_tool, max_size=3),
        "tool_choice": st.sampled_from(["none"]),
        "parallel_tool_calls": st.booleans(),
        "response_format": st.just({"type": "text"}),
    },
)


@settings(max_examples=150, deadline=None)
@given(_request, st.integers(0, 2), _text, _text)
def test_random_requests_match_the_stock_builder(body, provider, tenant, request_id):
    assert_same(json.dumps(body).encode(), provider=provider, tenant=tenant, request_id=request_id)
