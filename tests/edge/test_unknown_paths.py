"""Paths the edge has no route for, and the access log's ``method``, at a real
edge app driven through httpx's ASGI transport (the ASGI exchange splits the
query string from the path, as granian does): an unknown path is a 404
``Unknown request URL`` in the shape of the API it lies under (else the
caller's), logged with its method and path and never its query; a ``POST``
to ``/v1/models/{id}`` is such a 404, not a 405."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from flatgate.edge_translator.app import EdgeApp
from flatgate.edge_translator.settings import EdgeSection, EdgeSettings, ModelConfig
from flatgate.proxy.plumbing.accesslog import AccessLog, LogFormat
from flatgate.proxy.plumbing.serve import ServerApp
from tests.edge import fakes

ANTHROPIC = {"anthropic-version": "2023-06-01"}


class Edge:
    """An edge app, a client of it, and its access log's lines."""

    def __init__(self, log_format: LogFormat) -> None:
        settings = EdgeSettings(
            edge=EdgeSection(proxy_url="http://127.0.0.1:9/", access_log=False),
            models=(ModelConfig("flatgate-echo", "SelfHosted"),),
        )
        # No request here reaches the proxy.
        transport = fakes.Transport(lambda sent: fakes.Response(500, [b"{}"]))
        self.app = EdgeApp(settings, transport_factory=lambda: transport)
        self.written: list[bytes] = []
        self.app.access = AccessLog("edge", log_format, write=self.written.append)
        self.json = log_format == "json"
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=ServerApp(self.app), client=("127.0.0.1", 40000)),
            base_url="http://edge",
        )

    def lines(self) -> list[Any]:
        self.app.access.flush()
        text = b"".join(self.written).decode().splitlines()
        return [json.loads(line) for line in text] if self.json else text


@pytest.fixture
async def edge() -> AsyncIterator[Edge]:
    e = Edge("json")
    async with e.client:
        yield e


@pytest.fixture
async def text_edge() -> AsyncIterator[Edge]:
    e = Edge("text")
    async with e.client:
        yield e


def openai_error(r: httpx.Response) -> dict[str, Any]:
    err: dict[str, Any] = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def anthropic_error(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert body["type"] == "error" and body["request_id"] == r.headers["request-id"]
    err: dict[str, Any] = body["error"]
    assert set(err) == {"type", "message"}
    return err


async def test_claude_code_s_probes_are_404_and_logged(edge: Edge) -> None:
    for path in ("/", "/api/hello"):
        r = await edge.client.head(path)
        assert r.status_code == 404 and "allow" not in r.headers
    first, second = edge.lines()
    for line, path in ((first, "/"), (second, "/api/hello")):
        assert (line["method"], line["path"], line["status"]) == ("HEAD", path, 404)
        assert line["api"] is None and line["error"] == "not_found"
        assert line["request_id"]  # the one the 404 carried
    text = (await edge.client.get("/")).text
    assert json.loads(text)["error"]["message"] == "Unknown request URL: GET /."


async def test_a_post_to_a_model_id_is_404_unknown_url_not_405(edge: Edge) -> None:
    # (``:generateContent`` and Gemini's other verbs are the Gemini API's.)
    r = await edge.client.post("/v1/models/x:frobnicate", json={"contents": []})
    assert r.status_code == 404 and "allow" not in r.headers
    err = openai_error(r)
    assert err["message"] == "Unknown request URL: POST /v1/models/x:frobnicate."
    assert (err["type"], err["code"]) == ("invalid_request_error", "not_found")
    # Anthropic's shape for an Anthropic client.
    r = await edge.client.post("/v1/models/x:frobnicate", headers=ANTHROPIC)
    assert r.status_code == 404
    assert anthropic_error(r)["type"] == "not_found_error"
    lines = edge.lines()
    assert [(x["method"], x["path"], x["status"]) for x in lines] == [
        ("POST", "/v1/models/x:frobnicate", 404)
    ] * 2
    # Counted apart from the model route's answers.
    text = edge.app.metrics.render().decode()
    assert 'flatgate_edge_requests_total{route="other",status="404"} 2.0' in text
    assert 'route="/v1/models/{id}"' not in text


async def test_delete_on_a_model_id_stays_405(edge: Edge) -> None:
    r = await edge.client.delete("/v1/models/flatgate-echo")
    assert (r.status_code, r.headers["allow"]) == (405, "GET")
    assert openai_error(r)["code"] == "method_not_allowed"
    assert edge.lines() == []  # the model endpoints are not logged


async def test_the_query_string_is_never_logged(edge: Edge, text_edge: Edge) -> None:
    for e in (edge, text_edge):
        r = await e.client.get("/nope", params={"key": "secret-gemini-key", "alt": "sse"})
        assert r.status_code == 404
        # A caller with a Google key is answered in Google's shape.
        assert r.json()["error"]["message"] == "Unknown request URL: GET /nope."
        assert r.json()["error"]["status"] == "NOT_FOUND"
        assert "secret-gemini-key" not in r.text
        r = await e.client.post("/v1beta/nothing:generateContent?key=secret-gemini-key")
        assert r.status_code == 404
    (one, two) = edge.lines()
    assert (one["method"], one["path"], two["path"]) == (
        "GET",
        "/nope",
        "/v1beta/nothing:generateContent",
    )
    texts = text_edge.lines()
    assert " method=GET path=/nope rid=" in texts[0]
    assert " path=/v1beta/nothing:generateContent " in texts[1]
    for line in [*texts, *map(json.dumps, (one, two))]:
        assert "secret" not in line and "key=" not in line and "?" not in line


async def test_an_unknown_path_under_messages_is_anthropic_s(edge: Edge) -> None:
    r = await edge.client.post("/v1/messages/nope", json={})
    assert r.status_code == 404
    err = anthropic_error(r)
    assert err == {
        "type": "not_found_error",
        "message": "Unknown request URL: POST /v1/messages/nope.",
    }
    (line,) = edge.lines()
    assert (line["method"], line["path"]) == ("POST", "/v1/messages/nope")
    assert line["error"] == "not_found"


async def test_an_unknown_path_under_responses_is_the_responses_api_s(edge: Edge) -> None:
    for method in ("GET", "POST"):
        r = await edge.client.request(method, "/v1/responses/a/b", headers=ANTHROPIC)
        assert r.status_code == 404  # its family's shape, whatever the headers
        assert openai_error(r)["message"] == f"Unknown request URL: {method} /v1/responses/a/b."
        assert r.headers["x-request-id"].startswith("resp_")  # the Responses API's ids


async def test_another_unknown_v1_path_is_in_the_caller_s_shape(edge: Edge) -> None:
    r = await edge.client.get("/v1/nothing")
    assert openai_error(r)["code"] == "not_found"
    r = await edge.client.get("/v1/nothing", headers=ANTHROPIC)
    assert anthropic_error(r)["message"] == "Unknown request URL: GET /v1/nothing."


async def test_the_client_s_request_id_is_kept_on_an_unknown_path(edge: Edge) -> None:
    r = await edge.client.get("/nope", headers={"x-request-id": "probe-7"})
    assert r.headers["x-request-id"] == "probe-7"
    (line,) = edge.lines()
    assert line["request_id"] == "probe-7"


async def test_known_routes_log_their_method(edge: Edge, text_edge: Edge) -> None:
    for e in (edge, text_edge):
        r = await e.client.get("/v1/chat/completions")
        assert (r.status_code, r.headers["allow"]) == (405, "POST")
        r = await e.client.post("/v1/chat/completions", content=b"{")  # no key needed: a 400
        assert r.status_code == 400
        r = await e.client.request("PATCH", "/v1/responses/resp_1")
        assert (r.status_code, r.headers["allow"]) == (405, "GET, DELETE")
        # Not logged, as before: the model endpoints and the probes.
        assert (await e.client.get("/healthz")).status_code == 200
        assert (await e.client.get("/v1/models")).status_code == 200
    assert [(x["api"], x["method"], x["path"], x["status"]) for x in edge.lines()] == [
        ("openai-chat", "GET", "/v1/chat/completions", 405),
        ("openai-chat", "POST", "/v1/chat/completions", 400),
        ("openai-responses", "PATCH", "/v1/responses/resp_1", 405),
    ]
    first, second, third = text_edge.lines()
    assert " api=openai-chat method=GET path=/v1/chat/completions " in first
    assert " method=POST " in second and " status=400 " in second
    assert " method=PATCH path=/v1/responses/resp_1 " in third
