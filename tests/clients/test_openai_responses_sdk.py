"""The official ``openai`` SDK's Responses client (its ``responses`` resource)
through the gateway to the stub in each backend protocol: ``create`` whole
and streamed, the ``stream(...)`` helper, ``retrieve``, ``input_items.list``,
``delete``, a function tool's round trip (with ``previous_response_id`` and
with the whole history), chaining, ``store: false``, and stored responses
that only their tenant can see.

What the stub echoes is deterministic (the last user message, one token per
word, usage counting every word it was sent), so each answer is checked
exactly, and a chain is seen in the input tokens the backend counted.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.responses import FunctionToolParam, ToolChoiceFunctionParam

from tests.clients.conftest import PROTOCOLS, ClientStack, model

pytestmark = pytest.mark.integration

TEXT = "the quick brown fox jumps over the lazy dog"
WORDS = len(TEXT.split())
LOOKUP: FunctionToolParam = {
    "type": "function",
    "name": "lookup",
    "description": "Look the text up",
    "parameters": {
        "type": "object",
        "properties": {"input": {"type": "string"}},
        "required": ["input"],
        "additionalProperties": False,
    },
    "strict": True,
}
FORCE_LOOKUP: ToolChoiceFunctionParam = {"type": "function", "name": "lookup"}
# The documented order of a streamed text answer (deltas collapsed).
TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]
TOOL_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]


@pytest.fixture(params=PROTOCOLS)
def name(request: pytest.FixtureRequest) -> str:
    return model(request.param)


def collapsed(kinds: list[str]) -> list[str]:
    """The event types with runs of one delta type collapsed to one."""
    return [k for i, k in enumerate(kinds) if not (k.endswith(".delta") and kinds[i - 1] == k)]


def check_sequence(events: list[Any]) -> None:
    seq = [e.sequence_number for e in events]
    assert seq == sorted(set(seq)), f"sequence_number must strictly increase: {seq}"


def test_create_whole(stack: ClientStack, name: str) -> None:
    r = stack.client().responses.create(model=name, input=TEXT)
    assert r.id.startswith("resp_")
    assert r.object == "response" and r.status == "completed"
    assert r.output_text == TEXT
    [item] = r.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert [p.type for p in item.content] == ["output_text"]
    assert r.usage is not None
    assert (r.usage.input_tokens, r.usage.output_tokens) == (WORDS, WORDS)
    assert r.usage.total_tokens == 2 * WORDS


def test_create_streamed_follows_the_documented_events(stack: ClientStack, name: str) -> None:
    events: list[Any] = list(stack.client().responses.create(model=name, input=TEXT, stream=True))
    check_sequence(events)
    assert collapsed([e.type for e in events]) == TEXT_EVENTS
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    # The backend's words that arrived in one read come as one delta: each
    # delta is whole words, however the reads fell.
    assert "".join(deltas) == TEXT and 1 <= len(deltas) <= WORDS
    assert all(d.endswith(" ") for d in deltas[:-1])
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == TEXT
    created, completed = events[0].response, events[-1].response
    assert created.id == completed.id and created.status == "in_progress"
    assert completed.status == "completed" and completed.output_text == TEXT
    assert completed.usage is not None and completed.usage.output_tokens == WORDS


def test_the_stream_helper_and_retrieve(stack: ClientStack, name: str) -> None:
    client = stack.client()
    with client.responses.stream(model=name, input=TEXT, instructions="echo") as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == TEXT
    assert final.output_text == TEXT and final.status == "completed"
    again = client.responses.retrieve(final.id)
    assert again.id == final.id and again.status == "completed"
    assert again.output_text == TEXT
    assert again.instructions == "echo"
    assert again.usage is not None and again.usage.output_tokens == WORDS


def test_input_items_list_and_delete(stack: ClientStack, name: str) -> None:
    client = stack.client()
    r = client.responses.create(
        model=name,
        input=[
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "input_text", "text": TEXT}]},
        ],
    )
    assert r.output_text == TEXT

    def texts(order: Any) -> list[tuple[str, str]]:
        page = client.responses.input_items.list(r.id, order=order)
        items: list[Any] = [i for i in page.data if i.type == "message"]
        return [(i.role, i.content[0].text) for i in items]

    assert texts("asc") == [("developer", "be brief"), ("user", TEXT)]
    assert texts(openai.omit) == [("user", TEXT), ("developer", "be brief")]  # desc
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)


def test_store_false_stores_nothing(stack: ClientStack, name: str) -> None:
    client = stack.client()
    r = client.responses.create(model=name, input=TEXT, store=False)
    assert r.output_text == TEXT
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=name, input="next", previous_response_id=r.id)
    assert info.value.param == "previous_response_id"


def test_previous_response_id_prepends_the_chain(stack: ClientStack, name: str) -> None:
    client = stack.client()
    first = client.responses.create(model=name, input="first question asked")
    second = client.responses.create(
        model=name, input="and a second one", previous_response_id=first.id
    )
    third = client.responses.create(model=name, input="third", previous_response_id=second.id)
    assert [r.output_text for r in (first, second, third)] == [
        "first question asked",
        "and a second one",
        "third",
    ]
    assert second.previous_response_id == first.id
    # The backend counted every word it was sent: the chain's inputs and outputs.
    assert first.usage is not None and second.usage is not None and third.usage is not None
    assert second.usage.input_tokens == 3 + 3 + 4
    assert third.usage.input_tokens == 3 + 3 + 4 + 4 + 1


def forced_call(stack: ClientStack, name: str, store: bool = True) -> Any:
    r = stack.client().responses.create(
        model=name, input=TEXT, tools=[LOOKUP], tool_choice=FORCE_LOOKUP, store=store
    )
    assert r.status == "completed" and r.output_text == ""
    [call] = r.output
    assert call.type == "function_call" and call.name == "lookup"
    assert call.call_id and call.id
    assert json.loads(call.arguments) == {"input": TEXT}
    return r


def test_a_tool_round_trip_with_previous_response_id(stack: ClientStack, name: str) -> None:
    r = forced_call(stack, name)
    [call] = r.output
    answer = stack.client().responses.create(
        model=name,
        previous_response_id=r.id,
        tools=[LOOKUP],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "found it"}],
    )
    assert answer.status == "completed" and answer.output_text == TEXT
    assert answer.usage is not None
    # The user's words, and the tool's output's two, were sent.
    assert answer.usage.input_tokens >= WORDS + 2


def test_a_tool_round_trip_with_the_whole_history(stack: ClientStack, name: str) -> None:
    r = forced_call(stack, name, store=False)
    [call] = r.output
    answer = stack.client().responses.create(
        model=name,
        store=False,
        tools=[LOOKUP],
        input=[
            {"role": "user", "content": TEXT},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "found it"},
        ],
    )
    assert answer.status == "completed" and answer.output_text == TEXT


def test_a_streamed_tool_call(stack: ClientStack, name: str) -> None:
    events: list[Any] = list(
        stack.client().responses.create(
            model=name, input=TEXT, tools=[LOOKUP], tool_choice=FORCE_LOOKUP, stream=True
        )
    )
    check_sequence(events)
    assert collapsed([e.type for e in events]) == TOOL_EVENTS
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"input": TEXT}
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == args
    [call] = events[-1].response.output
    assert call.type == "function_call" and call.arguments == args


def test_another_tenant_cannot_see_a_stored_response(stack: ClientStack, name: str) -> None:
    mine = stack.client("sk-flatgate-acme").responses.create(model=name, input=TEXT)
    theirs = stack.client("sk-flatgate-globex")
    with pytest.raises(openai.NotFoundError):
        theirs.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError) as info:
        theirs.responses.create(model=name, input="x", previous_response_id=mine.id)
    assert info.value.param == "previous_response_id"
    assert info.value.code == "previous_response_not_found"
    # Still there for its own tenant.
    assert stack.client("sk-flatgate-acme").responses.retrieve(mine.id).output_text == TEXT
