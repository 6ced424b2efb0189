"""``POST /v1/embeddings`` on the split stack: ``flatgate edge`` in front of a
real ``flatgate proxy`` over HTTP, an ``fbs`` stub behind it. The vectors the
client gets are the stub's, bit for bit."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import openai
import pytest

from flatgate.proxy.wire.embeddings import read_embedding_response, write_embedding_request
from tests.servers import Server, free_port, spawn
from tests.stacks import QUIET, loopback, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    d = tmp_path_factory.mktemp("split-embeddings")
    stub, proxy = free_port(), free_port()
    config = write_stack(
        d / "flatgate.toml",
        proxy={**QUIET, "port": proxy},
        stub={"port": stub},
        backends={"stub": loopback(stub)},
        routes={"vec": {"provider": "SelfHosted", "backends": ["stub"]}},
    )
    edge_config = write_stack(
        d / "edge.toml",
        edge={**QUIET, "proxy_url": loopback(proxy)},
        models={"vec": "SelfHosted"},
    )
    services = [
        spawn("stub", ["--config", config], d, port=stub),
        spawn("proxy", ["--config", config], d, port=proxy),
        spawn("edge", ["--config", edge_config], d),
    ]
    start_all(services)
    try:
        yield services[0], services[2]
    finally:
        stop_all(services)


def test_the_edge_serves_the_stubs_vectors_through_the_proxy(
    servers: tuple[Server, Server],
) -> None:
    stub, edge = servers
    texts = ["one fish", "two fish", "red fish blue fish"]
    direct = httpx.post(
        f"{stub.url}/v1/embeddings",
        content=write_embedding_request("vec", texts=texts, provider=2, dimensions=64),
        headers={"content-type": "application/x-flatbuffers"},
    )
    assert direct.status_code == 200
    want = read_embedding_response(direct.content)
    with openai.OpenAI(base_url=f"{edge.url}/v1", api_key="x", max_retries=0) as c:
        got = c.embeddings.create(model="vec", input=texts, dimensions=64)
        floats = c.embeddings.create(
            model="vec", input=texts, dimensions=64, encoding_format="float"
        )
    assert [e.embedding for e in got.data] == [e.embedding for e in floats.data]
    assert got.usage.prompt_tokens == want.prompt_tokens == 8
    raw = httpx.post(
        f"{edge.url}/v1/embeddings",
        json={"model": "vec", "input": texts, "dimensions": 64, "encoding_format": "base64"},
    ).json()
    for i, item in enumerate(raw["data"]):
        assert base64.b64decode(item["embedding"]) == bytes(want.vector(i))
