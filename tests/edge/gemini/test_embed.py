"""Gemini's embedContent and batchEmbedContents through the edge app, over a
fake proxy transport: what the proxy is sent, the answer in Gemini's shape
(whole and in pieces), and the refusals naming the field."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from flatgate.edge_translator.gemini.embed import GeminiEmbed
from flatgate.proxy.wire.embeddings import (
    read_embedding_request,
    read_embedding_response,
    write_embedding_response,
)
from flatgate.proxy.wire.schema import ApiDialect
from tests.edge import fakes
from tests.edge.gemini.test_app import call, google_error
from tests.edge.test_app import app_with


def answer(count: int, dimensions: int) -> bytes:
    values = [float(i) for i in range(count * dimensions)]
    return write_embedding_response(
        model="flatgate-echo",
        count=count,
        dimensions=dimensions,
        values=struct.pack(f"<{len(values)}f", *values),
        prompt_tokens=0,
        total_tokens=0,
    )


def text(t: str) -> dict[str, Any]:
    return {"parts": [{"text": t}]}


async def test_embed_content() -> None:
    app, transport = app_with(lambda sent: fakes.Response(200, [answer(1, 3)]))
    body = {"content": text("hello"), "taskType": "RETRIEVAL_QUERY", "outputDimensionality": 3}
    proto = await call(app, "POST", "/v1beta/models/echo:embedContent", json.dumps(body).encode())
    assert proto.status == 200, proto.payload
    assert proto.json() == {"embedding": {"values": [0.0, 1.0, 2.0]}}
    req = read_embedding_request(transport.sent[0].body)
    assert (req.texts, req.model_name, req.dimensions) == (("hello",), "flatgate-echo", 3)
    assert json.loads(req.extras) == {"taskType": "RETRIEVAL_QUERY"}
    assert req.extras_dialect == int(ApiDialect.GEMINI)


async def test_batch_embed_contents() -> None:
    app, transport = app_with(lambda sent: fakes.Response(200, [answer(2, 2)]))
    body = {
        "requests": [
            {"model": "models/echo", "content": text("a")},
            {"model": "models/echo", "content": {"parts": [{"text": "b"}, {"text": "c"}]}},
        ]
    }
    path = "/v1/models/echo:batchEmbedContents"
    proto = await call(app, "POST", path, json.dumps(body).encode())
    assert proto.status == 200, proto.payload
    assert proto.json() == {"embeddings": [{"values": [0.0, 1.0]}, {"values": [2.0, 3.0]}]}
    req = read_embedding_request(transport.sent[0].body)
    assert (req.texts, req.extras) == (("a", "bc"), "")


@pytest.mark.parametrize("batch", [True, False])
def test_a_large_answer_in_pieces_is_the_same_json(batch: bool) -> None:
    e = read_embedding_response(answer(9 if batch else 1, 16_384))
    sent = (
        {"requests": [{"model": "models/m", "content": text("x")}] * 9}
        if batch
        else {"content": text("x")}
    )
    verb = "batchEmbedContents" if batch else "embedContent"
    rendered = GeminiEmbed("m", verb).decode(json.dumps(sent).encode()).answer()
    whole = b"".join(rendered.pieces(e, "m", whole=True))
    pieces = list(rendered.pieces(e, "m", whole=False))
    assert len(pieces) == (5 if batch else 3)
    assert json.loads(whole) == json.loads(b"".join(pieces))
    assert rendered.size_bound(e) >= len(whole)


@pytest.mark.parametrize(
    ("verb", "body", "needle"),
    [
        (
            "embedContent",
            {"content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": "AA"}}]}},
            "content.parts.0.inlineData",
        ),
        ("embedContent", {"content": text("")}, "content"),
        ("embedContent", {"content": text("x"), "model": "models/other"}, "model"),
        ("batchEmbedContents", {"requests": [{"content": text("x")}]}, "requests.0.model"),
        (
            "batchEmbedContents",
            {
                "requests": [
                    {"model": "models/echo", "content": text("x")},
                    {"model": "models/echo", "content": text("y"), "taskType": "CLUSTERING"},
                ]
            },
            "requests.1.taskType",
        ),
        ("batchEmbedContents", {"requests": []}, "requests"),
        ("embedContent", {"contents": []}, "contents"),
        # Read by its camelCase name, then typed: a protobuf name is the same member.
        (
            "embedContent",
            {"content": text("x"), "output_dimensionality": "8"},
            "outputDimensionality",
        ),
        ("embedContent", {"content": {"parts": [{"text": "x", "q": 1}]}}, "content.parts.0.q"),
    ],
)
async def test_refusals_name_the_field(verb: str, body: dict[str, Any], needle: str) -> None:
    app, transport = app_with()
    proto = await call(app, "POST", f"/v1beta/models/echo:{verb}", json.dumps(body).encode())
    err = google_error(proto)
    assert (proto.status, err["status"]) == (400, "INVALID_ARGUMENT")
    [violation] = [v for d in err["details"] for v in d.get("fieldViolations", ())]
    assert violation["field"] == needle, err
    assert transport.sent == []
