"""The ``vertex`` adapter: which publisher a model goes through, its URL
(checked against Vertex's discovery document, which google-api-python-client
ships), its body (Claude's checked with the anthropic SDK's request type,
Gemini's against the discovery document's ``GenerateContentRequest``
schema), its token, Google's refusals, its probe, and the keys' checks."""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

import googleapiclient  # type: ignore[import-untyped]
import msgspec
import pydantic
import pytest
from anthropic.types import message_create_params

from flatgate.proxy.backends.base import Inbound, RefusalKind, Untranslatable
from flatgate.proxy.backends.gemini.refusal import google_refusal
from flatgate.proxy.backends.registry import backend_problems
from flatgate.proxy.backends.vertex.adapter import VertexAdapter
from flatgate.proxy.backends.vertex.config import VertexConfig, api_for, endpoint
from flatgate.proxy.transport.credentials import CredentialsUnavailable
from tests.backends.helpers import request

CLAUDE = "claude-sonnet-4-5@20250929"
GEMINI = "gemini-2.5-flash"
_CHAT = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}


@functools.cache
def discovery() -> dict[str, Any]:
    """Vertex AI's discovery document (aiplatform v1)."""
    root = os.path.dirname(googleapiclient.__file__)
    with open(os.path.join(root, "discovery_cache", "documents", "aiplatform.v1.json")) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _method(name: str) -> dict[str, Any]:
    models = discovery()["resources"]["projects"]["resources"]["locations"]["resources"]
    method: dict[str, Any] = models["publishers"]["resources"]["models"]["methods"][name]
    return method


def _path_of(name: str) -> re.Pattern[str]:
    """The method's flatPath as a pattern (each {..Id} one segment)."""
    flat = _method(name)["flatPath"]
    return re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(flat)))


def _config(**kw: Any) -> VertexConfig:
    doc = {"name": "v", "protocol": "vertex", "project": "my-project", "location": "us-east5"}
    return msgspec.convert({**doc, **kw}, VertexConfig)


def _adapter(token: str | None = "ya29.token-1", **kw: Any) -> VertexAdapter:
    a = VertexAdapter(_config(**kw))
    if token is not None:
        a._token._fetch = lambda: (token, None)
        a._token.refresh()
    return a


def _call(body: dict[str, Any], model: str) -> Inbound[Any]:
    req = request(body, model_name=model)
    return Inbound(b"", lambda: req, "req-1", "Bearer caller-key")


def test_each_location_s_endpoint_is_the_discovery_document_s() -> None:
    listed: dict[str, set[str]] = {}
    for e in discovery()["endpoints"]:  # a multi-region's, once per environment
        listed.setdefault(e["location"], set()).add(e["endpointUrl"] + "v1")
    assert len(listed) > 30
    for location, urls in listed.items():
        assert endpoint(location) in urls, (location, urls)
    assert endpoint("global") == discovery()["rootUrl"] + "v1"
    assert _config(location="global").url == "https://aiplatform.googleapis.com/v1"
    assert _config(url="http://127.0.0.1:9/v1").url == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("model", "api"),
    [
        (CLAUDE, "anthropic"),
        ("claude-opus-4-1@20250805", "anthropic"),
        (GEMINI, "gemini"),
        ("gemini-3-pro-preview", "gemini"),
        ("publishers-claude", "gemini"),
    ],
)
def test_the_publisher_by_model(model: str, api: str) -> None:
    assert api_for("auto", model) == api
    assert api_for("gemini", CLAUDE) == "gemini"


def test_claude_through_raw_predict() -> None:
    body = {**_CHAT, "max_tokens": 100, "temperature": 0.5}
    out = _adapter(headers={"anthropic-beta": "context-1m-2025-08-07", "x-team": "a"}).prepare(
        _call(body, CLAUDE)
    )
    assert out.whole
    assert out.url == (
        "https://us-east5-aiplatform.googleapis.com/v1/projects/my-project/locations/us-east5"
        "/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
    )
    path = out.url.removeprefix("https://us-east5-aiplatform.googleapis.com/")
    assert _path_of("rawPredict").fullmatch(path)
    headers = dict(out.headers)
    assert headers["authorization"] == "Bearer ya29.token-1"
    assert headers["anthropic-beta"] == "context-1m-2025-08-07"
    assert headers["x-team"] == "a" and headers["accept"] == "application/json"
    assert out.body.startswith(b'{"anthropic_version":"vertex-2023-10-16",')
    sent = json.loads(out.body)
    assert "model" not in sent and sent["stream"] is False and sent["max_tokens"] == 100
    # The rest is a Messages request, as the anthropic SDK types one.
    del sent["anthropic_version"]
    pydantic.TypeAdapter(message_create_params.MessageCreateParamsNonStreaming).validate_python(
        {**sent, "model": CLAUDE}
    )


def test_a_configured_anthropic_beta_goes_to_claude_only() -> None:
    a = _adapter(headers={"anthropic-beta": "context-1m-2025-08-07", "x-team": "a"})
    gemini = dict(a.prepare(_call(_CHAT, "gemini-2.5-pro")).headers)
    assert "anthropic-beta" not in gemini and gemini["x-team"] == "a"


def test_claude_streamed_and_a_long_answer_too() -> None:
    a = _adapter()
    out = a.prepare(_call({**_CHAT, "stream": True}, CLAUDE))
    assert out.url.endswith(":streamRawPredict") and not out.whole
    assert _path_of("streamRawPredict").fullmatch(out.url.split("/", 3)[3])
    assert json.loads(out.body)["stream"] is True
    assert dict(out.headers)["accept"] == "text/event-stream"
    # Past ten minutes of output: streamed even when asked whole.
    assert a.prepare(_call({**_CHAT, "max_tokens": 64000}, CLAUDE)).url.endswith(
        ":streamRawPredict"
    )


def _schema_check(value: Any, schema: dict[str, Any], where: str) -> None:
    """``value`` as the discovery document's schema describes it: every
    member a property it names, of its type (recursively through $ref)."""
    schemas = discovery()["schemas"]
    if "$ref" in schema:
        schema = schemas[schema["$ref"]]
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        assert isinstance(value, dict), where
        for key, member in value.items():
            assert key in schema["properties"], f"{where}.{key}: not in Vertex's schema"
            _schema_check(member, schema["properties"][key], f"{where}.{key}")
    elif kind == "array":
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _schema_check(item, schema["items"], f"{where}[{i}]")
    elif kind == "string":
        assert isinstance(value, str), where
    elif kind in ("integer", "number"):
        assert isinstance(value, int | float | str), where
    elif kind == "boolean":
        assert isinstance(value, bool), where


def test_gemini_through_generate_content_as_vertex_s_schema_says() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "weather?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "max_tokens": 50,
        "temperature": 0.2,
        "stop": ["END"],
    }
    a = _adapter(location="global")
    whole = a.prepare(_call(body, GEMINI))
    assert whole.url == (
        "https://aiplatform.googleapis.com/v1/projects/my-project/locations/global"
        "/publishers/google/models/gemini-2.5-flash:generateContent"
    )
    assert _path_of("generateContent").fullmatch(whole.url.split("/", 3)[3])
    sent = json.loads(whole.body)
    assert "model" not in sent
    _schema_check(sent, {"$ref": _method("generateContent")["request"]["$ref"]}, "body")
    streamed = a.prepare(_call({**body, "stream": True}, GEMINI))
    assert streamed.url.endswith(":streamGenerateContent?alt=sse") and not streamed.whole
    assert dict(streamed.headers)["authorization"] == "Bearer ya29.token-1"


def test_no_token_yet_is_credentials_unavailable_and_not_ready() -> None:
    a = _adapter(token=None)
    with pytest.raises(CredentialsUnavailable, match="Google credentials"):
        a.prepare(_call(_CHAT, CLAUDE))
    with pytest.raises(CredentialsUnavailable):
        a.probe()
    ready = _adapter()
    probe = ready.probe()
    assert probe.connect_only and probe.url == "https://us-east5-aiplatform.googleapis.com"


def test_a_new_token_is_the_header_s() -> None:
    a = _adapter()
    a._token._fetch = lambda: ("ya29.token-2", None)
    a._token.refresh()
    out = a.prepare(_call(_CHAT, GEMINI))
    assert dict(out.headers)["authorization"] == "Bearer ya29.token-2"


def _no_input() -> Any:
    raise AssertionError("not read")


def test_no_embeddings() -> None:
    with pytest.raises(Untranslatable, match="no embeddings"):
        _adapter().prepare_embeddings(Inbound(b"", _no_input, "r", ""))


def _google(code: int, status: str, message: str, *details: dict[str, Any]) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        err["details"] = list(details)
    return json.dumps({"error": err}).encode()


@pytest.mark.parametrize(
    ("status", "body", "kind", "wait"),
    [
        (
            429,
            _google(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded",
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "27s"},
            ),
            RefusalKind.RATE_LIMITED,
            27.0,
        ),
        (400, _google(400, "INVALID_ARGUMENT", "bad"), RefusalKind.REJECTED, None),
        (400, _google(400, "FAILED_PRECONDITION", "billing"), RefusalKind.REJECTED, None),
        (
            400,
            _google(
                400,
                "INVALID_ARGUMENT",
                "API key not valid.",
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"},
            ),
            RefusalKind.AUTH,
            None,
        ),
        (401, _google(401, "UNAUTHENTICATED", "no token"), RefusalKind.AUTH, None),
        (403, _google(403, "PERMISSION_DENIED", "denied"), RefusalKind.AUTH, None),
        (503, _google(503, "UNAVAILABLE", "overloaded"), RefusalKind.UNAVAILABLE, None),
        (500, _google(500, "INTERNAL", "oops"), RefusalKind.UNAVAILABLE, None),
        (504, _google(504, "DEADLINE_EXCEEDED", "slow"), RefusalKind.UNAVAILABLE, None),
        (
            529,
            b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            RefusalKind.UNAVAILABLE,
            None,
        ),
        (404, b"not json", RefusalKind.REJECTED, None),
    ],
)
def test_google_s_refusals(status: int, body: bytes, kind: RefusalKind, wait: float | None) -> None:
    said = _adapter().refusal(status, {}, body)
    assert (said.kind, said.retry_after) == (kind, wait)
    assert said.message


def test_a_stream_s_error_list_and_retry_after_as_a_fallback() -> None:
    listed = b"[" + _google(429, "RESOURCE_EXHAUSTED", "slow down") + b"]"
    said = google_refusal(429, {"retry-after": "3"}, listed)
    assert said.kind is RefusalKind.RATE_LIMITED and said.retry_after == 3.0
    assert said.message == "RESOURCE_EXHAUSTED: slow down"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({}, None),
        ({"project": ""}, "project: required"),
        ({"project": "My Project"}, "project: not a project id"),
        ({"location": "US East"}, "location:"),
        ({"api_key": "k"}, "api_key: a vertex backend"),
        ({"forward_credentials": True}, "forward_credentials"),
        ({"scopes": []}, "scopes:"),
        ({"default_max_tokens": 0}, "default_max_tokens"),
    ],
)
def test_the_keys_checks(entry: dict[str, Any], problem: str | None) -> None:
    found = backend_problems(_config(**entry), "backends[0]", {})
    if problem is None:
        assert found == []
    else:
        assert any(problem in p for p in found), found
