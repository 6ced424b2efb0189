"""``backends.gemini.embeddings``: embedContent / batchEmbedContents bodies
(validated by google-genai's own types) and their answers into an
``EmbeddingResponse`` buffer."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from google.genai import _common
from google.genai import types as genai

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import UnsupportedField
from flatgate.proxy.backends.gemini.embeddings import BATCH, SINGLE, encode_embed, read_embed
from flatgate.proxy.wire.embeddings import EmbeddingInput, read_embedding_response
from flatgate.proxy.wire.schema import ApiDialect

CHAT = int(ApiDialect.OPENAI_CHAT)
GEMINI = int(ApiDialect.GEMINI)


class EmbedBody(_common.BaseModel):
    """One embedContent request as google-genai's types have it."""

    content: genai.Content
    model: str | None = None
    task_type: str | None = None
    title: str | None = None
    output_dimensionality: int | None = None


class BatchBody(_common.BaseModel):
    requests: list[EmbedBody]


def embed_input(
    *texts: str, dimensions: int = 0, user: str = "", extras: str = "", dialect: int = CHAT
) -> EmbeddingInput:
    return EmbeddingInput("r1", 0, "m", texts, (), dimensions, user, "", extras, dialect)


def encode(req: EmbeddingInput, drop: bool = False) -> tuple[str, dict[str, Any], list[str]]:
    omitted: list[str] = []
    method, body = encode_embed(
        req, model="gemini-embedding-001", omitted=omitted, drop_unsupported=drop
    )
    doc = json.loads(body)
    (EmbedBody if method == SINGLE else BatchBody).model_validate(doc)
    return method, doc, omitted


def test_one_text_is_embed_content() -> None:
    method, body, omitted = encode(embed_input("hello", dimensions=768, user="u"))
    assert method == SINGLE
    assert body == {"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 768}
    assert omitted == ["user"]


def test_several_texts_are_one_batch_each_naming_its_model() -> None:
    extras = json.dumps({"task_type": "RETRIEVAL_DOCUMENT", "title": "Doc"})
    method, body, _ = encode(embed_input("a", "b", extras=extras))
    assert method == BATCH
    assert body == {
        "requests": [
            {
                "content": {"parts": [{"text": t}]},
                "model": "models/gemini-embedding-001",
                "taskType": "RETRIEVAL_DOCUMENT",
                "title": "Doc",
            }
            for t in ("a", "b")
        ]
    }


def test_geminis_own_fields_win() -> None:
    extras = json.dumps({"taskType": "CLUSTERING", "outputDimensionality": 256})
    _, body, _ = encode(embed_input("a", dimensions=768, extras=extras, dialect=GEMINI))
    assert body["taskType"] == "CLUSTERING"
    assert body["outputDimensionality"] == 256


def test_what_gemini_cannot_take_is_refused() -> None:
    with pytest.raises(UnsupportedField):
        encode(embed_input("a", extras='{"encoding_format": "float"}'))
    _, _, omitted = encode(embed_input("a", extras='{"encoding_format": "float"}'), drop=True)
    assert omitted == ["encoding_format"]
    with pytest.raises(Untranslatable, match="task type"):
        encode(embed_input("a", extras='{"task_type": "POETRY"}'))
    tokens = EmbeddingInput("r1", 0, "m", (), ((1, 2),), 0, "", "", "", CHAT)
    with pytest.raises(Untranslatable, match="input"):
        encode(tokens)


def test_answers_read_into_one_buffer() -> None:
    single = {"embedding": {"values": [0.5, -0.25, 1.0]}}
    genai.ContentEmbedding.model_validate(single["embedding"])
    got = read_embedding_response(
        read_embed(json.dumps(single).encode(), request_id="r1", model="gemini-embedding-001")
    )
    assert (got.count, got.dimensions, got.model) == (1, 3, "gemini-embedding-001")
    assert struct.unpack("<3f", got.values) == (0.5, -0.25, 1.0)
    batch = {"embeddings": [{"values": [1.0, 2.0]}, {"values": [3.0, 4.0]}]}
    genai.EmbedContentResponse.model_validate(batch)
    got = read_embedding_response(
        read_embed(json.dumps(batch).encode(), request_id="r1", model="m")
    )
    assert (got.count, got.dimensions) == (2, 2)
    assert struct.unpack("<4f", got.values) == (1.0, 2.0, 3.0, 4.0)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"{}", "no embedding"),
        (b'{"embeddings": [{"values": [1.0]}, {"values": [1.0, 2.0]}]}', "different lengths"),
        (b'{"embedding": {"values": [1e300]}}', "float32"),
        (b"[", "not a Gemini"),
    ],
)
def test_bad_answers_say_what_is_wrong(body: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        read_embed(body, request_id="r", model="m")
