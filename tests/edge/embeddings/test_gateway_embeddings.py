"""``POST /v1/embeddings`` through the one-process gateway (``flatgate
gateway``: the edge's code, the proxy in process) with stubs behind it, in
the ``fbs`` and ``openai`` protocols; the openai SDK as the client."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.servers import Server, running
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-gateway"
METERED = "sk-metered"


class Stack:
    def __init__(self, fbs: Server, oai: Server, gateway: Server) -> None:
        self.fbs, self.oai, self.gateway = fbs, oai, gateway
        self._clients: list[openai.OpenAI] = []

    def client(self, key: str = KEY) -> openai.OpenAI:
        c = openai.OpenAI(base_url=f"{self.gateway.url}/v1", api_key=key, max_retries=0)
        self._clients.append(c)
        return c

    def post(self, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{self.gateway.url}/v1/embeddings",
            json=body,
            headers={"authorization": f"Bearer {KEY}"},
        )

    def close(self) -> None:
        for c in self._clients:
            c.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("gateway-embeddings")
    with (
        running("stub", [], d) as fbs,
        running("stub", ["--protocol", "openai"], d) as oai,
    ):
        cfg = write_stack(
            d / "g.toml",
            proxy=QUIET,
            backends={
                "fbs": fbs.url,
                "oai": {"url": f"{oai.url}/v1", "protocol": "openai"},
                # Never reached: Anthropic's API has no embeddings.
                "claude": {"url": "http://127.0.0.1:9", "protocol": "anthropic"},
            },
            routes={
                "vec": "fbs",
                "vec-openai": "oai",
                "vec@rate_limit": "fbs",
                "vec-openai@fail": "oai",
                "claude": "claude",
            },
            edge={"access_log": False},
            models={
                "vec": "SelfHosted",
                "vec-openai": "OpenAI",
                "vec@rate_limit": "SelfHosted",
                "vec-openai@fail": "OpenAI",
                "claude": "Anthropic",
            },
            keys={KEY: "acme", METERED: "metered"},
            limits=[{"tenant": "metered", "model": "*", "tokens_per_minute": 50}],
        )
        with running("gateway", ["--config", cfg], d) as gateway:
            stack = Stack(fbs, oai, gateway)
            try:
                yield stack
            finally:
                stack.close()


@pytest.mark.parametrize("model", ["vec", "vec-openai"])
def test_the_sdk_default_and_float_give_the_same_vectors(stack: Stack, model: str) -> None:
    c = stack.client()
    texts = ["the quick brown fox", "jumps", "over the lazy dog"]
    b64 = c.embeddings.create(model=model, input=texts)
    floats = c.embeddings.create(model=model, input=texts, encoding_format="float")
    assert b64.model == floats.model == model
    assert [e.index for e in b64.data] == [0, 1, 2]
    assert [e.embedding for e in b64.data] == [e.embedding for e in floats.data]
    assert len({tuple(e.embedding) for e in b64.data}) == 3  # one vector per input
    assert b64.usage.prompt_tokens == 9 and b64.usage.total_tokens == 9


@pytest.mark.parametrize("model", ["vec", "vec-openai"])
def test_dimensions_and_token_ids(stack: Stack, model: str) -> None:
    c = stack.client()
    got = c.embeddings.create(model=model, input=[[1, 2, 3], [4]], dimensions=32)
    assert [len(e.embedding) for e in got.data] == [32, 32]
    assert got.usage.prompt_tokens == 4
    one = c.embeddings.create(model=model, input=[1, 2, 3], dimensions=32)
    assert one.data[0].embedding == got.data[0].embedding


def test_both_protocols_carry_the_stubs_vectors_bit_for_bit(stack: Stack) -> None:
    body = {"model": "vec", "input": ["alpha", "beta gamma"], "encoding_format": "base64"}
    direct = httpx.post(f"{stack.oai.url}/v1/embeddings", json=body).json()
    want = [base64.b64decode(e["embedding"]) for e in direct["data"]]
    for model in ("vec", "vec-openai"):
        got = stack.post({**body, "model": model})
        assert got.status_code == 200, got.text
        assert [base64.b64decode(e["embedding"]) for e in got.json()["data"]] == want


def test_backend_errors_reach_the_client_as_for_chat(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(openai.RateLimitError) as limited:
        c.embeddings.create(model="vec@rate_limit", input="x")
    assert limited.value.code == "backend_rate_limited"
    assert limited.value.response.headers["retry-after"]
    with pytest.raises(openai.APIStatusError) as failed:
        c.embeddings.create(model="vec-openai@fail", input="x")
    assert failed.value.status_code >= 500


def test_an_anthropic_route_refuses_embeddings(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client().embeddings.create(model="claude", input="x")
    assert refused.value.code == "embeddings_unsupported"


def test_client_errors_and_unknown_models(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(openai.BadRequestError):
        c.embeddings.create(model="vec", input=[])
    with pytest.raises(openai.BadRequestError):
        c.embeddings.create(model="vec", input=["x"] * 2049)
    with pytest.raises(openai.NotFoundError):
        c.embeddings.create(model="nothing-here", input="x")


def test_tokens_per_minute_count_the_stubs_prompt_tokens(stack: Stack) -> None:
    c = stack.client(METERED)
    words = " ".join(["w"] * 30)
    ok = c.embeddings.with_raw_response.create(model="vec", input=words)
    assert ok.parse().usage.prompt_tokens == 30
    # Reserved from the estimate (60 bytes: 15 tokens), settled to the 30 reported.
    with pytest.raises(openai.RateLimitError) as refused:
        c.embeddings.create(model="vec", input=list(range(25)))
    assert refused.value.code == "tenant_rate_limited"
    metrics = httpx.get(f"{stack.gateway.url}/metrics").text
    assert 'flatgate_edge_requests_total{route="/v1/embeddings",status="200"}' in metrics
