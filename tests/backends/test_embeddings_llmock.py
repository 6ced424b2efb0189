"""The openai adapter's embeddings against a third-party server (llmock), over a
real socket: llmock ignores ``encoding_format`` and answers float lists, the
adapter's slow path, which must still give its vectors bit for bit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.wire.embeddings import (
    read_embedding_request,
    read_embedding_response,
    write_embedding_request,
)
from tests.mocks.llmock import LLMock, running_llmock

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LLMock]:
    with running_llmock(tmp_path_factory.mktemp("llmock-embed")) as m:
        yield m


def test_the_adapter_reads_llmocks_float_answer_exactly(mock: LLMock) -> None:
    adapter = OpenAIAdapter(
        OpenAIConfig(name="o", url=mock.openai_url, protocol="openai", api_key="sk-up")
    )
    texts = ["the first text", "another one", "x"]
    body = write_embedding_request("text-embedding-3-small", texts=texts, request_id="r-1")
    out = adapter.prepare_embeddings(Inbound(body, lambda: read_embedding_request(body), "r-1", ""))
    r = httpx.post(out.url, content=out.body, headers=out.headers)
    assert r.status_code == 200, r.text
    sent: dict[str, Any] = mock.requests()[-1]["body"]
    assert sent == {
        "model": "text-embedding-3-small",
        "input": texts,
        "encoding_format": "base64",
    }
    e = read_embedding_response(adapter.embeddings_answer(r.content, "r-1", "m"))
    direct = httpx.post(
        f"{mock.openai_url}/embeddings", json={"model": "text-embedding-3-small", "input": texts}
    ).json()
    expected = np.array([d["embedding"] for d in direct["data"]], dtype="<f4")
    assert (e.request_id, e.model, e.count, e.dimensions) == (
        "r-1",
        "text-embedding-3-small",
        3,
        expected.shape[1],
    )
    assert e.prompt_tokens == direct["usage"]["prompt_tokens"] > 0
    assert bytes(e.values) == expected.tobytes()
