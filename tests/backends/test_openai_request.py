"""``backends.openai``: the Chat Completions request a decoded request becomes,
and what the adapter sends it with.

Requests are written by the edge from Chat Completions JSON and read back with
``read_request`` (``helpers.request``), as the proxy sees them, or built as
``wire.request.decode`` Structs where the edge would refuse the shape.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter, OpenAIStream, encode_request
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.openai.whole import OpenAIWhole
from flatgate.proxy.wire.request.decode import Function, Message, Request, Tool
from flatgate.proxy.wire.schema import JSON, SSE, ApiDialect, ToolChoiceMode
from tests.backends.helpers import request, request_raw, user

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
}


def encode(body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    kw.setdefault("model", "upstream-model")
    out: dict[str, Any] = json.loads(encode_request(request(body), **kw))
    return out


def minimal(**extra: Any) -> dict[str, Any]:
    return {"model": "client-model", "messages": [user("hi")], **extra}


def adapter(**kw: Any) -> OpenAIAdapter:
    kw.setdefault("url", "https://api.example.com/v1")
    return OpenAIAdapter(OpenAIConfig(name="oa", protocol="openai", **kw))


# -- a stream, or a whole answer ----------------------------------------------


@pytest.mark.parametrize(
    "client",
    [
        {},
        {"stream": False},
        {"stream": True},
        {"stream": True, "stream_options": {"include_usage": False}},
        {"stream": True, "stream_options": {"include_usage": True}},
    ],
    ids=["unset", "false", "true", "usage-off", "usage-on"],
)
def test_a_stream_is_asked_for_with_its_usage_whatever_the_client_said(
    client: dict[str, Any],
) -> None:
    body = encode(minimal(**client))
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("client", [{}, {"stream": False}], ids=["unset", "false"])
def test_a_whole_answer_is_asked_for_with_stream_false_and_no_stream_options(
    client: dict[str, Any],
) -> None:
    body = encode(minimal(**client), whole=True)
    assert body["stream"] is False
    assert "stream_options" not in body


def test_a_whole_request_is_the_streamed_one_but_for_stream() -> None:
    full = minimal(temperature=0.5, max_tokens=9, n=2, stop="x", logprobs=True, top_logprobs=2)
    streamed, whole = encode(full), encode(full, whole=True)
    assert streamed.pop("stream") is True and streamed.pop("stream_options")
    assert whole.pop("stream") is False
    assert whole == streamed


def test_chat_extras_never_set_stream_or_stream_options_of_a_whole_request() -> None:
    req = Request(
        model_name="m",
        messages=[Message(role="user", content="x")],
        extras='{"stream": true, "stream_options": {"include_usage": true}, "min_p": 0.1}',
        extras_dialect=int(ApiDialect.OPENAI_CHAT),
    )
    body = json.loads(encode_request(req, model="m", whole=True))
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "stream": False,
        "min_p": 0.1,
    }


def test_a_minimal_request() -> None:
    assert encode(minimal()) == {
        "model": "upstream-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


# -- max tokens ----------------------------------------------------------------


def test_max_tokens_goes_in_max_tokens_by_default() -> None:
    body = encode(minimal(max_tokens=77))
    assert body["max_tokens"] == 77
    assert "max_completion_tokens" not in body


def test_max_tokens_goes_in_max_completion_tokens_when_configured() -> None:
    body = encode(minimal(max_tokens=77), max_tokens_field="max_completion_tokens")
    assert body["max_completion_tokens"] == 77
    assert "max_tokens" not in body


def test_the_clients_max_completion_tokens_arrives_in_the_configured_field() -> None:
    assert encode(minimal(max_completion_tokens=12))["max_tokens"] == 12
    body = encode(minimal(max_completion_tokens=12), max_tokens_field="max_completion_tokens")
    assert body["max_completion_tokens"] == 12


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_no_max_tokens_sends_neither_field(field: str) -> None:
    body = encode(minimal(), max_tokens_field=field)
    assert "max_tokens" not in body
    assert "max_completion_tokens" not in body


def test_the_adapters_max_tokens_field_is_used() -> None:
    a = adapter(max_tokens_field="max_completion_tokens")
    req = request(minimal(max_tokens=5))
    out = json.loads(a.prepare(Inbound(b"", lambda: req, "rid", "")).body)
    assert out["max_completion_tokens"] == 5
    assert "max_tokens" not in out


# -- the model -----------------------------------------------------------------


def test_the_model_is_the_one_given_not_the_clients() -> None:
    assert encode(minimal(), model="gpt-4.1")["model"] == "gpt-4.1"


def test_the_adapter_sends_the_routed_model_name_without_an_override() -> None:
    req = request(minimal(), model_name="llama-3.1-8b")
    out = json.loads(adapter().prepare(Inbound(b"", lambda: req, "rid", "")).body)
    assert out["model"] == "llama-3.1-8b"


def test_the_adapter_sends_its_configured_model_over_the_routed_one() -> None:
    req = request(minimal(), model_name="llama-3.1-8b")
    out = json.loads(
        adapter(model="meta-llama/Llama-3.1-8B-Instruct")
        .prepare(Inbound(b"", lambda: req, "rid", ""))
        .body
    )
    assert out["model"] == "meta-llama/Llama-3.1-8B-Instruct"


# -- tools and tool_choice -------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "want"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
    ids=["auto", "none", "required", "function"],
)
def test_tool_choice_forms(choice: Any, want: Any) -> None:
    body = encode(minimal(tools=[WEATHER_TOOL], tool_choice=choice))
    assert body["tool_choice"] == want


def test_no_tool_choice_sends_none() -> None:
    assert "tool_choice" not in encode(minimal(tools=[WEATHER_TOOL]))


def test_tools_are_sent_in_the_apis_shape() -> None:
    body = encode(minimal(tools=[WEATHER_TOOL]))
    assert body["tools"] == [WEATHER_TOOL]


def test_a_tool_without_parameters_or_description_sends_neither() -> None:
    body = encode(minimal(tools=[{"type": "function", "function": {"name": "now"}}]))
    assert body["tools"] == [{"type": "function", "function": {"name": "now"}}]


def test_strict_is_sent_when_the_client_set_it() -> None:
    tool = {"type": "function", "function": {**WEATHER_TOOL["function"], "strict": True}}
    assert encode(minimal(tools=[tool]))["tools"][0]["function"]["strict"] is True


def test_tool_parameters_are_preserved_byte_for_byte() -> None:
    # Odd spacing, key order, escapes and non-ASCII: not re-encoded anywhere.
    params = (
        b'{ "type":"object" ,"properties":{"q":{"type":"string",'
        b'"description":"caf\\u00e9 \xc3\xa9"}},\n "required" : ["q"],"additionalProperties":false}'
    )
    client = (
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
        b'"tools":[{"type":"function","function":{"name":"search","parameters":' + params + b"}}]}"
    )
    out = encode_request(request_raw(client), model="m")
    assert params in out


def test_tool_parameters_built_as_raw_are_preserved_byte_for_byte() -> None:
    params = b'{"type": "object",   "properties": {}}'
    req = Request(
        model_name="m",
        messages=[Message(role="user", content="hi")],
        tools=[Tool(Function(name="f", parameters=msgspec.Raw(params)))],
    )
    assert b'"parameters":' + params in encode_request(req, model="m")


@pytest.mark.parametrize("flag", [True, False])
def test_parallel_tool_calls_is_sent_with_tools(flag: bool) -> None:
    body = encode(minimal(tools=[WEATHER_TOOL], parallel_tool_calls=flag))
    assert body["parallel_tool_calls"] is flag


def test_parallel_tool_calls_is_not_sent_without_tools() -> None:
    assert "parallel_tool_calls" not in encode(minimal(parallel_tool_calls=False))


def test_parallel_tool_calls_unset_is_not_sent() -> None:
    assert "parallel_tool_calls" not in encode(minimal(tools=[WEATHER_TOOL]))


# -- messages ------------------------------------------------------------------


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief.", "name": "policy"},
    {"role": "developer", "content": "Use metric units."},
    {"role": "user", "content": "Weather in Paris?", "name": "alice"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
    {"role": "assistant", "content": "18C and cloudy."},
    {"role": "user", "content": ""},
]


def test_messages_are_sent_as_the_client_wrote_them() -> None:
    sent = encode(minimal(messages=CONVERSATION, tools=[WEATHER_TOOL]))["messages"]
    want = [dict(m) for m in CONVERSATION]
    del want[3]["content"]  # null content is left out, which the API reads the same
    assert sent == want


def test_text_content_parts_arrive_as_one_string() -> None:
    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]
    sent = encode(minimal(messages=[{"role": "user", "content": parts}]))["messages"]
    assert sent == [{"role": "user", "content": "Hello, world"}]


# -- sampling and the rest -----------------------------------------------------


def test_every_carried_field_is_sent() -> None:
    body = encode(
        minimal(
            temperature=0.5,
            top_p=0.25,
            stop=["END", "STOP"],
            seed=42,
            presence_penalty=0.5,
            frequency_penalty=-0.5,
            n=3,
            user="end-user-9",
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
            max_tokens=10,
        )
    )
    assert body["temperature"] == 0.5
    assert body["top_p"] == 0.25
    assert body["stop"] == ["END", "STOP"]
    assert body["seed"] == 42
    assert body["presence_penalty"] == 0.5
    assert body["frequency_penalty"] == -0.5
    assert body["n"] == 3
    assert body["user"] == "end-user-9"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {}},
    }


def test_a_stop_string_is_sent_as_a_list() -> None:
    assert encode(minimal(stop="END"))["stop"] == ["END"]


def test_n_of_one_is_not_sent() -> None:
    assert "n" not in encode(minimal(n=1))


def test_sampling_floats_survive_the_float32_wire_closely() -> None:
    # The wire carries float32: 0.7 arrives as 0.699999988..., within float32 precision.
    body = encode(minimal(temperature=0.7, top_p=0.9))
    assert body["temperature"] == pytest.approx(0.7, abs=1e-7)
    assert body["top_p"] == pytest.approx(0.9, abs=1e-7)


def test_response_format_text_is_sent_as_raw_json() -> None:
    client = (
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
        b'"response_format":{"type": "json_object"}}'
    )
    out = encode_request(request_raw(client), model="m")
    assert b'"response_format":{"type": "json_object"}' in out


def test_dropped_fields_are_absent() -> None:
    body = encode(minimal(metadata={"trace": "abc"}, stream=True, user=""))
    for key in (
        "metadata",
        "tenant",
        "request_id",
        "provider",
        "model_name",
        "include_usage",
        "user",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "n",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
    ):
        assert key not in body, key


def test_absent_optional_fields_of_a_struct_built_request_are_absent() -> None:
    req = Request(model_name="m", messages=[Message(role="user", content="x")])
    assert json.loads(encode_request(req, model="m")) == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_a_function_tool_choice_built_as_structs() -> None:
    req = Request(
        model_name="m",
        messages=[Message(role="user", content="x")],
        tools=[Tool(Function(name="f"))],
        tool_choice=int(ToolChoiceMode.Function),
        tool_choice_name="f",
    )
    body = json.loads(encode_request(req, model="m"))
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}


# -- what the adapter sends it with --------------------------------------------


def test_prepare_posts_to_chat_completions_under_the_base_url() -> None:
    req = request(minimal())
    for url in ("https://api.example.com/v1", "https://api.example.com/v1/"):
        out = adapter(url=url).prepare(Inbound(b"ignored", lambda: req, "rid", ""))
        assert out.url == "https://api.example.com/v1/chat/completions"


def test_prepare_sends_json_asks_for_sse_and_passes_the_request_id() -> None:
    req = request(minimal(stream=True))
    out = adapter().prepare(Inbound(b"", lambda: req, "rid-9", ""))
    headers = dict(out.headers)
    assert headers["content-type"] == JSON
    assert headers["accept"] == SSE
    assert headers["x-request-id"] == "rid-9"
    assert "authorization" not in headers
    assert out.whole is False
    assert json.loads(out.body) == json.loads(encode_request(req, model="routed-model"))
    assert json.loads(out.body)["stream"] is True


def test_prepare_asks_for_json_for_a_request_the_client_did_not_stream() -> None:
    req = request(minimal())
    out = adapter().prepare(Inbound(b"", lambda: req, "rid-9", ""))
    headers = dict(out.headers)
    assert headers["content-type"] == JSON
    assert headers["accept"] == JSON
    assert headers["x-request-id"] == "rid-9"
    assert out.whole is True
    body = json.loads(out.body)
    assert body == json.loads(encode_request(req, model="routed-model", whole=True))
    assert body["stream"] is False and "stream_options" not in body


def test_prepare_streams_every_answer_when_whole_answers_is_off() -> None:
    req = request(minimal())
    out = adapter(whole_answers=False).prepare(Inbound(b"", lambda: req, "rid-9", ""))
    assert dict(out.headers)["accept"] == SSE
    assert out.whole is False
    assert json.loads(out.body)["stream"] is True


def test_the_translator_of_a_whole_answer_reads_json_and_of_a_stream_sse() -> None:
    a = adapter()
    assert isinstance(a.translator("r", "m", whole=True), OpenAIWhole)
    assert isinstance(a.translator("r", "m"), OpenAIStream)
    assert isinstance(a.translator("r", "m", whole=False), OpenAIStream)


def test_prepare_presents_the_configured_key_never_the_callers() -> None:
    req = request(minimal())
    out = adapter(api_key="sk-gateway").prepare(Inbound(b"", lambda: req, "r", "Bearer caller-key"))
    auth = [v for k, v in out.headers if k == "authorization"]
    assert auth == ["Bearer sk-gateway"]


def test_prepare_reads_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLATGATE_TEST_OPENAI_KEY", "sk-env")
    req = request(minimal())
    out = adapter(api_key_env="FLATGATE_TEST_OPENAI_KEY").prepare(
        Inbound(b"", lambda: req, "r", "")
    )
    assert ("authorization", "Bearer sk-env") in out.headers


def test_prepare_forwards_the_callers_credential_when_configured() -> None:
    req = request(minimal())
    a = adapter(forward_credentials=True)
    out = a.prepare(Inbound(b"", lambda: req, "r", "Bearer caller-key"))
    assert [v for k, v in out.headers if k == "authorization"] == ["Bearer caller-key"]
    out = a.prepare(Inbound(b"", lambda: req, "r", ""))
    assert "authorization" not in dict(out.headers)


def test_prepare_adds_the_configured_headers() -> None:
    req = request(minimal())
    out = adapter(headers={"OpenAI-Organization": "org-1"}).prepare(
        Inbound(b"", lambda: req, "r", "")
    )
    assert ("OpenAI-Organization", "org-1") in out.headers


def test_prepare_decodes_the_request_once() -> None:
    req = request(minimal())
    seen = []

    def decode() -> Request:
        seen.append(1)
        return req

    adapter().prepare(Inbound(b"", decode, "r", ""))
    assert seen == [1]


def test_probe_lists_models_with_the_key() -> None:
    probe = adapter(api_key="sk-x").probe()
    assert probe.url == "https://api.example.com/v1/models"
    assert ("authorization", "Bearer sk-x") in probe.headers
    assert not probe.connect_only


def test_probe_uses_the_health_path_when_configured() -> None:
    probe = adapter(url="http://127.0.0.1:8000/v1", health_path="/health").probe()
    assert probe.url == "http://127.0.0.1:8000/health"  # from the server root, as vLLM serves it
