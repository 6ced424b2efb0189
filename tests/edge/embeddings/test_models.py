"""``openai_embeddings.request`` and ``embeddings.translate``: the request decoded
once, its inputs told apart, refused naming the field, and written as an
``EmbeddingRequest`` the wire reads back."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.edge_translator.embeddings.translate import estimate, write
from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.apis.openai_embeddings.request import decode
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.embeddings import MAX_INPUTS, read_embedding_request
from flatgate.proxy.wire.schema import ApiDialect


def _d(**body: object) -> bytes:
    return json.dumps({"model": "m", **body}).encode()


@pytest.mark.parametrize(
    ("value", "texts", "tokens"),
    [
        ("hi", ("hi",), ()),
        (["a", "b"], ("a", "b"), ()),
        ([1, 2, 3], (), ((1, 2, 3),)),
        ([[1], [2, 3]], (), ((1,), (2, 3))),
        (["x"] * MAX_INPUTS, ("x",) * MAX_INPUTS, ()),
        (list(range(5000)), (), (tuple(range(5000)),)),  # one long input is one input
    ],
)
def test_the_four_shapes_of_input(
    value: object, texts: tuple[str, ...], tokens: tuple[tuple[int, ...], ...]
) -> None:
    d = decode(_d(input=value))
    assert (d.texts, d.tokens) == (texts, tokens)
    assert d.count == len(texts) + len(tokens)
    req = read_embedding_request(write(d, provider=2, model_name="m2", tenant="t", request_id="r"))
    assert (req.texts, req.tokens, req.model_name, req.provider) == (texts, tokens, "m2", 2)
    assert (req.tenant, req.request_id, req.dimensions, req.extras) == ("t", "r", 0, "")


def test_fields_with_slots_and_extras() -> None:
    d = decode(
        b'{"model":"m","z":[1, 2],"input":"a","dimensions":8,"user":"u",'
        b'"encoding_format":"base64","a":{"b":null}}'
    )
    assert d.base64 and d.extras == b'{"z":[1, 2],"a":{"b":null}}'
    req = read_embedding_request(write(d, provider=0, model_name="m", tenant="", request_id=""))
    assert (req.dimensions, req.user) == (8, "u")
    assert req.extras == '{"z":[1, 2],"a":{"b":null}}'
    assert req.extras_dialect == int(ApiDialect.OPENAI_CHAT)
    assert not decode(_d(input="a", encoding_format="float")).base64


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (_d(input=""), "input", codes.INVALID_REQUEST),
        (_d(input=[]), "input", codes.INVALID_REQUEST),
        (_d(input=["a", ""]), "input.[1]", codes.INVALID_REQUEST),
        (_d(input=[[]]), "input.[0]", codes.INVALID_REQUEST),
        (_d(input=["a"] * (MAX_INPUTS + 1)), "input", codes.INVALID_REQUEST),
        (_d(input=[[1]] * (MAX_INPUTS + 1)), "input", codes.INVALID_REQUEST),
        (_d(input=[1, "a"]), "input", codes.INVALID_REQUEST),
        (_d(input=[[1], "a"]), "input", codes.INVALID_REQUEST),
        (_d(input={"a": 1}), "input", codes.INVALID_REQUEST),
        (_d(input=[2**31]), "input.[0]", codes.INVALID_REQUEST),
        (_d(input=[[1, "a"]]), "input.[0].[1]", codes.INVALID_REQUEST),
        (_d(input="a", dimensions=16385), "dimensions", codes.INVALID_REQUEST),
        (_d(input="a", encoding_format=None, user=[]), "user", codes.INVALID_REQUEST),
        (b'{"model":"m","input":"a"', None, codes.INVALID_JSON),
        (b'{"model":"m","input":"\xff"}', None, codes.INVALID_JSON),
        (b'{"model":"m","input":"a","x":"\xff"}', None, codes.INVALID_JSON),
        (
            b'{"model":"m","input":"a","x":' + b"[" * 100000 + b"]" * 100000 + b"}",
            None,
            codes.INVALID_JSON,
        ),
    ],
)
def test_refusals_name_the_field(body: bytes, param: str | None, code: codes.ErrorCode) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode(body)
    assert refused.value.param == param
    assert refused.value.code is code
    assert refused.value.status == 400


def test_the_estimate_counts_token_ids_and_text_bytes() -> None:
    assert estimate(decode(_d(input=[[1, 2], [3]]))) == 3
    assert estimate(decode(_d(input=["abcd", "abcde"]))) == 3  # 9 bytes, 4 a token
    assert estimate(decode(_d(input="\u00e9\u00e9"))) == 1  # 4 bytes of UTF-8


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=80)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists, max_leaves=8))
def test_any_json_input_decodes_or_is_a_400(value: object) -> None:
    try:
        d = decode(_d(input=value))
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.param is not None and exc.param.startswith("input")
        return
    assert d.count >= 1
    assert bool(d.texts) != bool(d.tokens)
