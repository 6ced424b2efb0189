"""Compaction at the edge (``edge_translator.responses.compact``) and its
shapes (``apis.openai_responses.compact``): the request's checks, the
``CompletionRequest`` written for it, the ``response.compaction`` object
held to the Open Responses schema (``CompactResource``: id, object, output
of ``ItemField``s, created_at, usage), and a compaction item's way into the
next request. Pure: no servers (``test_compact_e2e`` runs the stacks)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.responses.compact import CompactAggregator, CompactApi, retained
from flatgate.edge_translator.responses.translate import write_request
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.openai_responses.compact import (
    COMPACT_MARK,
    PROMPT,
    decode_compact,
    summary_item,
    summary_of,
    summary_text,
)
from flatgate.proxy.apis.openai_responses.request import decode_request
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, Usage
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.schema import ApiDialect, FinishReason, Provider
from tests.edge.responses.common import Budget

API = CompactApi()
MODEL = ModelConfig(name="m", provider="OpenAI")
TALK = [
    {"type": "message", "role": "user", "content": "We launch on Tuesday."},
    {"type": "message", "role": "assistant", "content": "Understood: Tuesday."},
    {"role": "user", "content": [{"type": "input_text", "text": "Notify support first."}]},
]
INTS = ("input_tokens", "output_tokens", "total_tokens")


def compact_body(**body: Any) -> bytes:
    body.setdefault("model", "m")
    body.setdefault("input", TALK)
    return json.dumps(body).encode()


def check_compact_resource(doc: dict[str, Any]) -> None:
    """``doc`` against the spec's ``CompactResource`` (the schema's required
    fields and types, and each output item an ``ItemField``: a message with
    id, status, role and a content list, or a compaction with id and
    encrypted_content)."""
    assert set(doc) >= {"id", "object", "output", "created_at", "usage"}
    assert isinstance(doc["id"], str) and doc["object"] == "response.compaction"
    assert isinstance(doc["created_at"], int)
    usage = doc["usage"]
    for name in INTS:
        assert isinstance(usage[name], int), name
    assert isinstance(usage["input_tokens_details"]["cached_tokens"], int)
    assert isinstance(usage["output_tokens_details"]["reasoning_tokens"], int)
    assert isinstance(doc["output"], list)
    for item in doc["output"]:
        if item["type"] == "message":
            assert isinstance(item["id"], str) and item["status"] == "completed"
            assert item["role"] in ("user", "assistant", "system", "developer")
            assert isinstance(item["content"], list)
            for part in item["content"]:
                assert part["type"] == "input_text" and isinstance(part["text"], str)
        else:
            assert item["type"] == "compaction"
            assert isinstance(item["id"], str) and isinstance(item["encrypted_content"], str)
    assert doc["output"][-1]["type"] == "compaction"


def fold(*chunks: Chunk, kept: list[bytes] | None = None) -> dict[str, Any]:
    agg = CompactAggregator("resp_1", 1700000000, kept or [])
    for c in chunks:
        agg.feed(c)
    assert agg.finished and agg.complete
    out: dict[str, Any] = json.loads(agg.body())
    return out


# -- the request -------------------------------------------------------------------


def test_a_compact_request_without_a_model_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidRequest) as err:
        decode_compact(json.dumps({"input": TALK}).encode())
    assert err.value.status == 400 and err.value.param == "model"


@pytest.mark.parametrize("field", ["stream", "tools", "temperature", "store", "max_output_tokens"])
def test_a_responses_field_a_compaction_does_not_take_is_a_400_naming_it(field: str) -> None:
    value = {"stream": True, "tools": [], "temperature": 1, "store": True}.get(field, 16)
    with pytest.raises(InvalidRequest) as err:
        decode_compact(compact_body(**{field: value}))
    assert err.value.param == field


def test_the_endpoint_s_fields_are_taken() -> None:
    d = decode_compact(
        compact_body(
            instructions="Be brief.",
            prompt_cache_key="k",
            previous_response_id=None,
            service_tier="flex",
            prompt_cache_retention="24h",
            image={"context_compression": "auto"},
        )
    )
    assert d.req.instructions == "Be brief." and len(d.items) == 3
    assert json.loads(d.extras) == {
        "prompt_cache_key": "k",
        "service_tier": "flex",
        "prompt_cache_retention": "24h",
        "image": {"context_compression": "auto"},
    }


def test_the_completion_request_is_the_conversation_then_the_prompt_marked() -> None:
    d = decode_compact(compact_body(instructions="Be brief.", prompt_cache_key="k"))
    req = read_request(API.write(d, MODEL, tenant="t", request_id="rid"))
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "user", "user"]
    assert req.messages[-1].content == PROMPT
    assert req.messages[1].content == "We launch on Tuesday."
    assert not req.stream and req.tenant == "t" and req.model_name == "m"
    assert req.extras_dialect == int(ApiDialect.OPENAI_RESPONSES)
    assert json.loads(req.extras) == {"prompt_cache_key": "k", COMPACT_MARK: True}
    bare = read_request(API.write(decode_compact(compact_body()), MODEL, tenant="", request_id=""))
    assert json.loads(bare.extras) == {COMPACT_MARK: True}


def test_nothing_of_a_compaction_is_stored() -> None:
    d = decode_compact(compact_body())
    d = asyncio.run(API.prepare(d, tenant="t", response_id="resp_1", budget=Budget()))
    assert d.kept == ()
    asked = API.asked(d, "resp_1", "rid", "m")
    assert not asked.stream and asked.include_usage


# -- the answer ----------------------------------------------------------------------


def test_a_summary_becomes_the_user_messages_and_a_compaction_item() -> None:
    d = decode_compact(compact_body())
    doc = fold(
        Chunk(content="Launch Tuesday; "),
        Chunk(content="support first."),
        Chunk(finish_reason=FinishReason.STOP, usage=Usage(40, 6, cached_tokens=3)),
        kept=retained(d.items),
    )
    check_compact_resource(doc)
    assert doc["id"] == "resp_1" and doc["created_at"] == 1700000000
    users, compaction = doc["output"][:-1], doc["output"][-1]
    assert [u["content"][0]["text"] for u in users] == [
        "We launch on Tuesday.",
        "Notify support first.",
    ]
    assert all(u["id"].startswith("msg_") for u in users)
    assert compaction["id"].startswith("cmp_")
    assert summary_of(compaction["encrypted_content"]) == "Launch Tuesday; support first."
    assert doc["usage"]["input_tokens"] == 40 and doc["usage"]["total_tokens"] == 46
    assert doc["usage"]["input_tokens_details"]["cached_tokens"] == 3


def test_a_compaction_without_usage_reports_zeros() -> None:
    doc = fold(Chunk(content="s"), Chunk(finish_reason=FinishReason.STOP))
    check_compact_resource(doc)
    assert doc["usage"]["total_tokens"] == 0


def test_a_backend_s_own_compaction_is_relayed_as_it_came() -> None:
    mine: dict[str, Any] = {"id": "msg_a", "type": "message", "status": "completed"}
    mine |= {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    theirs = {"id": "cmp_9", "type": "compaction", "encrypted_content": "gAAAA="}
    responses = int(ApiDialect.OPENAI_RESPONSES)
    doc = fold(
        *(
            Chunk(extras=json.dumps({"output_item": item}), extras_dialect=responses)
            for item in (mine, theirs)
        ),
        Chunk(finish_reason=FinishReason.STOP, usage=Usage(5, 2)),
        kept=[b'{"not":"used"}'],
    )
    check_compact_resource(doc)
    assert doc["output"] == [mine, theirs]


def test_an_error_chunk_fails_the_compaction() -> None:
    agg = CompactAggregator("resp_1", 0, [])
    with pytest.raises(Exception) as err:
        agg.feed(Chunk(finish_reason=FinishReason.ERROR, error=ChunkError("upstream_error", "x")))
    assert getattr(err.value, "status", None) == 502


# -- the item -------------------------------------------------------------------------


def test_flatgate_s_compaction_content_holds_its_summary() -> None:
    item = summary_item("cmp_1", "Résumé: Tuesday.")
    assert item["type"] == "compaction" and item["id"] == "cmp_1"
    assert summary_of(item["encrypted_content"]) == "Résumé: Tuesday."
    assert summary_of("gAAAAABpM0Yj-opaque=") is None  # another server's
    assert summary_of("fgc1.!!!") is None


def test_a_compaction_item_in_the_next_request_is_its_summary_as_a_user_message() -> None:
    window = [json.loads(m) for m in retained(decode_compact(compact_body()).items)] + [
        {**summary_item("cmp_1", "Launch Tuesday."), "created_by": "flatgate"}
    ]
    window.append({"type": "message", "role": "user", "content": "Go on."})
    d = decode_request(json.dumps({"model": "m", "input": window}).encode())
    req = read_request(write_request(d, provider=int(Provider.OpenAI), model_name="m"))
    assert [m.role for m in req.messages] == ["user", "user", "user", "user"]
    assert req.messages[2].content == summary_text("Launch Tuesday.")
    assert not req.messages[2].reasoning


def test_another_server_s_compaction_item_travels_as_its_opaque_part() -> None:
    window = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "compaction", "id": "cmp_9", "encrypted_content": "gAAAA-opaque="},
        {"type": "compaction", "id": None, "encrypted_content": "gAAAA-second="},
        {"type": "message", "role": "user", "content": "Go on."},
    ]
    d = decode_request(json.dumps({"model": "m", "input": window}).encode())
    req = read_request(write_request(d, provider=int(Provider.OpenAI), model_name="m"))
    assert [m.role for m in req.messages] == ["user", "assistant", "user"]
    parts = req.messages[1].reasoning or []
    assert [(p.id, p.opaque, p.dialect) for p in parts] == [
        ("cmp_9", b"gAAAA-opaque=", int(ApiDialect.OPENAI_RESPONSES)),
        ("cmp_", b"gAAAA-second=", int(ApiDialect.OPENAI_RESPONSES)),
    ]


def test_a_compaction_item_needs_its_content() -> None:
    window = [{"type": "compaction", "id": "cmp_1"}]
    with pytest.raises(InvalidRequest) as err:
        decode_request(json.dumps({"model": "m", "input": window}).encode())
    assert err.value.param == "input.[0].encrypted_content"


def test_flatgate_s_content_is_url_safe_base64_behind_its_prefix() -> None:
    content = summary_item("cmp_1", "a?b>c")["encrypted_content"]
    assert content.startswith("fgc1.")
    assert base64.urlsafe_b64decode(content[5:]) == b"a?b>c"
    assert msgspec.json.decode(msgspec.json.encode(content)) == content
