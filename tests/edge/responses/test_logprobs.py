"""Logprobs through the Responses API both ways: asked for by ``top_logprobs``
or ``include: ["message.output_text.logprobs"]`` and mapped for each backend
API, and returned in the ``output_text.delta`` events, the ``output_text.done``
event and the message's ``output_text`` part, from a Chat Completions backend
and from a Responses-native one (whose adapter writes them in Chat
Completions' shape, so that every edge reads one shape). Every event and body
is checked against the openai SDK's types (``common``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from flatgate.edge_translator.openai.render import Aggregator as ChatAggregator
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import LOGPROBS_INCLUDE
from flatgate.proxy.backends.openai import adapter as openai
from flatgate.proxy.backends.openai.adapter import OpenAIStream
from flatgate.proxy.backends.responses.adapter import encode_request
from flatgate.proxy.backends.responses.stream import ResponsesStream
from flatgate.proxy.wire.schema import Role
from tests.backends import responses_events as rev
from tests.backends.helpers import data_events, run
from tests.backends.wire_requests import CHAT, RESPONSES, msg, wire
from tests.edge.responses.common import aggregate, decoded, render


def tok(token: str, logprob: float) -> dict[str, Any]:
    alt = {"token": token.upper(), "logprob": logprob - 1, "bytes": list(token.upper().encode())}
    return {
        "token": token,
        "logprob": logprob,
        "bytes": list(token.encode()),
        "top_logprobs": [alt],
    }


CHAT_BACKEND = data_events(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}]},
    {
        "choices": [
            {"index": 0, "delta": {"content": "Hel"}, "logprobs": {"content": [tok("Hel", -0.5)]}}
        ]
    },
    {
        "choices": [
            {"index": 0, "delta": {"content": "lo"}, "logprobs": {"content": [tok("lo", -0.25)]}}
        ]
    },
    {"choices": [{"index": 0, "delta": {"content": "!"}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
)


def responses_delta(text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {**rev.text_delta(0, text), "logprobs": logprobs}


# Responses deltas' entries have no ``bytes`` (the API's delta type has none) ...
R_HEL = {"token": "Hel", "logprob": -0.5, "top_logprobs": [{"token": "HEL", "logprob": -1.5}]}
R_LO = {"token": "lo", "logprob": -0.25, "top_logprobs": []}
# ... and the Responses API's output_text has them: the edge fills them in.
R_HEL_OUT = {
    "token": "Hel",
    "logprob": -0.5,
    "bytes": list(b"Hel"),
    "top_logprobs": [{"token": "HEL", "logprob": -1.5, "bytes": list(b"HEL")}],
}
R_LO_OUT = {"token": "lo", "logprob": -0.25, "bytes": list(b"lo"), "top_logprobs": []}
RESPONSES_BACKEND = rev.events(
    rev.created(),
    rev.message(0, done=False),
    responses_delta("Hel", [R_HEL]),
    responses_delta("lo", [R_LO]),
    responses_delta("!", []),
    rev.completed(),
)


def chat_chunks() -> list[Any]:
    return run(OpenAIStream("rid", "m"), [CHAT_BACKEND])


# -- the answer ------------------------------------------------------------------


def test_each_delta_carries_its_tokens_logprobs_and_the_message_joins_them() -> None:
    events = render(*chat_chunks())
    deltas = [d for n, d in events if n == "response.output_text.delta"]
    assert [(d["delta"], d["logprobs"]) for d in deltas] == [
        ("Hel", [tok("Hel", -0.5)]),
        ("lo", [tok("lo", -0.25)]),
        ("!", []),
    ]
    joined = [tok("Hel", -0.5), tok("lo", -0.25)]
    (done,) = [d for n, d in events if n == "response.output_text.done"]
    assert done["logprobs"] == joined
    (part,) = [d for n, d in events if n == "response.content_part.done"]
    assert part["part"]["logprobs"] == joined
    (item,) = [d for n, d in events if n == "response.output_item.done"]
    assert item["item"]["content"][0]["logprobs"] == joined
    (end,) = [d for n, d in events if n == "response.completed"]
    assert end["response"]["output"][0]["content"][0]["logprobs"] == joined


def test_the_whole_response_has_them_in_its_output_text() -> None:
    body = aggregate(*chat_chunks())
    text = body["output"][0]["content"][0]
    assert text["text"] == "Hello!"
    assert text["logprobs"] == [tok("Hel", -0.5), tok("lo", -0.25)]


def test_an_answer_without_logprobs_reads_as_before() -> None:
    plain = data_events(
        {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}
    )
    body = aggregate(*run(OpenAIStream("rid", "m"), [plain]))
    assert "logprobs" not in body["output"][0]["content"][0]
    events = render(*run(OpenAIStream("rid", "m"), [plain]))
    (delta,) = [d for n, d in events if n == "response.output_text.delta"]
    assert delta["logprobs"] == []


def test_a_responses_backends_logprobs_reach_a_responses_client() -> None:
    chunks = run(ResponsesStream("rid", "m"), [RESPONSES_BACKEND])
    body = aggregate(*chunks)
    assert body["output"][0]["content"][0]["logprobs"] == [R_HEL_OUT, R_LO_OUT]
    events = render(*chunks)
    deltas = [d["logprobs"] for n, d in events if n == "response.output_text.delta"]
    assert deltas == [[R_HEL_OUT], [R_LO_OUT], []]


def test_a_responses_backends_logprobs_reach_a_chat_client_in_chats_shape() -> None:
    a = ChatAggregator(completion_id="c1", created=1, model="m")
    a.feed_all(run(ResponsesStream("rid", "m"), [RESPONSES_BACKEND]))
    body = json.loads(a.body())
    assert body["choices"][0]["message"]["content"] == "Hello!"
    assert body["choices"][0]["logprobs"]["content"] == [R_HEL, R_LO]
    ChatCompletion.model_validate(body)


# -- the request -----------------------------------------------------------------


def chat_body(extras: dict[str, Any], **kw: Any) -> dict[str, Any]:
    req = wire([msg(Role.User, "hi")], extras=extras, dialect=RESPONSES)
    omitted: list[str] = kw.pop("omitted", [])
    out: dict[str, Any] = json.loads(openai.encode_request(req, model="m", omitted=omitted))
    return out


@pytest.mark.parametrize(
    ("extras", "want"),
    [
        ({"top_logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
        ({"include": [LOGPROBS_INCLUDE]}, {"logprobs": True}),
        (
            {"include": [LOGPROBS_INCLUDE], "top_logprobs": 2},
            {"logprobs": True, "top_logprobs": 2},
        ),
    ],
)
def test_a_chat_backend_is_asked_for_logprobs_once(
    extras: dict[str, Any], want: dict[str, Any]
) -> None:
    got = chat_body(extras)
    assert {k: got[k] for k in want} == want
    assert "include" not in got


def test_the_rest_of_include_is_named_as_left_out() -> None:
    omitted: list[str] = []
    req = wire(
        [msg(Role.User, "hi")],
        extras={"include": ["reasoning.encrypted_content", LOGPROBS_INCLUDE]},
        dialect=RESPONSES,
    )
    got = json.loads(openai.encode_request(req, model="m", omitted=omitted))
    assert got["logprobs"] is True
    assert omitted == ["include"]
    omitted = []
    req = wire([msg(Role.User, "hi")], extras={"include": [LOGPROBS_INCLUDE]}, dialect=RESPONSES)
    openai.encode_request(req, model="m", omitted=omitted)
    assert omitted == []


def test_an_include_that_is_not_a_list_of_strings_is_untranslatable() -> None:
    req = wire([msg(Role.User, "hi")], extras={"include": "all"}, dialect=RESPONSES)
    with pytest.raises(Untranslatable, match="include"):
        openai.encode_request(req, model="m")


def test_a_chat_clients_logprobs_ask_a_responses_backend_to_include_them() -> None:
    req = wire([msg(Role.User, "hi")], extras={"logprobs": True, "top_logprobs": 4}, dialect=CHAT)
    got = json.loads(encode_request(req, model="m"))
    assert got["include"] == [LOGPROBS_INCLUDE]
    assert got["top_logprobs"] == 4
    off = wire([msg(Role.User, "hi")], extras={"logprobs": False}, dialect=CHAT)
    assert "include" not in json.loads(encode_request(off, model="m"))


def test_the_responses_edge_keeps_the_ask_in_its_extras() -> None:
    d = decoded(top_logprobs=2, include=[LOGPROBS_INCLUDE])
    fields = json.loads(d.extras)
    assert fields["top_logprobs"] == 2
    assert fields["include"] == [LOGPROBS_INCLUDE]
