"""Embeddings in the backend adapters, pure: what each is sent, what its answer becomes."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.proxy.backends.anthropic.adapter import AnthropicAdapter
from flatgate.proxy.backends.base import Adapter, Inbound, Untranslatable
from flatgate.proxy.backends.embeddings import encode_embeddings, read_embeddings
from flatgate.proxy.backends.extras import UnsupportedField
from flatgate.proxy.backends.fbs.adapter import FbsAdapter
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter, OpenAIConventions
from flatgate.proxy.backends.registry import PROTOCOLS
from flatgate.proxy.backends.responses.adapter import ResponsesAdapter
from flatgate.proxy.wire.embeddings import (
    MAX_DIMENSIONS,
    MAX_INPUTS,
    EmbeddingInput,
    read_embedding_request,
    read_embedding_response,
    write_embedding_request,
    write_embedding_response,
)
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FLATBUFFERS, JSON, ApiDialect

CHAT = int(ApiDialect.OPENAI_CHAT)
RESPONSES = int(ApiDialect.OPENAI_RESPONSES)


def config(protocol: str, **kw: Any) -> Any:  # its protocol's config class
    kw.setdefault("url", "http://127.0.0.1:9/v1")
    return PROTOCOLS[protocol].config(name="b", **kw)


def openai(**kw: Any) -> OpenAIAdapter:
    return OpenAIAdapter(config("openai", **kw))


def decoded(body: bytes) -> Any:
    return lambda: read_embedding_request(body)


def never() -> EmbeddingInput:
    raise AssertionError("the passthrough decoded the request")


def sent(adapter: OpenAIConventions, body: bytes, authorization: str = "") -> dict[str, Any]:
    out = adapter.prepare_embeddings(Inbound(body, decoded(body), "rid-1", authorization))
    doc: dict[str, Any] = json.loads(out.body)
    return doc


# -- the request -------------------------------------------------------------


def test_texts_go_as_a_string_list_asking_for_base64() -> None:
    body = write_embedding_request("text-embedding-3-small", texts=["hello world", "b"])
    adapter = openai(api_key="sk-1", headers={"x-static": "s"})
    out = adapter.prepare_embeddings(Inbound(body, decoded(body), "rid-1", "Bearer caller"))
    assert out.url == "http://127.0.0.1:9/v1/embeddings"
    assert json.loads(out.body) == {
        "model": "text-embedding-3-small",
        "input": ["hello world", "b"],
        "encoding_format": "base64",
    }
    assert out.headers == [
        ("content-type", JSON),
        ("accept", JSON),
        ("x-request-id", "rid-1"),
        ("authorization", "Bearer sk-1"),
        ("x-static", "s"),
    ]
    assert out.omitted == ()


def test_token_ids_dimensions_and_user_and_the_configured_model() -> None:
    body = write_embedding_request(
        "routed", tokens=[[1, 2, 3], [70000]], dimensions=256, user="u-7"
    )
    assert sent(openai(model="pinned"), body) == {
        "model": "pinned",
        "input": [[1, 2, 3], [70000]],
        "encoding_format": "base64",
        "dimensions": 256,
        "user": "u-7",
    }


def test_the_callers_credential_only_when_forwarded() -> None:
    body = write_embedding_request("m", texts=["x"])
    out = openai(forward_credentials=True).prepare_embeddings(
        Inbound(body, decoded(body), "r", "Bearer c")
    )
    assert ("authorization", "Bearer c") in out.headers
    out = openai().prepare_embeddings(Inbound(body, decoded(body), "r", "Bearer c"))
    assert all(name != "authorization" for name, _ in out.headers)


def test_the_responses_adapter_sends_embeddings_as_openai_does() -> None:
    body = write_embedding_request("m", texts=["x"], dimensions=8)
    adapter = ResponsesAdapter(config("openai-responses", url="http://h/v1/", api_key="k"))
    out = adapter.prepare_embeddings(Inbound(body, decoded(body), "r", ""))
    reference = openai(url="http://h/v1/", api_key="k").prepare_embeddings(
        Inbound(body, decoded(body), "r", "")
    )
    assert adapter.embeddings and out == reference
    assert out.url == "http://h/v1/embeddings"


def test_chat_extras_are_merged_never_over_the_adapters_own() -> None:
    extras = json.dumps(
        {
            "model": "other",
            "input": ["injected"],
            "encoding_format": "float",
            "dimensions": 64,
            "truncate_prompt_tokens": 12,
            "nested": {"a": [1, 2]},
        }
    )
    body = write_embedding_request(
        "m", texts=["x"], dimensions=8, extras=extras, extras_dialect=CHAT
    )
    out = openai().prepare_embeddings(Inbound(body, decoded(body), "r", ""))
    doc = json.loads(out.body)
    assert doc == {
        "model": "m",
        "input": ["x"],
        "encoding_format": "base64",
        "dimensions": 64,  # the client's own value wins, once
        "truncate_prompt_tokens": 12,
        "nested": {"a": [1, 2]},
    }
    assert out.body.count(b'"dimensions"') == 1


def test_another_dialects_extras_are_refused_or_dropped_and_named() -> None:
    body = write_embedding_request(
        "m", texts=["x"], extras='{"vendor_knob": 1}', extras_dialect=RESPONSES
    )
    with pytest.raises(UnsupportedField) as caught:
        openai().prepare_embeddings(Inbound(body, decoded(body), "r", ""))
    assert caught.value.param == "vendor_knob"
    out = openai(drop_unsupported=True).prepare_embeddings(Inbound(body, decoded(body), "r", ""))
    assert out.omitted == ("vendor_knob",)
    assert "vendor_knob" not in json.loads(out.body)


def test_extras_that_are_not_an_object_are_untranslatable() -> None:
    body = write_embedding_request("m", texts=["x"], extras="[1]", extras_dialect=CHAT)
    with pytest.raises(Untranslatable):
        openai().prepare_embeddings(Inbound(body, decoded(body), "r", ""))


def test_encode_embeddings_directly() -> None:
    req = read_embedding_request(write_embedding_request("m", tokens=[[5]]))
    assert encode_embeddings(req, model="n") == (
        b'{"model":"n","input":[[5]],"encoding_format":"base64"}'
    )


# -- the answer ----------------------------------------------------------------


def answer_of(
    vectors: np.ndarray, *, order: list[int] | None = None, floats: bool = False, **extra: Any
) -> bytes:
    rows = list(range(len(vectors))) if order is None else order
    data = []
    for i in rows:
        v = vectors[i]
        embedding: Any = v.tolist() if floats else base64.b64encode(v.astype("<f4")).decode()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    doc = {
        "object": "list",
        "data": data,
        "model": "served-model",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
        **extra,
    }
    return json.dumps(doc).encode()


def vectors_of(count: int, dimensions: int, seed: int = 24) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, dimensions)).astype("<f4")


def test_base64_vectors_land_byte_exact_in_input_order() -> None:
    vectors = vectors_of(5, 1536)
    body = answer_of(vectors, order=[3, 0, 4, 1, 2])
    out = openai().embeddings_answer(body, "rid-9", "routed")
    e = read_embedding_response(out)
    assert (e.request_id, e.model, e.count, e.dimensions) == ("rid-9", "served-model", 5, 1536)
    assert (e.prompt_tokens, e.total_tokens) == (7, 7)
    assert bytes(e.values) == vectors.tobytes()
    got = np.frombuffer(e.values, dtype="<f4").reshape(5, 1536)
    assert np.array_equal(got, vectors)
    assert bytes(e.vector(3)) == vectors[3].tobytes()


def test_float_lists_are_the_slow_path_to_the_same_bytes() -> None:
    vectors = vectors_of(3, 17)
    fast = openai().embeddings_answer(answer_of(vectors), "r", "m")
    slow = openai().embeddings_answer(answer_of(vectors, floats=True), "r", "m")
    assert fast == slow
    assert bytes(read_embedding_response(slow).values) == vectors.tobytes()


def test_the_two_kinds_may_be_mixed() -> None:
    vectors = vectors_of(2, 4)
    doc = json.loads(answer_of(vectors))
    doc["data"][1]["embedding"] = vectors[1].tolist()
    e = read_embedding_response(openai().embeddings_answer(json.dumps(doc).encode(), "r", "m"))
    assert bytes(e.values) == vectors.tobytes()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(1, 6),
    dimensions=st.integers(1, 70),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_any_order_and_size_decodes_to_numpys_bytes(
    count: int, dimensions: int, seed: int, data: st.DataObject
) -> None:
    vectors = vectors_of(count, dimensions, seed)
    order = data.draw(st.permutations(range(count)))
    out = read_embeddings(answer_of(vectors, order=order), request_id="r", model="m")
    e = read_embedding_response(out)
    assert (e.count, e.dimensions) == (count, dimensions)
    assert bytes(e.values) == vectors.tobytes()


def test_usage_and_model_when_the_server_leaves_them_out() -> None:
    vectors = vectors_of(1, 4)
    doc = json.loads(answer_of(vectors))
    del doc["usage"], doc["model"]
    e = read_embedding_response(openai().embeddings_answer(json.dumps(doc).encode(), "r", "routed"))
    assert (e.model, e.prompt_tokens, e.total_tokens) == ("routed", 0, 0)
    e = read_embedding_response(
        openai(model="pinned").embeddings_answer(json.dumps(doc).encode(), "r", "routed")
    )
    assert e.model == "pinned"
    doc["usage"] = {"prompt_tokens": 3}
    e = read_embedding_response(read_embeddings(json.dumps(doc).encode(), request_id="", model=""))
    assert (e.prompt_tokens, e.total_tokens) == (3, 3)


def _doc(vectors: np.ndarray) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(answer_of(vectors))
    return doc


def _bad_answers() -> list[tuple[str, bytes]]:
    two = vectors_of(2, 4)
    out: list[tuple[str, bytes]] = [
        ("not an embeddings answer", b"not json"),
        ("not an embeddings answer", b'{"object":"list"}'),
        ("not an embeddings answer", b'{"data":[{"index":0,"embedding":3}]}'),
        ("not an embeddings answer", b'{"data":[{"embedding":"AAAAAA=="}]}'),
        ("no embeddings", b'{"object":"list","data":[]}'),
    ]
    doc = _doc(two)
    doc["data"][1]["index"] = 0
    out.append(("given twice", json.dumps(doc).encode()))
    doc = _doc(two)
    doc["data"][1]["index"] = 2
    out.append(("outside 0..1", json.dumps(doc).encode()))
    doc = _doc(two)
    doc["data"][0]["index"] = -1
    out.append(("outside 0..1", json.dumps(doc).encode()))
    doc = _doc(two)
    doc["data"][1]["embedding"] = base64.b64encode(two[1][:3].tobytes()).decode()
    out.append(("not all of one length", json.dumps(doc).encode()))
    doc = _doc(two)
    doc["data"][1]["embedding"] = "AAA!AAAA"
    out.append(
        ("Invalid base64 encoded string - at `$.data[1].embedding`", json.dumps(doc).encode())
    )
    doc = _doc(two)
    doc["data"][0]["embedding"] = base64.b64encode(b"\0" * 6).decode()
    out.append(("not a whole number of float32", json.dumps(doc).encode()))
    doc = _doc(two)
    doc["data"][0]["embedding"] = ""
    out.append(("not a whole number of float32", json.dumps(doc).encode()))
    doc = _doc(two)
    doc["data"][0]["embedding"] = [1e39, 0.0, 0.0, 0.0]
    out.append(("out of float32's range", json.dumps(doc).encode()))
    wide = base64.b64encode(b"\0" * 4 * (MAX_DIMENSIONS + 1)).decode()
    out.append(
        (f"over {MAX_DIMENSIONS}", json.dumps({"data": [{"index": 0, "embedding": wide}]}).encode())
    )
    many = [{"index": i, "embedding": "AAAAAA=="} for i in range(MAX_INPUTS + 1)]
    out.append((f"over {MAX_INPUTS}", json.dumps({"data": many}).encode()))
    return out


@pytest.mark.parametrize(("reason", "body"), _bad_answers())
def test_bad_answers_are_refused_naming_what_is_wrong(reason: str, body: bytes) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        openai().embeddings_answer(body, "r", "m")


def test_a_body_over_the_bound_is_refused() -> None:
    body = answer_of(vectors_of(2, 8))
    assert openai().embeddings_answer(body, "r", "m", max_bytes=len(body))
    with pytest.raises(ValueError, match=f"over {len(body) - 1} bytes"):
        openai().embeddings_answer(body, "r", "m", max_bytes=len(body) - 1)


# -- fbs: untouched both ways --------------------------------------------------


def test_fbs_sends_the_untouched_bytes_to_its_embeddings_endpoint() -> None:
    body = write_embedding_request("m", texts=["x"], request_id="r")
    adapter = FbsAdapter(
        config("fbs", url="http://h:1/", forward_credentials=True, headers={"x-s": "1"})
    )
    out = adapter.prepare_embeddings(Inbound(body, never, "rid", "Bearer c"))
    assert out.body is body
    assert out.url == "http://h:1/v1/embeddings"
    assert out.headers == [
        ("content-type", FLATBUFFERS),
        ("accept", FLATBUFFERS),
        ("x-request-id", "rid"),
        ("authorization", "Bearer c"),
        ("x-s", "1"),
    ]
    plain = FbsAdapter(config("fbs", url="http://h:1")).prepare_embeddings(
        Inbound(body, never, "rid", "Bearer c")
    )
    assert all(name != "authorization" for name, _ in plain.headers)


def test_fbs_relays_a_verified_answer_as_it_came() -> None:
    vectors = vectors_of(2, 8)
    body = write_embedding_response(model="m", count=2, dimensions=8, values=vectors.tobytes())
    adapter = FbsAdapter(config("fbs"))
    assert adapter.embeddings_answer(body, "r", "m") is body
    assert adapter.embeddings_answer(body, "r", "m", max_bytes=len(body)) is body
    with pytest.raises(ValueError, match="not an EmbeddingResponse"):
        adapter.embeddings_answer(body, "r", "m", max_bytes=len(body) - 1)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b'{"error": "no"}',
        build_request("m", [("user", "hi")]),
        write_embedding_request("m", texts=["x"]),
        write_embedding_response(model="m", count=1, dimensions=4, values=bytes(16))[:-8],
    ],
)
def test_fbs_refuses_what_is_not_an_embedding_response(body: bytes) -> None:
    with pytest.raises(ValueError, match="not an EmbeddingResponse"):
        FbsAdapter(config("fbs")).embeddings_answer(body, "r", "m")


# -- anthropic: none -----------------------------------------------------------


def test_anthropic_has_no_embeddings() -> None:
    adapter = AnthropicAdapter(config("anthropic", url="https://api.anthropic.com/v1"))
    body = write_embedding_request("m", texts=["x"])
    assert adapter.embeddings is False
    with pytest.raises(Untranslatable, match="the anthropic protocol has no embeddings API"):
        adapter.prepare_embeddings(Inbound(body, decoded(body), "r", ""))
    with pytest.raises(ValueError):
        adapter.embeddings_answer(answer_of(vectors_of(1, 4)), "r", "m")


def test_every_adapter_says_whether_it_serves_embeddings() -> None:
    adapters: list[Adapter] = [
        FbsAdapter(config("fbs")),
        openai(),
        ResponsesAdapter(config("openai-responses")),
        AnthropicAdapter(config("anthropic")),
    ]
    assert {a.protocol: a.embeddings for a in adapters} == {
        "fbs": True,
        "openai": True,
        "openai-responses": True,
        "anthropic": False,
    }
