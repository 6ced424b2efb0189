"""One conversation, two client APIs, three backend protocols: the official
``openai`` SDK through ``/v1/chat/completions`` and the ``anthropic`` SDK
through ``/v1/messages`` of the same gateway, to the stub speaking fbs,
OpenAI and Anthropic (``tests.edge.anthropic.stack``), give the same text, the
same tool calls and the same stops: an Anthropic client reaching an
OpenAI-compatible server, and an OpenAI client reaching Claude, included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.edge.anthropic.stack import BACKENDS, KEY, MessagesStack

pytestmark = pytest.mark.integration

SYSTEM = "you echo"
TEXT = "the quick brown fox jumps over the lazy dog"
SCHEMA: Any = {"type": "object", "properties": {"input": {"type": "string"}}}


class Clients:
    def __init__(self, stack: MessagesStack) -> None:
        url = stack.gateway.url
        self.oai = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
        self.ant = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)

    def close(self) -> None:
        self.oai.close()
        self.ant.close()


@pytest.fixture(scope="module")
def clients(messages: MessagesStack) -> Iterator[Clients]:
    c = Clients(messages)
    yield c
    c.close()


def openai_text(c: Clients, model: str, text: str, **kw: Any) -> tuple[str, str]:
    """(text, finish reason), streamed."""
    chunks = list(
        c.oai.chat.completions.create(
            model=model,
            stream=True,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
            **kw,
        )
    )
    out = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    [finish] = [
        ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason
    ]
    return out, finish


def anthropic_text(c: Clients, model: str, text: str, **kw: Any) -> tuple[str, str]:
    """(text, stop reason), streamed."""
    with c.ant.messages.stream(
        model=model,
        max_tokens=kw.pop("max_tokens", 256),
        system=SYSTEM,
        messages=[{"role": "user", "content": text}],
        **kw,
    ) as s:
        out = "".join(s.text_stream)
        final = s.get_final_message()
    return out, str(final.stop_reason)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_the_same_text(clients: Clients, backend: str) -> None:
    model = BACKENDS[backend]
    assert openai_text(clients, model, TEXT) == (TEXT, "stop")
    assert anthropic_text(clients, model, TEXT) == (TEXT, "end_turn")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_the_same_cut_at_max_tokens(clients: Clients, backend: str) -> None:
    model = BACKENDS[backend]
    assert openai_text(clients, model, TEXT, max_tokens=3) == ("the quick brown ", "length")
    assert anthropic_text(clients, model, TEXT, max_tokens=3) == ("the quick brown ", "max_tokens")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_the_same_stop_sequence(clients: Clients, backend: str) -> None:
    """OpenAI's API does not say which sequence matched; Anthropic's does,
    from every backend that says it (the fbs wire, vLLM, Anthropic)."""
    model = BACKENDS[backend]
    assert openai_text(clients, model, TEXT, stop=["fox"]) == ("the quick brown ", "stop")
    whole: Any = clients.ant.messages.create(
        model=model,
        max_tokens=64,
        stop_sequences=["fox", "lazy"],
        messages=[{"role": "user", "content": TEXT}],
    )
    assert whole.content[0].text == "the quick brown "
    assert (whole.stop_reason, whole.stop_sequence) == ("stop_sequence", "fox")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_the_same_tool_call_and_round_trip(clients: Clients, backend: str) -> None:
    model = BACKENDS[backend]
    # OpenAI client.
    done: Any = clients.oai.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": TEXT}],
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
    )
    [call] = done.choices[0].message.tool_calls or []
    assert done.choices[0].finish_reason == "tool_calls"
    openai_call = (call.function.name, json.loads(call.function.arguments))
    after: Any = clients.oai.chat.completions.create(
        model=model,
        messages=[
            {"role": "user", "content": TEXT},
            done.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "found it"},
            {"role": "user", "content": "thanks, that is all"},
        ],
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}],
    )
    # Anthropic client.
    tools: Any = [{"name": "lookup", "input_schema": SCHEMA}]
    first: Any = clients.ant.messages.create(
        model=model,
        max_tokens=64,
        tools=tools,
        tool_choice={"type": "tool", "name": "lookup"},
        messages=[{"role": "user", "content": TEXT}],
    )
    [use] = first.content
    assert first.stop_reason == "tool_use"
    assert (use.name, use.input) == openai_call == ("lookup", {"input": TEXT})
    second: Any = clients.ant.messages.create(
        model=model,
        max_tokens=64,
        tools=tools,
        messages=[
            {"role": "user", "content": TEXT},
            {"role": "assistant", "content": [use.model_dump()]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "found it"},
                    {"type": "text", "text": "thanks, that is all"},
                ],
            },
        ],
    )
    assert second.content[0].text == after.choices[0].message.content == "thanks, that is all"
    assert (second.stop_reason, after.choices[0].finish_reason) == ("end_turn", "stop")
