"""Hostile and random Responses bodies: a 400 (``InvalidRequest``) or a
request whose ``CompletionRequest`` verifies, never anything else; and a
random history of items reads back from the wire as it went in."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.responses.translate import write_request
from flatgate.proxy.apis.openai_responses.request import decode_request
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.verify import verify_request

DEPTH = 100_000


def deep() -> bytes:
    return b'{"a":' * DEPTH + b"1" + b"}" * DEPTH


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"m","input":' + deep() + b"}",
        b'{"model":"m","input":"hi","client_field":' + deep() + b"}",
        b'{"model":"m","input":"hi","tools":[' + deep() + b"]}",
        b'{"model":"m","input":"hi","tool_choice":' + deep() + b"}",
        b'{"model":"m","input":"\xff"}',
        b'{"model":"m","input":"hi","reasoning":{"effort":"low","x":"\xed\xa0\x80"}}',
        b'{"model":"m","input":"hi","include":[1]}',
        b'{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":7}]}',
    ],
)
def test_a_hostile_body_is_a_400(body: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_request(body)
    assert caught.value.status == 400
    if b"\xff" in body or b"\xed" in body:
        assert caught.value.code is codes.INVALID_JSON


_text = st.text(max_size=20)
_json: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_part = st.sampled_from(["input_text", "output_text"]).flatmap(
    lambda kind: st.fixed_dictionaries({"type": st.just(kind), "text": _text})
)
_item = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "system", "developer"]),
            "content": st.one_of(_text, st.lists(_part, max_size=3)),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": _text,
            "name": _text,
            "arguments": _text,
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": _text, "output": _text}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("reasoning"),
            "summary": st.lists(
                st.fixed_dictionaries({"type": st.just("summary_text"), "text": _text}),
                max_size=2,
            ),
            "encrypted_content": _text,
        }
    ),
)
_FIELDS = st.sampled_from(
    ["input", "tools", "tool_choice", "text", "reasoning", "include", "store", "metadata", "x"]
)


@settings(max_examples=200)
@given(st.dictionaries(_FIELDS, _json, max_size=4))
def test_any_body_is_a_400_or_a_verified_request(fields: dict[str, Any]) -> None:
    body = json.dumps({"model": "m", "input": "hi", **fields}).encode()
    try:
        # Writing decodes an image's or a file's data: a 400 too, before
        # anything is stored or forwarded.
        buf = write_request(decode_request(body), provider=0, model_name="m")
    except InvalidRequest as err:
        assert err.status == 400
        return
    verify_request(buf)


@settings(max_examples=100)
@given(st.lists(_item, min_size=1, max_size=8))
def test_any_history_reads_back_in_order(items: list[dict[str, Any]]) -> None:
    """Any history reads back in order; one with an output answering no call
    before it is refused, naming that output's ``call_id``."""
    made: set[str] = set()
    orphan = None
    for k, i in enumerate(items):
        if i.get("type") == "function_call":
            made.add(i["call_id"])
        elif i.get("type") == "function_call_output" and i["call_id"] not in made:
            orphan = k
            break
    decoded = decode_request(json.dumps({"model": "m", "input": items}).encode())
    if orphan is not None:
        with pytest.raises(InvalidRequest) as caught:
            write_request(decoded, provider=0, model_name="m")
        assert caught.value.param == f"input.[{orphan}].call_id"
        return
    buf = write_request(decoded, provider=0, model_name="m")
    verify_request(buf)
    wire = read_request(buf)
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert [c.id for m in wire.messages for c in m.tool_calls or ()] == calls
    assert [m.tool_call_id for m in wire.messages if m.role == "tool"] == outputs
    reasoning = [i["encrypted_content"] for i in items if i.get("type") == "reasoning"]
    assert [p.opaque.decode() for m in wire.messages for p in m.reasoning or ()] == reasoning
    said = [
        i["content"] if isinstance(i["content"], str) else "".join(p["text"] for p in i["content"])
        for i in items
        if "role" in i and i["role"] != "assistant"
    ]
    assert [m.content for m in wire.messages if m.role in ("user", "system", "developer")] == said
