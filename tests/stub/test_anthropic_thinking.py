"""The Anthropic stub's thinking and mid-conversation system messages: it
thinks when asked (a signature it can check, or redacted data on Anthropic's
test string), refuses a forged signature in Anthropic's words, and takes a
``system`` message inside ``messages`` only with the beta, where Anthropic's
placement rules allow it. Through the official SDK where a client is involved.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.anthropic.stub_request import (
    REDACTED_DATA,
    REDACTED_TRIGGER,
    signature,
)
from flatgate.proxy.backends.dialect import Rejected, answer
from flatgate.proxy.wire.schema import Role
from tests.servers import Server
from tests.stub.helpers import sse_events, stub

WIRE = AnthropicWire()
MID = "mid-conversation-system-2026-04-07"
THINK: Any = {"type": "enabled", "budget_tokens": 1024}
THOUGHT = "The user wrote 3 words; I repeat them back."


def parse_error(body: dict[str, Any], beta: str = "") -> str:
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": beta}
    with pytest.raises(Rejected) as info:
        WIRE.parse(json.dumps(body).encode(), headers.get)
    assert info.value.reply.status == 400
    message: str = json.loads(info.value.reply.body)["error"]["message"]
    return message


def conversation(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 16, "messages": list(messages)}


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def thought(thinking: str, sig: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": thinking, "signature": sig},
            {"type": "text", "text": "ok"},
        ],
    }


# -- request rules (pure) ----------------------------------------------------------


def test_a_forged_or_edited_signature_is_refused_in_anthropics_words() -> None:
    for sig, text in (("forged", THOUGHT), (signature(THOUGHT), THOUGHT + " edited")):
        body = conversation(user("a b c"), thought(text, sig), user("again"))
        assert parse_error(body) == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_redacted_data_must_be_the_stubs() -> None:
    block = {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]}
    body = conversation(user("a"), block, user("b"))
    assert "Invalid `data` in `redacted_thinking` block" in parse_error(body)


@pytest.mark.parametrize(
    ("messages", "wording"),
    [
        ([system("s"), user("a")], "cannot be the first message"),
        ([user("a"), system("s"), system("t")], "consecutive system messages"),
        ([user("a"), {"role": "assistant", "content": "b"}, system("s")], "follow a user"),
        ([user("a"), system("s"), user("b")], "followed by an assistant turn"),
    ],
    ids=["first", "adjacent", "after-assistant", "before-user"],
)
def test_system_messages_follow_anthropics_placement_rules(
    messages: list[dict[str, Any]], wording: str
) -> None:
    assert wording in parse_error(conversation(*messages), beta=MID)


def test_a_system_message_in_place_is_a_system_message_of_the_echo() -> None:
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": f"x, {MID}"}
    body = conversation(user("a b"), system("be brief"))
    req = WIRE.parse(json.dumps(body).encode(), headers.get)
    assert req.messages == ((Role.User, "a b"), (Role.System, "be brief"))


# -- through the SDK ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("anthropic", tmp_path_factory.mktemp("anthropic-thinking")) as s:
        yield s


@pytest.fixture
def client(server: Server) -> Iterator[anthropic.Anthropic]:
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=10)
    yield c
    c.close()


def test_a_streamed_answer_thinks_first_and_its_signature_goes_back(
    client: anthropic.Anthropic,
) -> None:
    with client.messages.stream(
        model="m", max_tokens=64, thinking=THINK, messages=[user("one two three")]
    ) as s:
        message = s.get_final_message()
    first, second = message.content
    assert first.type == "thinking" and second.type == "text"
    assert (first.thinking, first.signature) == (THOUGHT, signature(THOUGHT))
    assert second.text == "one two three"
    history: Any = [user("one two three"), {"role": "assistant", "content": message.content}]
    again = client.messages.create(
        model="m", max_tokens=64, thinking=THINK, messages=[*history, user("four")]
    )
    assert [b.type for b in again.content] == ["thinking", "text"]
    forged = [
        {"type": "thinking", "thinking": THOUGHT, "signature": "Zm9yZ2Vk"},
        {"type": "text", "text": "one two three"},
    ]
    history[1] = {"role": "assistant", "content": forged}
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `thinking` block"):
        client.messages.create(model="m", max_tokens=64, messages=[*history, user("four")])


def test_the_documented_test_string_makes_the_thinking_redacted(
    client: anthropic.Anthropic,
) -> None:
    m = client.messages.create(
        model="m", max_tokens=64, thinking=THINK, messages=[user(REDACTED_TRIGGER + " hi")]
    )
    assert m.content[0].type == "redacted_thinking"
    assert m.content[0].data == REDACTED_DATA


def test_the_streamed_events_put_thinking_at_index_0(server: Server) -> None:
    body = conversation(user("a b c"))
    body.update(stream=True, thinking=THINK, max_tokens=8)
    r = httpx.post(
        f"{server.url}/v1/messages",
        json=body,
        headers={"anthropic-version": "2023-06-01", "x-api-key": "unused"},
    )
    events = [(name, data) for name, data in sse_events(r.text) if name != "ping"]
    blocks = [
        (d["index"], d["content_block"]["type"]) for n, d in events if n == "content_block_start"
    ]
    assert blocks == [(0, "thinking"), (1, "text")]
    deltas = [
        d["delta"]["type"] for n, d in events if n == "content_block_delta" and d["index"] == 0
    ]
    assert deltas == ["thinking_delta", "signature_delta"]
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert stops == [0, 1]


def test_without_thinking_there_is_no_thinking_block(client: anthropic.Anthropic) -> None:
    m = client.messages.create(model="m", max_tokens=64, messages=[user("a")])
    assert [b.type for b in m.content] == ["text"]
    disabled: Any = {"type": "disabled"}
    m = client.messages.create(model="m", max_tokens=64, thinking=disabled, messages=[user("a")])
    assert [b.type for b in m.content] == ["text"]


def test_the_echo_is_the_same_with_or_without_thinking() -> None:
    # The thinking block is the wire's own: the echo's answer does not change.
    headers = {"anthropic-version": "2023-06-01"}
    plain = WIRE.parse(json.dumps(conversation(user("x y"))).encode(), headers.get)
    body = conversation(user("x y"))
    body["thinking"] = THINK
    thinking = WIRE.parse(json.dumps(body).encode(), headers.get)
    assert thinking.params == {"thinking": THINK} and plain.params == {}
    assert answer(thinking).text == answer(plain).text == "x y"
