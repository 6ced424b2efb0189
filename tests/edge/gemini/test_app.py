"""The Gemini API through the edge app, over fake protocol objects and a fake
proxy transport: the routes under /v1beta and /v1, the key's three sources,
what the proxy is sent, the answer's three forms, countTokens, the model
endpoints in Gemini's shape, and errors in Google's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.edge_translator.app import EdgeApp
from flatgate.edge_translator.keys import hash_key
from flatgate.edge_translator.settings import KeyConfig
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.wire.chunk.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.schema import ApiDialect, FinishReason, Role
from tests.edge import fakes
from tests.edge.helpers import decode_request_fb
from tests.edge.test_app import WORDS, app_with, frame

KEY = "g-acme"
KEYS = [KeyConfig(tenant="acme", sha256=hash_key(KEY))]
BODY = json.dumps(
    {
        "contents": [{"role": "user", "parts": [{"text": "hello big world"}]}],
        "generationConfig": {"topK": 5, "maxOutputTokens": 9},
    }
).encode()


async def call(
    app: EdgeApp,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> fakes.Protocol:
    path, _, query = path.partition("?")
    proto = fakes.Protocol(body)
    hdrs = {"content-length": str(len(body))} if body else {}
    hdrs.update(headers or {})
    scope = fakes.Scope(method, path, hdrs)
    scope.query_string = query
    await ServerApp(app).__rsgi__(scope, proto)
    return proto


def google_error(proto: fakes.Protocol) -> dict[str, Any]:
    assert proto.header("content-type") == "application/json"
    doc: dict[str, Any] = proto.json()
    assert set(doc) == {"error"} and {"code", "message", "status"} <= set(doc["error"])
    err: dict[str, Any] = doc["error"]
    assert err["code"] == proto.status
    return err


@pytest.mark.parametrize("prefix", ["/v1beta", "/v1"])
async def test_generate_content_whole(prefix: str) -> None:
    app, transport = app_with(keys=KEYS)
    proto = await call(
        app, "POST", f"{prefix}/models/echo:generateContent", BODY, {"x-goog-api-key": KEY}
    )
    assert proto.status == 200, proto.payload
    doc = proto.json()
    cand = doc["candidates"][0]
    assert cand["content"] == {"parts": [{"text": "hello big world"}], "role": "model"}
    assert cand["finishReason"] == "STOP"
    assert doc["usageMetadata"]["totalTokenCount"] == 6
    assert doc["modelVersion"] == "flatgate-echo" and doc["responseId"]
    [sent] = transport.sent
    wire = decode_request_fb(sent.body)
    assert (wire["modelName"], wire["tenant"], wire["topK"], wire["maxTokens"]) == (
        b"flatgate-echo",
        b"acme",
        5,
        9,
    )
    assert wire["stream"] is False


async def test_stream_as_sse_and_as_a_json_array() -> None:
    app, transport = app_with(keys=KEYS)
    path = "/v1beta/models/echo:streamGenerateContent"
    proto = await call(app, "POST", path + "?alt=sse", BODY, {"x-goog-api-key": KEY})
    assert proto.status == 200
    events = proto.streamed.split(b"\r\n\r\n")
    assert events[-1] == b""
    docs = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    texts = [p["text"] for d in docs for p in d["candidates"][0]["content"]["parts"]]
    assert "".join(texts) == "hello big world"
    assert docs[-1]["candidates"][0]["finishReason"] == "STOP"
    assert decode_request_fb(transport.sent[0].body)["stream"] is True
    assert proto.header("content-type") == "text/event-stream"
    proto = await call(app, "POST", path, BODY, {"x-goog-api-key": KEY})
    assert proto.header("content-type") == "application/json"
    array = json.loads(proto.streamed)
    assert [d["candidates"][0]["content"]["parts"] for d in array] == [
        d["candidates"][0]["content"]["parts"] for d in docs
    ]


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1beta/models/echo:generateContent?key=" + KEY, {}),
        ("/v1beta/models/echo:generateContent", {"authorization": "Bearer " + KEY}),
        ("/v1beta/models/echo:generateContent", {"x-goog-api-key": KEY}),
    ],
)
async def test_the_keys_three_sources(path: str, headers: dict[str, str]) -> None:
    app, transport = app_with(keys=KEYS)
    proto = await call(app, "POST", path, BODY, headers)
    assert proto.status == 200
    assert decode_request_fb(transport.sent[0].body)["tenant"] == b"acme"


async def test_no_key_and_a_wrong_key_are_401_in_googles_shape() -> None:
    app, transport = app_with(keys=KEYS)
    proto = await call(app, "POST", "/v1beta/models/echo:generateContent", BODY)
    assert (proto.status, google_error(proto)["status"]) == (401, "UNAUTHENTICATED")
    proto = await call(app, "POST", "/v1beta/models/echo:generateContent?key=nope", BODY)
    assert (proto.status, google_error(proto)["status"]) == (401, "UNAUTHENTICATED")
    assert "nope" not in proto.payload.decode()
    assert transport.sent == []


async def test_an_unknown_model_is_404_and_a_bad_field_400_naming_it() -> None:
    app, transport = app_with()
    proto = await call(app, "POST", "/v1beta/models/nothing:generateContent", BODY)
    assert (proto.status, google_error(proto)["status"]) == (404, "NOT_FOUND")
    bad = json.dumps({"contents": [{"role": "user", "parts": [{"inlineData": {"data": "AA"}}]}]})
    proto = await call(app, "POST", "/v1/models/echo:generateContent", bad.encode())
    err = google_error(proto)
    assert (proto.status, err["status"]) == (400, "INVALID_ARGUMENT")
    assert "contents.0.parts.0.inlineData.mimeType" in err["message"]
    violation = next(d for d in err["details"] if d["@type"].endswith("BadRequest"))
    assert violation["fieldViolations"][0]["field"] == "contents.0.parts.0.inlineData.mimeType"
    proto = await call(app, "POST", "/v1beta/tunedModels/mine:generateContent", BODY)
    assert proto.status == 400 and "tunedModels/mine" in google_error(proto)["message"]
    assert transport.sent == []


@pytest.mark.parametrize("verb", ["generateContent", "streamGenerateContent?alt=sse"])
async def test_a_rate_limit_keeps_its_status_and_says_when_to_retry(verb: str) -> None:
    body = b'{"error": {"code": "backend_rate_limited", "message": "slow down"}}'
    app, _ = app_with(lambda sent: fakes.Response(429, [body], headers={"retry-after": "7"}))
    proto = await call(app, "POST", f"/v1beta/models/echo:{verb}", BODY)
    err = google_error(proto)
    assert (proto.status, err["status"], err["message"]) == (429, "RESOURCE_EXHAUSTED", "slow down")
    assert proto.header("retry-after") == "7"
    retry = [d for d in err["details"] if d["@type"].endswith("RetryInfo")]
    assert retry[0]["retryDelay"] == "7s"


async def test_an_error_after_the_stream_began_ends_it_in_its_form() -> None:
    broken = frame(error=ChunkError("backend_error", "it broke"), finish_reason=FinishReason.ERROR)
    app, _ = app_with(lambda sent: fakes.Response(200, [WORDS[0] + broken]))
    path = "/v1beta/models/echo:streamGenerateContent"
    proto = await call(app, "POST", path + "?alt=sse", BODY)
    events = proto.streamed.split(b"\r\n\r\n")
    last = json.loads(events[-2].removeprefix(b"data: "))
    assert last["error"]["message"] == "it broke"
    proto = await call(app, "POST", path, BODY)
    array = json.loads(proto.streamed)
    assert array[0]["candidates"][0]["content"]["parts"] == [{"text": "hello "}]
    assert array[-1]["error"]["message"] == "it broke"


async def test_function_calls_come_back_as_function_call_parts() -> None:
    call_frames = [
        frame(tool_calls=[ToolCallDelta(0, "c1", "lookup", '{"q":"x"}')]),
        frame(finish_reason=FinishReason.TOOL_CALLS, usage=Usage(4, 2)),
    ]
    app, _ = app_with(lambda sent: fakes.Response(200, [b"".join(call_frames)]))
    proto = await call(app, "POST", "/v1beta/models/echo:generateContent", BODY)
    parts = proto.json()["candidates"][0]["content"]["parts"]
    assert parts == [{"functionCall": {"name": "lookup", "args": {"q": "x"}, "id": "c1"}}]


async def test_count_tokens() -> None:
    app, transport = app_with(keys=KEYS)
    proto = await call(
        app, "POST", "/v1beta/models/echo:countTokens", BODY, {"x-goog-api-key": KEY}
    )
    assert proto.status == 200 and proto.json()["totalTokens"] > 0
    whole = json.dumps({"generateContentRequest": json.loads(BODY)}).encode()
    again = await call(app, "POST", "/v1/models/echo:countTokens", whole, {"x-goog-api-key": KEY})
    assert again.json() == proto.json()
    assert transport.sent == []


async def test_model_endpoints_in_geminis_shape() -> None:
    app, _ = app_with(keys=KEYS)
    for path, headers in (
        ("/v1beta/models", {"x-goog-api-key": KEY}),
        ("/v1/models", {"x-goog-api-key": KEY}),
        ("/v1/models?key=" + KEY, {}),
    ):
        proto = await call(app, "GET", path, headers=headers)
        assert proto.status == 200, proto.payload
        names = [m["name"] for m in proto.json()["models"]]
        assert names == ["models/flatgate-echo", "models/echo", "models/gpt-4o"]
    proto = await call(app, "GET", "/v1beta/models/echo", headers={"x-goog-api-key": KEY})
    assert proto.json()["name"] == "models/echo"
    assert "generateContent" in proto.json()["supportedGenerationMethods"]
    proto = await call(app, "GET", "/v1/models/models/echo", headers={"x-goog-api-key": KEY})
    assert proto.json()["name"] == "models/echo"
    proto = await call(app, "GET", "/v1beta/models/nothing", headers={"x-goog-api-key": KEY})
    assert (proto.status, google_error(proto)["status"]) == (404, "NOT_FOUND")
    # Not a Gemini caller: OpenAI's shape, as before.
    proto = await call(app, "GET", "/v1/models", headers={"authorization": "Bearer " + KEY})
    assert proto.json()["object"] == "list"


async def test_an_unknown_path_under_v1beta_is_googles_404() -> None:
    app, _ = app_with()
    proto = await call(app, "POST", "/v1beta/files", b"{}")
    assert (proto.status, google_error(proto)["status"]) == (404, "NOT_FOUND")


async def test_an_unknown_top_level_field_is_carried_as_a_gemini_extra() -> None:
    app, transport = app_with()
    body = {**json.loads(BODY), "futureField": {"on": True}, "labels": {"team": "a"}}
    proto = await call(
        app, "POST", "/v1beta/models/echo:generateContent", json.dumps(body).encode()
    )
    assert proto.status == 200, proto.payload
    wire = decode_request_fb(transport.sent[0].body)
    assert json.loads(wire["extras"]) == {"labels": {"team": "a"}, "futureField": {"on": True}}
    assert wire["extrasDialect"] == int(ApiDialect.GEMINI)
    bad = {**body, "generationConfig": {"topK": "many"}}
    proto = await call(app, "POST", "/v1beta/models/echo:generateContent", json.dumps(bad).encode())
    assert proto.status == 400 and google_error(proto)["message"].startswith(
        "generationConfig.topK"
    )
    proto = await call(app, "POST", "/v1beta/models/echo:generateContent", b'{"contents": [')
    assert proto.status == 400 and "Invalid JSON payload" in google_error(proto)["message"]


@pytest.mark.parametrize(
    ("member", "field"),
    [
        (
            {"contents": [{"parts": [{"text": "x", "cacheControl": {}}]}]},
            "contents.0.parts.0.cacheControl",
        ),
        ({"contents": [{"role": "user", "parts": [], "author": "me"}]}, "contents.0.author"),
        (
            {
                "contents": [
                    {"parts": [{"inlineData": {"mimeType": "image/png", "data": "AA", "uri": "x"}}]}
                ]
            },
            "contents.0.parts.0.inlineData.uri",
        ),
        ({"generationConfig": {"topK": 1, "topN": 2}}, "generationConfig.topN"),
        (
            {"generationConfig": {"thinkingConfig": {"effort": 1}}},
            "generationConfig.thinkingConfig.effort",
        ),
        (
            {"toolConfig": {"functionCallingConfig": {"strict": True}}},
            "toolConfig.functionCallingConfig.strict",
        ),
        (
            {"tools": [{"functionDeclarations": [{"name": "f", "strict": True}]}]},
            "tools.0.functionDeclarations.0.strict",
        ),
        ({"systemInstruction": {"parts": [{"text": "x"}], "cache": 1}}, "systemInstruction.cache"),
        ({"safetySettings": [{"category": "c", "threshold": "t", "x": 1}]}, "safetySettings.0.x"),
    ],
)
async def test_an_unknown_nested_member_is_refused_in_googles_words(
    member: dict[str, Any], field: str
) -> None:
    app, transport = app_with()
    name = field.rpartition(".")[2]
    # Alone, and beside a top-level field the edge carries (its second pass).
    for sent in ({"contents": [], **member}, {"contents": [], **member, "futureField": 1}):
        proto = await call(
            app, "POST", "/v1beta/models/echo:generateContent", json.dumps(sent).encode()
        )
        err = google_error(proto)
        assert (proto.status, err["status"]) == (400, "INVALID_ARGUMENT"), err
        said = f'Invalid JSON payload received. Unknown name "{name}" at '
        assert err["message"].startswith(said) and "Cannot find field." in err["message"], err
        [violation] = [v for d in err["details"] for v in d.get("fieldViolations", ())]
        assert violation["field"] == field
    assert transport.sent == []


async def test_a_member_spelled_by_its_proto_name_is_read_as_its_camelcase_one() -> None:
    """Google's servers take a field by its proto name too: the edge respells
    such a body's keys, but never those inside a call's arguments or a schema."""
    app, transport = app_with()
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"function_call": {"name": "f", "args": {"max_rows": 2}}}]},
            {
                "role": "user",
                "parts": [{"function_response": {"name": "f", "response": {"a_b": 1}}}],
            },
        ],
        "system_instruction": {"parts": [{"text": "be brief"}]},
        "generation_config": {"max_output_tokens": 7, "top_k": 3},
        "tools": [
            {
                "function_declarations": [
                    {"name": "f", "parameters_json_schema": {"properties": {"max_rows": {}}}}
                ]
            }
        ],
        "future_field": 1,
    }
    proto = await call(
        app, "POST", "/v1beta/models/echo:generateContent", json.dumps(body).encode()
    )
    assert proto.status == 200, proto.payload
    wire = decode_request_fb(transport.sent[0].body)
    assert (wire["maxTokens"], wire["topK"]) == (7, 3)
    assert [m["role"] for m in wire["messages"]] == [
        int(Role.System), int(Role.User), int(Role.Assistant), int(Role.Tool)
    ]  # fmt: skip
    call_ = wire["messages"][2]["toolCalls"][0]
    assert json.loads(call_["arguments"]) == {"max_rows": 2}
    assert json.loads(wire["messages"][3]["content"]) == {"a_b": 1}
    assert json.loads(wire["tools"][0]["parameters"]) == {"properties": {"max_rows": {}}}
    assert json.loads(wire["extras"]) == {"future_field": 1}
    proto = await call(app, "POST", "/v1beta/models/echo:countTokens", json.dumps(body).encode())
    assert proto.status == 200 and proto.json()["totalTokens"] > 0
