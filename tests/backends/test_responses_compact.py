"""Compaction at the ``openai-responses`` adapter and its stub
(``backends.responses.compact``): a marked request forwarded to
``/responses/compact`` when the backend's ``compact`` is on (and the request
it is when off, and at every other adapter, which never see the mark), the
``response.compaction`` answer as output items, another server's compaction
item written back as it was, and the stub's endpoint: its answer, its
checks, its item coming back. Pure: no servers."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.responses.compact import CompactApi
from flatgate.edge_translator.responses.translate import write_request
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.openai_responses.answer import decode_answer
from flatgate.proxy.apis.openai_responses.compact import COMPACT_MARK, PROMPT, decode_compact
from flatgate.proxy.apis.openai_responses.request import decode_request
from flatgate.proxy.backends.anthropic.adapter import AnthropicAdapter
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.backends.base import Inbound, Outbound
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.responses.adapter import ResponsesAdapter, encode_request
from flatgate.proxy.backends.responses.compact import compaction_frames, marked, stub_compact
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.backends.responses.stub_request import (
    compaction_content,
    decode_responses_request,
    to_stub_request,
)
from flatgate.proxy.backends.responses.whole import ResponsesWhole
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Message, Request, read_request
from flatgate.proxy.wire.schema import JSON, ApiDialect, FinishReason, Role
from tests.backends.helpers import read_frames
from tests.edge.responses.test_compact import check_compact_resource

URL = "http://stub.test/v1"
RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
TALK = [
    {"type": "message", "role": "user", "content": "We launch on Tuesday."},
    {"type": "message", "role": "assistant", "content": "Understood: Tuesday."},
]


def compaction(**body: Any) -> Request:
    """The ``CompletionRequest`` the edge writes for a compaction."""
    body = {"model": "m", "input": TALK, **body}
    d = decode_compact(json.dumps(body).encode())
    api = CompactApi()
    return read_request(api.write(d, ModelConfig("m", "OpenAI"), tenant="", request_id="r"))


def prepared(adapter: Any, req: Request) -> Outbound:
    out: Outbound = adapter.prepare(Inbound(b"", lambda: req, "rid-1", ""))
    return out


def responses(**kw: Any) -> ResponsesAdapter:
    return ResponsesAdapter(
        ResponsesConfig(name="r", protocol="openai-responses", url=URL, api_key="k", **kw)
    )


# -- the adapter -----------------------------------------------------------------------


def test_a_backend_that_compacts_is_sent_the_conversation_at_its_endpoint() -> None:
    req = compaction(instructions="Be brief.", prompt_cache_key="k")
    assert marked(req)
    out = prepared(responses(compact=True), req)
    assert out.url == f"{URL}/responses/compact" and out.whole
    assert ("accept", JSON) in out.headers and ("authorization", "Bearer k") in out.headers
    body = json.loads(out.body)
    said = [(i["role"], i["content"][0]["text"]) for i in body.pop("input")]
    assert said == [("user", TALK[0]["content"]), ("assistant", TALK[1]["content"])]
    assert body == {"model": "m", "instructions": "Be brief.", "prompt_cache_key": "k"}


def test_a_backend_that_does_not_compact_is_asked_for_the_summary() -> None:
    out = prepared(responses(), compaction(prompt_cache_key="k"))
    assert out.url == f"{URL}/responses" and out.omitted == ()
    body = json.loads(out.body)
    assert body["input"][-1]["content"][0]["text"] == PROMPT
    assert COMPACT_MARK not in body and body["prompt_cache_key"] == "k"
    assert body["stream"] is False and body["store"] is False


@pytest.mark.parametrize(
    "adapter",
    [
        OpenAIAdapter(OpenAIConfig(name="o", url=URL, protocol="openai")),
        AnthropicAdapter(AnthropicConfig(name="a", url=URL, protocol="anthropic")),
    ],
    ids=["openai", "anthropic"],
)
def test_the_mark_reaches_no_other_backend(adapter: Any) -> None:
    out = prepared(adapter, compaction())
    assert COMPACT_MARK.encode() not in out.body and PROMPT.encode() in out.body
    assert out.omitted == ()


def test_an_unmarked_request_is_no_compaction() -> None:
    body = {"model": "m", "input": TALK, "prompt_cache_key": "k"}
    d = decode_request(json.dumps(body).encode())
    req = read_request(write_request(d, provider=0, model_name="m"))
    assert not marked(req)
    assert prepared(responses(compact=True), req).url == f"{URL}/responses"


def test_another_server_s_compaction_part_is_written_back_as_its_item() -> None:
    part = ReasoningPart(opaque=b"gAAAA-opaque=", dialect=RESPONSES, id="cmp_9")
    bare = ReasoningPart(opaque=b"gAAAA-second=", dialect=RESPONSES, id="cmp_")
    req = Request(
        model_name="m",
        messages=[
            Message(role="user", content="hi"),
            Message(role="assistant", content=None, reasoning=[part, bare]),
            Message(role="user", content="go on"),
        ],
    )
    body = json.loads(encode_request(req, model="m"))
    assert body["input"][1:3] == [
        {"type": "compaction", "id": "cmp_9", "encrypted_content": "gAAAA-opaque="},
        {"type": "compaction", "encrypted_content": "gAAAA-second="},
    ]


# -- the answer --------------------------------------------------------------------------

ANSWER = {
    "id": "resp_001",
    "object": "response.compaction",
    "created_at": 1764967971,
    "output": [
        {
            "id": "msg_000",
            "type": "message",
            "status": "completed",
            "content": [{"type": "input_text", "text": "Create a landing page."}],
            "role": "user",
        },
        {"id": "cmp_001", "type": "compaction", "encrypted_content": "gAAAABpM0Yj-...="},
    ],
    "usage": {
        "input_tokens": 139,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 438,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 577,
    },
}  # The example of the specification's CompactResource schema (openresponses at 92c12d96).


def test_a_compaction_answer_becomes_output_items_then_its_usage() -> None:
    chunks = read_frames(compaction_frames("rid", "m", decode_answer(json.dumps(ANSWER).encode())))
    items = [json.loads(c.extras)["output_item"] for c in chunks if c.extras]
    assert items == ANSWER["output"]
    assert all(c.extras_dialect == RESPONSES for c in chunks if c.extras)
    last = chunks[-1]
    assert last.finish_reason == FinishReason.STOP and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (139, 438)
    assert last.usage.reasoning_tokens == 64


def test_the_whole_answer_reader_knows_a_compaction() -> None:
    whole = ResponsesWhole("rid", "m")
    assert whole.feed(json.dumps(ANSWER).encode()) == b""
    chunks = read_frames(whole.end())
    assert [json.loads(c.extras)["output_item"]["id"] for c in chunks if c.extras] == [
        "msg_000",
        "cmp_001",
    ]


# -- the stub --------------------------------------------------------------------------


def stub(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    reply = stub_compact(json.dumps(body).encode(), {"x-request-id": "rid"}.get)
    doc: dict[str, Any] = json.loads(reply.body)
    return reply.status, doc


def test_the_stub_compacts_per_the_specification() -> None:
    status, doc = stub({"model": "m", "input": TALK, "prompt_cache_key": "k"})
    assert status == 200
    check_compact_resource(doc)
    user, item = doc["output"]
    assert user["content"] == [{"type": "input_text", "text": "We launch on Tuesday."}]
    assert item["id"] == "cmp_rid"
    summary = "The stub compacted 2 items: We launch on Tuesday. | Understood: Tuesday."
    assert item["encrypted_content"] == compaction_content(summary)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": TALK}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": TALK, "stream": True}, "stream"),
    ],
)
def test_the_stub_refuses_what_openai_refuses(body: dict[str, Any], param: str) -> None:
    status, doc = stub(body)
    assert status == 400 and doc["error"]["param"] == param


def test_the_stub_reads_its_compaction_back_and_refuses_another() -> None:
    _, doc = stub({"model": "m", "input": TALK})
    window = [*doc["output"], {"type": "message", "role": "user", "content": "go on"}]
    body = msgspec.json.encode({"model": "m", "input": window})
    req = to_stub_request(decode_responses_request(body), "r2")
    assert req.messages[1] == (
        Role.User,
        "The stub compacted 2 items: We launch on Tuesday. | Understood: Tuesday.",
    )
    forged = base64.b64encode(b"not the stub's").decode()
    window[1] = {**window[1], "encrypted_content": forged}
    body = msgspec.json.encode({"model": "m", "input": window})
    with pytest.raises(Exception) as err:
        to_stub_request(decode_responses_request(body), "r3")
    assert getattr(err.value, "param", None) == "input[1].encrypted_content"
