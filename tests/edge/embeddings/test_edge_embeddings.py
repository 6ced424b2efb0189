"""``POST /v1/embeddings`` on a real ``flatgate edge``, in front of a fake
proxy (``fake_proxy``), spoken to with the official openai SDK and httpx."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from flatgate.proxy.wire.schema import ApiDialect
from tests.edge.embeddings.fake_proxy import FakeProxy, expected_vector, fake_proxy
from tests.servers import Server, spawn
from tests.stacks import start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-acme"
NARROW = "sk-narrow"
METERED = "sk-metered"
SETTLED = "sk-settled"
MODELS = (
    "embed",
    "embed-cheap",
    "embed-nousage",
    "embed-429",
    "embed-502",
    "embed-unsupported",
    "embed-huge",
    "embed-garbage",
    "embed-short",
)


class Stack:
    def __init__(self, edge: Server, proxy: FakeProxy) -> None:
        self.edge, self.proxy = edge, proxy
        self._clients: list[openai.OpenAI] = []

    def client(self, key: str = KEY) -> openai.OpenAI:
        c = openai.OpenAI(base_url=f"{self.edge.url}/v1", api_key=key, max_retries=0)
        self._clients.append(c)
        return c

    def post(self, body: dict[str, Any], key: str = KEY, **kw: Any) -> httpx.Response:
        return httpx.post(
            f"{self.edge.url}/v1/embeddings",
            json=body,
            headers={"authorization": f"Bearer {key}", **kw.pop("headers", {})},
            **kw,
        )

    def close(self) -> None:
        for c in self._clients:
            c.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("embeddings")
    with fake_proxy() as proxy:
        config = write_stack(
            d / "edge.toml",
            edge={"proxy_url": proxy.url, "max_response_bytes": 65536, "access_log": False},
            models=dict.fromkeys(MODELS, "OpenAI"),
            keys={
                KEY: "acme",
                NARROW: {"tenant": "narrow", "models": ["embed"]},
                METERED: "metered",
                SETTLED: "settled",
            },
            limits=[
                {"tenant": "metered", "model": "*", "tokens_per_minute": 100},
                {"tenant": "settled", "model": "*", "tokens_per_minute": 1000},
            ],
        )
        edge = spawn("edge", ["--config", config], d)
        start_all([edge])
        stack = Stack(edge, proxy)
        try:
            yield stack
        finally:
            stack.close()
            stop_all([edge])


def test_the_sdks_default_base64_is_decoded_to_the_vectors(stack: Stack) -> None:
    got = stack.client().embeddings.create(model="embed", input="hello embedding world")
    assert got.object == "list" and got.model == "embed"
    assert [e.embedding for e in got.data] == [expected_vector(0, 4)]
    assert got.data[0].index == 0 and got.data[0].object == "embedding"
    assert got.usage.prompt_tokens == 3 and got.usage.total_tokens == 3
    seen = stack.proxy.seen[-1]
    assert seen.path == "/v1/embeddings"
    assert seen.headers["content-type"] == "application/x-flatbuffers"
    req = stack.proxy.last()
    assert req.texts == ("hello embedding world",) and req.tokens == ()
    assert (req.model_name, req.tenant, req.dimensions, req.extras) == ("embed", "acme", 0, "")


def test_float_a_list_dimensions_and_user(stack: Stack) -> None:
    got = stack.client().embeddings.create(
        model="embed",
        input=["one", "two two", "three three three"],
        encoding_format="float",
        dimensions=3,
        user="end-user-7",
    )
    assert [e.embedding for e in got.data] == [expected_vector(i, 3) for i in range(3)]
    assert [e.index for e in got.data] == [0, 1, 2]
    assert got.usage.prompt_tokens == 6
    req = stack.proxy.last()
    assert req.texts == ("one", "two two", "three three three")
    assert (req.dimensions, req.user) == (3, "end-user-7")


def test_token_ids_and_lists_of_token_ids(stack: Stack) -> None:
    c = stack.client()
    one = c.embeddings.create(model="embed", input=[11, 12, 13])
    assert len(one.data) == 1 and one.usage.prompt_tokens == 3
    assert stack.proxy.last().tokens == ((11, 12, 13),)
    many = c.embeddings.create(model="embed", input=[[1, 2], [3], [4, 5, 6]], dimensions=2)
    assert [e.embedding for e in many.data] == [expected_vector(i, 2) for i in range(3)]
    req = stack.proxy.last()
    assert req.tokens == ((1, 2), (3,), (4, 5, 6)) and req.texts == ()


def test_base64_is_the_little_endian_float32_bytes(stack: Stack) -> None:
    r = stack.post({"model": "embed", "input": ["a", "b"], "encoding_format": "base64"})
    assert r.status_code == 200 and r.headers["x-request-id"]
    body = r.json()
    for i, item in enumerate(body["data"]):
        raw = base64.b64decode(item["embedding"])
        assert raw == struct.pack("<4f", *expected_vector(i, 4))
    floats = stack.post({"model": "embed", "input": "a"}).json()  # float by default
    assert floats["data"][0]["embedding"] == expected_vector(0, 4)
    assert set(floats) == {"object", "data", "model", "usage"}


def test_other_fields_travel_as_extras(stack: Stack) -> None:
    got = stack.client().embeddings.create(
        model="embed", input="x", extra_body={"truncate_prompt_tokens": 5, "normalize": True}
    )
    assert len(got.data) == 1
    req = stack.proxy.last()
    assert req.extras == '{"truncate_prompt_tokens":5,"normalize":true}'
    assert req.extras_dialect == int(ApiDialect.OPENAI_CHAT)


def test_the_request_id_travels_and_comes_back(stack: Stack) -> None:
    r = stack.post({"model": "embed", "input": "x"}, headers={"x-request-id": "emb-123"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "emb-123"
    assert stack.proxy.last().request_id == "emb-123"
    assert stack.proxy.seen[-1].headers["x-request-id"] == "emb-123"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "embed", "input": ""}, "input"),
        ({"model": "embed", "input": []}, "input"),
        ({"model": "embed", "input": ["a", ""]}, "input.[1]"),
        ({"model": "embed", "input": [[1], []]}, "input.[1]"),
        ({"model": "embed", "input": ["a"] * 2049}, "input"),
        ({"model": "embed", "input": ["a", 1]}, "input"),
        ({"model": "embed", "input": 5}, "input"),
        ({"model": "embed", "input": [1.5]}, "input.[0]"),
        ({"model": "embed", "input": [-1]}, "input.[0]"),
        ({"model": "embed", "input": "x", "dimensions": "3"}, "dimensions"),
        ({"model": "embed", "input": "x", "dimensions": 0}, "dimensions"),
        ({"model": "embed", "input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "embed", "input": "x", "user": 7}, "user"),
        ({"model": "embed", "input": "x", "$flatgate": 1}, "$flatgate"),
        ({"input": "x"}, "model"),
        ({"model": "embed"}, "input"),
    ],
)
def test_bad_requests_are_400_naming_the_field(
    stack: Stack, body: dict[str, Any], param: str
) -> None:
    before = len(stack.proxy.seen)
    r = stack.post(body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert len(stack.proxy.seen) == before  # never sent


def test_the_sdk_raises_for_empty_and_too_many_inputs(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(openai.BadRequestError):
        c.embeddings.create(model="embed", input="")
    with pytest.raises(openai.BadRequestError) as many:
        c.embeddings.create(model="embed", input=["x"] * 2049)
    assert "2048" in many.value.message


def test_unknown_and_disallowed_models_are_404(stack: Stack) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        stack.client().embeddings.create(model="no-such-model", input="x")
    assert unknown.value.code == "model_not_found"
    narrow = stack.client(NARROW)
    assert len(narrow.embeddings.create(model="embed", input="x").data) == 1
    with pytest.raises(openai.NotFoundError):
        narrow.embeddings.create(model="embed-cheap", input="x")


def test_a_wrong_key_is_401(stack: Stack) -> None:
    with pytest.raises(openai.AuthenticationError):
        stack.client("sk-wrong").embeddings.create(model="embed", input="x")


def test_the_proxys_errors_are_mapped_as_for_chat(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(openai.RateLimitError) as limited:
        c.embeddings.create(model="embed-429", input="x")
    assert limited.value.code == "backend_rate_limited"
    assert limited.value.response.headers["retry-after"] == "7"
    with pytest.raises(openai.InternalServerError) as failed:
        c.embeddings.create(model="embed-502", input="x")
    assert failed.value.status_code == 502 and failed.value.code == "backend_error"
    with pytest.raises(openai.BadRequestError) as unsupported:
        c.embeddings.create(model="embed-unsupported", input="x")
    assert unsupported.value.code == "embeddings_unsupported"


@pytest.mark.parametrize("model", ["embed-huge", "embed-garbage", "embed-short"])
def test_an_answer_the_edge_cannot_take_is_502(stack: Stack, model: str) -> None:
    r = stack.post({"model": model, "input": ["a", "b"]})
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "proxy_protocol_error"
    if model == "embed-huge":
        assert "max_response_bytes" in r.json()["error"]["message"]


def test_usage_not_reported_is_zero(stack: Stack) -> None:
    got = stack.client().embeddings.create(model="embed-nousage", input="a b c")
    assert got.usage.prompt_tokens == 0 and len(got.data) == 1


def test_tokens_per_minute_count_the_prompt_tokens(stack: Stack) -> None:
    c = stack.client(METERED)
    ok = c.embeddings.with_raw_response.create(model="embed", input=list(range(80)))
    assert ok.headers["x-ratelimit-limit-tokens"] == "100"
    assert int(ok.headers["x-ratelimit-remaining-tokens"]) <= 20  # 80 reserved
    before = len(stack.proxy.seen)
    with pytest.raises(openai.RateLimitError) as refused:
        c.embeddings.create(model="embed", input=list(range(80)))
    assert refused.value.code == "tenant_rate_limited"
    assert len(stack.proxy.seen) == before  # refused before the proxy


def test_the_reservation_settles_to_the_answers_prompt_tokens(stack: Stack) -> None:
    c = stack.client(SETTLED)
    text = "word " * 800  # 4,000 bytes: an estimate of 1,000 tokens, the whole minute
    first = c.embeddings.with_raw_response.create(model="embed-cheap", input=text)
    assert int(first.headers["x-ratelimit-remaining-tokens"]) <= 5
    # Settled to the 1 token the answer reported: the budget is back.
    second = c.embeddings.with_raw_response.create(model="embed-cheap", input="short")
    assert int(second.headers["x-ratelimit-remaining-tokens"]) >= 990


def test_metrics_count_the_requests_and_the_tenants_tokens(stack: Stack) -> None:
    stack.client().embeddings.create(model="embed", input=[1, 2, 3, 4, 5])
    text = httpx.get(f"{stack.edge.url}/metrics").text
    assert 'flatgate_edge_requests_total{route="/v1/embeddings",status="200"}' in text
    line = next(
        x
        for x in text.splitlines()
        if x.startswith("flatgate_edge_tenant_tokens_total{")
        and 'tenant="acme"' in x
        and 'model="embed"' in x
        and 'kind="prompt"' in x
    )
    assert float(line.rsplit(" ", 1)[1]) >= 5


def test_only_post(stack: Stack) -> None:
    r = httpx.get(f"{stack.edge.url}/v1/embeddings")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
