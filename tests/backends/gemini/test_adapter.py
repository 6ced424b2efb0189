"""The ``gemini`` adapter: its URLs (whole and streamed, a model's name as
the API writes it), its key, embeddings' methods, Google's refusals, its
probe, and its keys' checks."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from flatgate.proxy.backends.base import Inbound, RefusalKind
from flatgate.proxy.backends.gemini.adapter import GeminiAdapter, model_name
from flatgate.proxy.backends.gemini.config import DEFAULT_URL, GeminiConfig
from flatgate.proxy.backends.registry import backend_config, backend_problems
from flatgate.proxy.plumbing.config import Problems
from flatgate.proxy.wire.embeddings import EmbeddingInput
from tests.backends.helpers import request

_CHAT = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}


def _config(**kw: Any) -> GeminiConfig:
    return msgspec.convert({"name": "g", "protocol": "gemini", "api_key": "AIza-k", **kw},
                           GeminiConfig)  # fmt: skip


def _call(body: dict[str, Any], model: str) -> Inbound[Any]:
    req = request(body, model_name=model)
    return Inbound(b"", lambda: req, "req-1", "Bearer caller-key")


def test_the_url_defaults_to_the_gemini_api() -> None:
    problems = Problems()
    made = backend_config({"name": "g", "protocol": "gemini", "api_key": "k"}, "b", problems)
    assert problems == [] and made is not None
    assert made.url == DEFAULT_URL == "https://generativelanguage.googleapis.com/v1beta"


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("gemini-2.5-flash", "models/gemini-2.5-flash"),
        ("models/gemini-2.5-pro", "models/gemini-2.5-pro"),
        ("tunedModels/my-model-42", "tunedModels/my-model-42"),
        ("a b", "models/a%20b"),
    ],
)
def test_a_model_s_name(model: str, name: str) -> None:
    assert model_name(model) == name


def test_whole_and_streamed() -> None:
    a = GeminiAdapter(_config(headers={"x-team": "a"}))
    whole = a.prepare(_call(_CHAT, "gemini-2.5-flash"))
    assert whole.whole
    assert whole.url == f"{DEFAULT_URL}/models/gemini-2.5-flash:generateContent"
    headers = dict(whole.headers)
    assert headers["x-goog-api-key"] == "AIza-k" and "authorization" not in headers
    assert headers["x-team"] == "a" and headers["x-request-id"] == "req-1"
    assert json.loads(whole.body)["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    streamed = a.prepare(_call({**_CHAT, "stream": True}, "gemini-2.5-flash"))
    assert streamed.url.endswith(":streamGenerateContent?alt=sse") and not streamed.whole
    assert dict(streamed.headers)["accept"] == "text/event-stream"
    renamed = GeminiAdapter(_config(model="gemini-3-pro-preview")).prepare(_call(_CHAT, "route"))
    assert renamed.url.endswith("/models/gemini-3-pro-preview:generateContent")


def test_a_forwarded_credential() -> None:
    a = GeminiAdapter(_config(api_key="", forward_credentials=True))
    headers = dict(a.prepare(_call(_CHAT, "gemini-2.5-flash")).headers)
    assert headers["authorization"] == "Bearer caller-key" and "x-goog-api-key" not in headers


def _embed(texts: tuple[str, ...]) -> Inbound[Any]:
    req = EmbeddingInput("r", 0, "gemini-embedding-001", texts, (), 8, "", "", "", 1)
    return Inbound(b"", lambda: req, "req-1", "")


def test_embeddings_one_and_many() -> None:
    a = GeminiAdapter(_config())
    one = a.prepare_embeddings(_embed(("a parrot",)))
    assert one.url == f"{DEFAULT_URL}/models/gemini-embedding-001:embedContent"
    many = a.prepare_embeddings(_embed(("a parrot", "a cage")))
    assert many.url == f"{DEFAULT_URL}/models/gemini-embedding-001:batchEmbedContents"
    assert dict(many.headers)["x-goog-api-key"] == "AIza-k"


def test_refusals_are_google_s() -> None:
    body = {"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED",
                      "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                   "retryDelay": "31s"}]}}  # fmt: skip
    said = GeminiAdapter(_config()).refusal(429, {}, json.dumps(body).encode())
    assert (said.kind, said.retry_after) == (RefusalKind.RATE_LIMITED, 31.0)
    assert said.message == "RESOURCE_EXHAUSTED: Quota"


def test_the_probe_lists_models_with_the_key() -> None:
    probe = GeminiAdapter(_config()).probe()
    assert probe.url == f"{DEFAULT_URL}/models?pageSize=1" and not probe.connect_only
    assert ("x-goog-api-key", "AIza-k") in probe.headers
    custom = GeminiAdapter(_config(url="http://127.0.0.1:9/v1beta", health_path="/healthz"))
    assert custom.probe().url == "http://127.0.0.1:9/healthz"


def test_a_key_is_required() -> None:
    found = backend_problems(_config(api_key=""), "backends[0]", {})
    assert any("api_key: required" in p for p in found), found
    assert backend_problems(_config(), "backends[0]", {}) == []
