"""Google's Gemini API through ``flatgate gateway``: the openai SDK (Chat
Completions and the Responses API) and the anthropic SDK reach a Gemini
model on ``flatgate stub --protocol gemini``, with an image, and a thought
signature's round trip (Gemini 3's function call, signed by the stub,
goes back through the Responses API's ``encrypted_content`` and the stub
checks it; and in the tool call's id, which carries it through Chat
Completions and the anthropic SDK too); embeddings; a quota's 429 with
RetryInfo's delay as ``Retry-After``; the gateway's readiness probe (the
API's model list, with the key). Every server a ``flatgate`` subprocess on loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.clients.cloud import CloudStack, image_turn
from tests.clients.media import b64, image_echo, png
from tests.servers import spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-flatgate-gemini"
# The stub's key: the gateway's x-goog-api-key.
SECRET = "gemini-stub-key"
PNG = png()
TEXT = "flatgate reaches gemini"
# route (the client's model name) -> the Gemini API's model
ROUTES = {
    "gemini-flash": "gemini-2.5-flash",
    "gemini-3": "gemini-3-pro-preview",
    "gemini-embed": "gemini-embedding-001",
    "gemini-throttled": "gemini-2.5-flash@rate_limit",
}


class GeminiStack(CloudStack):
    """The gateway in front of the gemini stub."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeminiStack]:
    d: Path = tmp_path_factory.mktemp("gemini")
    stub = spawn("stub", ["--protocol", "gemini", "--api-key", SECRET], d)
    backends = {
        route: {
            "url": f"{stub.url}/v1beta",
            "protocol": "gemini",
            "model": model,
            "api_key": SECRET,
        }
        for route, model in ROUTES.items()
    }
    config = write_stack(
        d / "gateway.toml",
        proxy={**QUIET, "cooldown_seconds": 0},
        backends=backends,
        routes={route: route for route in ROUTES},
        models=dict.fromkeys(ROUTES, "SelfHosted"),
        keys={KEY: "acme"},
    )
    gateway = spawn("gateway", ["--config", config, "--workers", "1"], d, env={"NO_PROXY": "*"})
    servers = [stub, gateway]
    start_all(servers)
    try:
        yield GeminiStack(gateway, stub, KEY)
    finally:
        stop_all(servers)


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_reaches_gemini_with_an_image(stack: GeminiStack, stream: bool) -> None:
    turn = image_turn(stack, "gemini-flash", TEXT, PNG, stream)
    text, finish, usage = turn.text, turn.finish, turn.usage
    assert text == f"{TEXT} {image_echo(PNG)}"
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens == len(text.split())
    seen = stack.stub_saw()["last_headers"]
    assert seen["authorization"] is None  # the key went as x-goog-api-key


_WEATHER: Any = {
    "type": "function",
    "name": "weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def test_a_thought_signature_goes_round_through_the_responses_api(stack: GeminiStack) -> None:
    """Gemini 3 signs its function call; the Responses API carries the
    signature to the client as a reasoning item's encrypted_content, and
    back: the stub checks it (a call without its signature is refused)."""
    ask: Any = [{"role": "user", "content": "weather in Paris?"}]
    with stack.openai() as client:
        first = client.responses.create(
            model="gemini-3", input=ask, tools=[_WEATHER],
            tool_choice={"type": "function", "name": "weather"},
            include=["reasoning.encrypted_content"], store=False,
        )  # fmt: skip
        kinds = [item.type for item in first.output]
        assert "function_call" in kinds and "reasoning" in kinds, kinds
        [reasoning] = [i for i in first.output if i.type == "reasoning"]
        assert reasoning.encrypted_content
        [call] = [i for i in first.output if i.type == "function_call"]
        assert call.name == "weather"
        back: Any = [
            *ask,
            *(item.model_dump(exclude_none=True) for item in first.output),
            {"type": "function_call_output", "call_id": call.call_id, "output": "21 C"},
        ]
        # The call is of the current turn (no user text after it): checked.
        second = client.responses.create(model="gemini-3", input=back, store=False)
        assert second.output_text == "weather in Paris?"
        # Without the reasoning item, and the call's id without the
        # signature the encoder also carries in it: refused.
        bare = call.call_id.partition("__thought__")[0]
        unsigned: Any = [
            {**b, "call_id": bare} if "call_id" in b else b
            for b in back
            if b.get("type") != "reasoning"
        ]
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="gemini-3", input=unsigned, store=False)
    assert "signature" in str(refused.value).lower()


def test_a_thought_signature_goes_round_through_chat_completions(stack: GeminiStack) -> None:
    """Chat Completions has no reasoning item: the signature rides in the
    tool call's id, and comes back with the call and its result."""
    tools: Any = [{"type": "function", "function": {k: v for k, v in _WEATHER.items()
                                                    if k != "type"}}]  # fmt: skip
    ask: Any = [{"role": "user", "content": "weather in Paris?"}]
    with stack.openai() as client:
        first = client.chat.completions.create(
            model="gemini-3", messages=ask, tools=tools,
            tool_choice={"type": "function", "function": {"name": "weather"}},
        )  # fmt: skip
        message = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls" and message.tool_calls
        [call] = message.tool_calls
        turn: Any = [
            *ask,
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "21 C"},
        ]
        second = client.chat.completions.create(model="gemini-3", messages=turn, tools=tools)
    assert second.choices[0].message.content == "weather in Paris?"


@pytest.mark.parametrize("stream", [False, True])
def test_a_thought_signature_goes_round_through_the_anthropic_sdk(
    stack: GeminiStack, stream: bool
) -> None:
    """Messages has no place for Gemini's signature but the tool_use id,
    which carries it: the call and its result go back, and the stub checks
    the signature; an id without it is refused."""
    tool: Any = {"name": "weather", "description": "The weather in a city",
                 "input_schema": _WEATHER["parameters"]}  # fmt: skip
    ask: Any = [{"role": "user", "content": "weather in Paris?"}]
    first: Any
    with stack.anthropic() as client:
        forced: Any = {"type": "tool", "name": "weather"}
        if stream:
            with client.messages.stream(
                model="gemini-3", max_tokens=256, messages=ask, tools=[tool], tool_choice=forced
            ) as events:
                first = events.get_final_message()
        else:
            first = client.messages.create(
                model="gemini-3", max_tokens=256, messages=ask, tools=[tool], tool_choice=forced
            )
        assert first.stop_reason == "tool_use"
        [call] = [b for b in first.content if b.type == "tool_use"]
        assert "__thought__" in call.id

        def turn(call_id: str) -> Any:
            used = {"type": "tool_use", "id": call_id, "name": call.name, "input": call.input}
            result = {"type": "tool_result", "tool_use_id": call_id, "content": "21 C"}
            return [*ask, {"role": "assistant", "content": [used]},
                    {"role": "user", "content": [result]}]  # fmt: skip

        second = client.messages.create(
            model="gemini-3", max_tokens=256, messages=turn(call.id), tools=[tool]
        )
        assert [b.text for b in second.content if b.type == "text"] == ["weather in Paris?"]
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(
                model="gemini-3", max_tokens=256, tools=[tool],
                messages=turn(call.id.partition("__thought__")[0]),
            )  # fmt: skip
    assert "thought_signature" in str(refused.value)


@pytest.mark.parametrize("stream", [False, True])
def test_the_anthropic_sdk_reaches_gemini_with_an_image(stack: GeminiStack, stream: bool) -> None:
    source = {"type": "base64", "media_type": "image/png", "data": b64(PNG)}
    image: Any = {"type": "image", "source": source}
    messages: Any = [{"role": "user", "content": [image, {"type": "text", "text": TEXT}]}]
    final: Any
    with stack.anthropic() as client:
        if stream:
            with client.messages.stream(
                model="gemini-flash", max_tokens=256, messages=messages
            ) as events:
                final = events.get_final_message()
        else:
            final = client.messages.create(model="gemini-flash", max_tokens=256, messages=messages)
    assert [b.text for b in final.content if b.type == "text"] == [f"{image_echo(PNG)} {TEXT}"]
    assert final.stop_reason == "end_turn"


def test_embeddings_one_and_many(stack: GeminiStack) -> None:
    with stack.openai() as client:
        one = client.embeddings.create(model="gemini-embed", input="a parrot", dimensions=16)
        many = client.embeddings.create(
            model="gemini-embed", input=["a parrot", "a cage"], dimensions=16
        )
    assert len(one.data) == 1 and len(one.data[0].embedding) == 16
    assert [len(d.embedding) for d in many.data] == [16, 16]
    assert many.data[0].embedding == one.data[0].embedding


def test_the_backend_is_ready_by_the_model_list(stack: GeminiStack) -> None:
    answer = httpx.get(
        f"{stack.stub.url}/v1beta/models?pageSize=1",
        headers={"x-goog-api-key": SECRET},
        timeout=10,
    )
    assert answer.status_code == 200 and answer.json()["models"]
    ready = httpx.get(f"{stack.gateway.url}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text


def test_a_quota_is_a_429_with_google_s_retry_delay(stack: GeminiStack) -> None:
    with stack.openai() as client, pytest.raises(openai.RateLimitError) as throttled:
        client.chat.completions.create(
            model="gemini-throttled", messages=[{"role": "user", "content": "x"}]
        )
    assert throttled.value.response.headers.get("retry-after") == "2"
