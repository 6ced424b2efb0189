"""``flatgate stub --protocol openai-responses`` spoken to with the official
openai SDK's ``responses`` client: what the SDK parses is what the stub says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.servers import Server
from tests.stub.helpers import stub

pytestmark = pytest.mark.integration

KEY = "sk-stub-test"
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "lookup",
        "description": "looks things up",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
        "strict": False,
    }
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("responses-stub")
    with stub("openai-responses", d, "--api-key", KEY) as s:
        yield s


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=10)
    yield c
    c.close()


def test_create_echoes_the_last_user_message(client: openai.OpenAI) -> None:
    resp = client.responses.create(
        model="echo", instructions="be brief", input="the quick brown fox"
    )
    assert resp.status == "completed"
    assert resp.output_text == "the quick brown fox"
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (6, 4)


def test_stream_events_and_the_final_response(client: openai.OpenAI) -> None:
    with client.responses.stream(model="echo", input="one two three") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas == ["one ", "two ", "three"]
    assert final.output_text == "one two three"


def test_a_forced_function_call_and_its_round_trip(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="echo",
        input="weather in Paris",
        tools=TOOLS,
        tool_choice={"type": "function", "name": "lookup"},
    )
    (call,) = first.output
    assert call.type == "function_call"
    assert (call.name, call.call_id, call.arguments) == (
        "lookup",
        "call_stub",
        '{"input": "weather in Paris"}',
    )
    second = client.responses.create(
        model="echo",
        tools=TOOLS,
        input=[
            {"role": "user", "content": "weather in Paris"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": "lookup",
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "18C"},
            {"role": "user", "content": "thanks"},
        ],
    )
    assert second.output_text == "thanks"


def test_encrypted_reasoning_goes_back_and_is_accepted(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="echo",
        input="think first",
        reasoning={"effort": "low", "summary": "auto"},
        include=["reasoning.encrypted_content"],
        store=False,
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content
    assert reasoning.summary[0].text == "The user wrote 2 words; I repeat them back."
    history: list[Any] = [item.model_dump(exclude_none=True) for item in first.output]
    second = client.responses.create(
        model="echo", input=[*history, {"role": "user", "content": "again"}], store=False
    )
    assert second.output_text == "again"
    forged: Any = {**history[0], "encrypted_content": "forged"}
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="echo", input=[forged, {"role": "user", "content": "x"}])
    assert info.value.code == "invalid_encrypted_content"


def test_incomplete_when_the_output_limit_cuts(client: openai.OpenAI) -> None:
    resp = client.responses.create(model="echo", input="one two three", max_output_tokens=2)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text == "one two "


def test_faults_are_openais_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as limited:
        client.responses.create(model="echo@rate_limit", input="x")
    assert limited.value.response.headers["retry-after"] == "1"
    with pytest.raises(openai.BadRequestError) as rejected:
        client.responses.create(model="echo@reject", input="x")
    assert rejected.value.code == "context_length_exceeded"
    assert rejected.value.param == "input"
    failed = list(client.responses.create(model="echo@error:1", input="a b c", stream=True))
    assert [e.type for e in failed][-1] == "response.failed"


def test_the_key_is_required(server: Server) -> None:
    with (
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0) as c,
        pytest.raises(openai.AuthenticationError),
    ):
        c.responses.create(model="echo", input="x")


def test_models_are_listed(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["flatgate-echo"]
