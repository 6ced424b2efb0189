"""The OpenAI Chat Completions edge's extras (issue 22): every top-level field
with no wire slot travels in ``CompletionRequest.extras`` as the client's own
bytes (dialect ``OpenAIChat``), known or not; and logprobs come back, in the
streamed chunks and the whole answer, as the backend sent them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.openai.render import Aggregator, StreamRenderer
from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.openai_chat.request import EXTRA_FIELDS, decode, decode_request
from flatgate.proxy.backends.openai.adapter import OpenAIStream
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import ApiDialect
from tests.backends.helpers import data_events, run
from tests.edge.test_app import app_with, call, chat

HEAD = '{"model":"m","messages":[{"role":"user","content":"hi"}]'
CHAT = int(ApiDialect.OPENAI_CHAT)


def wire_of(body: str | bytes) -> Request:
    d = decode(body.encode() if isinstance(body, str) else body)
    return read_request(write_request(d.req, provider=0, model_name="m", fields=d.fields))


def test_a_request_with_no_extra_field_has_no_extras() -> None:
    req = wire_of(HEAD + ',"temperature":0.5,"stream":true}')
    assert (req.extras, req.extras_dialect) == ("", 0)


def test_known_extra_fields_travel_as_the_client_wrote_them() -> None:
    fields = (
        '"logprobs" : true,"top_logprobs":3,"logit_bias":{"50256" :  -100},'
        '"min_p":5e-2,"repetition_penalty":1.10,"guided_choice":["a","b"],'
        '"chat_template_kwargs":{"enable_thinking":false},"store":false'
    )
    req = wire_of(HEAD + "," + fields + "}")
    assert req.extras_dialect == CHAT
    # byte for byte: the spacing, 5e-2 and 1.10 as sent
    for member in ('"logit_bias":{"50256" :  -100}', '"min_p":5e-2', '"repetition_penalty":1.10'):
        assert member in req.extras
    assert json.loads(req.extras) == json.loads("{" + fields + "}")


def test_unknown_fields_travel_too() -> None:
    req = wire_of(HEAD + ',"x_vendor":{"a":[1,2]},"min_p":0.1,"functions":[],"temperature":1}')
    assert json.loads(req.extras) == {"min_p": 0.1, "x_vendor": {"a": [1, 2]}, "functions": []}
    assert req.temperature == 1.0  # a slotted field stays in its slot, not in the extras


def test_every_documented_field_is_a_known_extra() -> None:
    named = {
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "prediction",
        "modalities",
        "audio",
        "web_search_options",
        "service_tier",
        "store",
        "reasoning_effort",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
        "min_p",
        "repetition_penalty",
        "ignore_eos",
        "min_tokens",
        "chat_template_kwargs",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "structured_outputs",
    }
    assert named <= set(EXTRA_FIELDS)
    body = "{" + HEAD[1:] + "".join(f',"{k}":1' for k in sorted(named)) + "}"
    d = decode(body.encode())
    assert d.fields is None  # one pass: every field is known
    assert json.loads(wire_of(body).extras) == dict.fromkeys(named, 1)


def test_a_bad_known_field_is_still_named_beside_an_unknown_one() -> None:
    with pytest.raises(InvalidRequest) as info:
        decode((HEAD + ',"x_unknown":1,"temperature":"hot"}').encode())
    assert info.value.param == "temperature"
    with pytest.raises(InvalidRequest) as info:
        decode(b'{"x_unknown":1,"messages":[{"role":"user","content":"hi"}]}')
    assert info.value.param == "model"


def test_an_extra_that_is_not_utf8_is_invalid_json() -> None:
    body = (HEAD + ',"x":"').encode() + b"\xff" + b'"}'
    d = decode(body)
    with pytest.raises(InvalidRequest) as info:
        write_request(d.req, provider=0, model_name="m", fields=d.fields)
    assert info.value.code.code == "invalid_json"


def test_decode_request_keeps_the_known_extras() -> None:
    req = decode_request((HEAD + ',"min_p":0.2}').encode())
    out = read_request(write_request(req, provider=0, model_name="m"))
    assert json.loads(out.extras) == {"min_p": 0.2}


# -- logprobs back -------------------------------------------------------------------


def tok(text: str, lp: float) -> dict[str, Any]:
    return {"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []}


BACKEND = data_events(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {"content": "Hel"},
                "logprobs": {"content": [tok("Hel", -0.5)], "refusal": None},
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"content": "lo"},
                "logprobs": {"content": [tok("lo", -0.25)], "refusal": None},
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {"content": "!"}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
)


def chunks() -> list[Any]:
    return run(OpenAIStream("rid", "m"), [BACKEND])


def test_streamed_chunks_carry_the_backends_logprobs() -> None:
    r = StreamRenderer(completion_id="c1", created=1, model="m")
    out = b"".join(r.feed(c) for c in chunks()) + r.end()
    events = [
        ChatCompletionChunk.model_validate_json(line[6:])
        for line in out.split(b"\n\n")
        if line.startswith(b"data: {")
    ]
    texts = [(e.choices[0].delta.content, e.choices[0].logprobs) for e in events if e.choices]
    with_lp = [(t, lp.content[0].token) for t, lp in texts if lp is not None and lp.content]
    assert with_lp == [("Hel", "Hel"), ("lo", "lo")]
    assert "".join(t or "" for t, _ in texts) == "Hello!"
    raw = [json.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: {")]
    by_text = {e["choices"][0]["delta"].get("content"): e["choices"][0] for e in raw}
    assert by_text["Hel"]["logprobs"] == {"content": [tok("Hel", -0.5)], "refusal": None}
    assert by_text["Hel"]["delta"]["role"] == "assistant"
    assert by_text["!"]["logprobs"] is None


def test_the_whole_answer_joins_the_logprobs() -> None:
    a = Aggregator(completion_id="c1", created=1, model="m")
    a.feed_all(chunks())
    body = json.loads(a.body())
    choice = body["choices"][0]
    assert choice["message"]["content"] == "Hello!"
    assert choice["logprobs"] == {"content": [tok("Hel", -0.5), tok("lo", -0.25)], "refusal": None}
    ChatCompletion.model_validate(body)


def test_no_logprobs_means_null() -> None:
    a = Aggregator(completion_id="c1", created=1, model="m")
    plain = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}
    a.feed_all(run(OpenAIStream("rid", "m"), [data_events(plain)]))
    assert json.loads(a.body())["choices"][0]["logprobs"] is None


def test_a_field_named_like_flatgates_own_extras_is_refused() -> None:
    d = decode((HEAD + ',"$headers":{"anthropic-beta":"x"}}').encode())
    with pytest.raises(InvalidRequest) as info:
        write_request(d.req, provider=0, model_name="m", fields=d.fields)
    assert info.value.param == "$headers"


# -- through the edge app -----------------------------------------------------------


async def test_the_app_sends_the_extras_and_refuses_flatgates_own_keys() -> None:
    app, transport = app_with()
    proto = await call(app, "POST", "/v1/chat/completions", chat(min_p=0.1, x_knob=[1]))
    assert proto.status == 200
    sent = read_request(transport.sent[0].body)
    assert json.loads(sent.extras) == {"min_p": 0.1, "x_knob": [1]}
    assert sent.extras_dialect == CHAT
    proto = await call(app, "POST", "/v1/chat/completions", chat(**{"$cache_control": []}))
    assert proto.status == 400
    assert proto.json()["error"]["param"] == "$cache_control"
    assert len(transport.sent) == 1
