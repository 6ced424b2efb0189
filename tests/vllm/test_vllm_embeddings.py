"""A real vLLM server (0.32, CPU) serving embeddings behind flatgate's
``openai`` backend: the tiny Llama of ``make_model.py`` run as a pooling
model (``--runner pooling --convert embed``; ``conftest.embed_server``), each
request sent with the ``openai`` SDK to vLLM directly and through the
gateway, and the answers compared bit for bit.

Covered: base64 (the decoded float32 bytes equal, and the base64 text too),
the SDK's default (it asks for base64 and decodes it), ``encoding_format:
"float"`` (the same numbers; flatgate still asks vLLM for base64), a list of
inputs (in order), token-id inputs (and that they embed as their text does),
``dimensions`` of a matryoshka size, one of no such size (vLLM's 400 passed
on), vLLM's own fields as extras (``use_activation``,
``truncate_prompt_tokens``), and the usage counts.

Each exchange between flatgate and vLLM is captured by the recorder in
between, and kept as a fixture with ``FLATGATE_VLLM_RECORD=1``
(``embedding_captures``); ``tests/backends/test_vllm_embeddings_fixtures.py``
replays them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.backends.vllm_fixtures import write_capture
from tests.vllm.conftest import EMBED_MODEL, MATRYOSHKA, VllmStack
from tests.vllm.embedding_captures import embeddings_view

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

STORY = "tell me a story about paris"
TEXTS = [STORY, "the quick brown fox jumps over the lazy dog", "one two three"]


class Exchange:
    """One request both ways: the views, what the SDK parsed, and what
    flatgate's adapter sent vLLM."""

    def __init__(self, direct: Any, through: Any, parsed: Any, adapter: Any) -> None:
        self.direct = direct
        self.through = through
        self.parsed = parsed  # (direct, through): the SDK's objects, None on an error
        self.adapter = adapter


def _call(base: str, fields: dict[str, Any]) -> tuple[int, bytes, Any, bytes]:
    """``embeddings.create(**fields)`` at ``base``: status, raw body, the SDK's
    parsed answer (``None`` on an error) and the request body it sent."""
    http = openai.DefaultHttpxClient(timeout=300, trust_env=False)
    with openai.OpenAI(base_url=base, api_key="unused", max_retries=0, http_client=http) as client:
        try:
            raw = client.embeddings.with_raw_response.create(model=EMBED_MODEL, **fields)
        except openai.APIStatusError as exc:
            request = exc.response.request.content
            return exc.status_code, exc.response.content, None, request
        return raw.status_code, raw.content, raw.parse(), raw.http_request.content


def embed(stack: VllmStack, capture: Path | None, case: str, **fields: Any) -> Exchange:
    """``fields`` to vLLM and to flatgate through the SDK, compared as read."""
    stack.recorder.take()
    d_status, d_body, d_parsed, sent = _call(stack.vllm, fields)
    f_status, f_body, f_parsed, f_sent = _call(stack.gateway, fields)
    assert json.loads(f_sent) == json.loads(sent)
    seen = stack.recorder.take()
    assert len(seen) == 1, [s.path for s in seen]
    exchange = seen[0]
    assert exchange.path == "/v1/embeddings"
    if capture is not None:
        record = {
            "case": case,
            "api": "embeddings",
            "request": json.loads(sent),
            "direct": {"status": d_status, "body": d_body.decode()},
            "flatgate": {"status": f_status, "body": f_body.decode()},
            "adapter_request": json.loads(exchange.request),
            "backend": {"status": exchange.status, "content_type": exchange.content_type},
        }
        write_capture(capture, record, exchange.body)
    adapter = json.loads(exchange.request)
    # flatgate always asks for the raw float32 bytes, whatever the client asked.
    assert adapter["encoding_format"] == "base64"
    assert adapter["model"] == EMBED_MODEL
    return Exchange(
        embeddings_view(d_status, d_body),
        embeddings_view(f_status, f_body),
        (d_parsed, f_parsed),
        adapter,
    )


def ok(view: Any) -> Any:
    assert view["status"] == 200, view
    return view


def direct_vectors(stack: VllmStack, **fields: Any) -> list[bytes]:
    """vLLM's vectors for ``fields``, asked directly (no capture)."""
    status, body, _, _ = _call(stack.vllm, fields)
    return list(ok(embeddings_view(status, body))["vectors"])


def _tokens(stack: VllmStack, text: str) -> list[int]:
    with httpx.Client(timeout=60, trust_env=False) as c:
        root = stack.vllm.removesuffix("/v1")
        answer = c.post(root + "/tokenize", json={"model": EMBED_MODEL, "prompt": text}).json()
    assert answer["tokens"], answer
    return list(answer["tokens"])


# -- formats ---------------------------------------------------------------------


def test_base64_bit_for_bit(embed_stack: VllmStack, embeddings_capture_dir: Path | None) -> None:
    ex = embed(embed_stack, embeddings_capture_dir, "base64", input=STORY, encoding_format="base64")
    want = ok(ex.direct)
    assert ex.through == want
    (vector,) = want["vectors"]
    assert len(vector) > 4 * max(MATRYOSHKA) and len(vector) % 4 == 0
    assert any(vector)
    # The base64 text itself is the same: the same bytes, the same encoding.
    direct, through = ex.parsed
    assert through.data[0].embedding == direct.data[0].embedding
    assert isinstance(through.data[0].embedding, str)
    assert want["usage"]["prompt_tokens"] == len(_tokens(embed_stack, STORY))
    assert want["usage"]["total_tokens"] == want["usage"]["prompt_tokens"]
    assert ex.adapter["input"] == [STORY]


def test_sdk_default_decodes_the_same_floats(
    embed_stack: VllmStack, embeddings_capture_dir: Path | None
) -> None:
    ex = embed(embed_stack, embeddings_capture_dir, "sdk_default", input=STORY)
    # The SDK asks for base64 when the caller does not say, and decodes it.
    direct, through = ex.parsed
    assert ex.through == ok(ex.direct)
    assert through.data[0].embedding == direct.data[0].embedding
    assert isinstance(through.data[0].embedding, list) and len(through.data[0].embedding) > 0
    assert through.usage.prompt_tokens == direct.usage.prompt_tokens > 0


def test_float_values_equal(embed_stack: VllmStack, embeddings_capture_dir: Path | None) -> None:
    ex = embed(embed_stack, embeddings_capture_dir, "float", input=STORY, encoding_format="float")
    want = ok(ex.direct)
    # vLLM's numbers to the client directly; flatgate's from vLLM's base64 bytes.
    assert ex.through["numbers"] == want["numbers"]
    assert ex.through == want
    assert want["vectors"] == direct_vectors(embed_stack, input=STORY, encoding_format="base64")


# -- inputs ----------------------------------------------------------------------


def test_a_list_of_inputs_in_order(
    embed_stack: VllmStack, embeddings_capture_dir: Path | None
) -> None:
    ex = embed(embed_stack, embeddings_capture_dir, "inputs", input=TEXTS, encoding_format="base64")
    want = ok(ex.direct)
    assert ex.through == want
    assert want["indices"] == [0, 1, 2]
    assert len(set(want["vectors"])) == len(TEXTS)
    total = sum(len(_tokens(embed_stack, t)) for t in TEXTS)
    assert want["usage"]["prompt_tokens"] == total
    assert ex.adapter["input"] == TEXTS


def test_token_id_inputs(embed_stack: VllmStack, embeddings_capture_dir: Path | None) -> None:
    ids = [_tokens(embed_stack, t) for t in TEXTS[:2]]
    ex = embed(
        embed_stack, embeddings_capture_dir, "token_ids", input=ids, encoding_format="base64"
    )
    want = ok(ex.direct)
    assert ex.through == want
    assert ex.adapter["input"] == ids
    assert want["usage"]["prompt_tokens"] == sum(map(len, ids))
    # Token ids embed as the text they spell (the tokenizer adds no BOS).
    assert want["vectors"][0] == direct_vectors(embed_stack, input=TEXTS[0])[0]


def test_one_list_of_token_ids_is_one_input(embed_stack: VllmStack) -> None:
    ids = _tokens(embed_stack, STORY)
    ex = embed(embed_stack, None, "", input=ids, encoding_format="base64")
    assert ex.through == ok(ex.direct)
    assert len(ex.direct["vectors"]) == 1
    assert ex.adapter["input"] == [ids]


# -- dimensions and vLLM's fields ------------------------------------------------


def test_dimensions_of_a_matryoshka_size(
    embed_stack: VllmStack, embeddings_capture_dir: Path | None
) -> None:
    size = MATRYOSHKA[0]
    ex = embed(
        embed_stack,
        embeddings_capture_dir,
        "dimensions",
        input=TEXTS[:2],
        dimensions=size,
        encoding_format="base64",
    )
    want = ok(ex.direct)
    assert ex.through == want
    assert [len(v) for v in want["vectors"]] == [4 * size, 4 * size]
    assert ex.adapter["dimensions"] == size


def test_dimensions_of_no_matryoshka_size_is_vllms_400(
    embed_stack: VllmStack, embeddings_capture_dir: Path | None
) -> None:
    size = MATRYOSHKA[0] + 1
    ex = embed(
        embed_stack, embeddings_capture_dir, "dimensions_refused", input=STORY, dimensions=size
    )
    assert ex.direct["status"] == 400, ex.direct
    reason = ex.direct["error"]["message"]
    assert str(list(MATRYOSHKA)) in reason, reason
    assert ex.through["status"] == 400, ex.through
    error = ex.through["error"]
    assert error["type"] == "invalid_request_error", error
    assert reason in error["message"], error
    assert ex.adapter["dimensions"] == size


def test_vllm_fields_reach_vllm(
    embed_stack: VllmStack, embeddings_capture_dir: Path | None
) -> None:
    vendor = {"use_activation": False, "truncate_prompt_tokens": 3}
    ex = embed(
        embed_stack,
        embeddings_capture_dir,
        "vendor_fields",
        input=STORY,
        encoding_format="base64",
        extra_body=vendor,
    )
    want = ok(ex.direct)
    assert ex.through == want
    for field, value in vendor.items():
        assert ex.adapter[field] == value, field
    assert want["usage"]["prompt_tokens"] == 3
    # Each changes the vector: not normalized, and from three tokens.
    assert want["vectors"] != direct_vectors(embed_stack, input=STORY, encoding_format="base64")
    assert want["vectors"] != direct_vectors(
        embed_stack, input=STORY, encoding_format="base64", extra_body={"truncate_prompt_tokens": 3}
    )
