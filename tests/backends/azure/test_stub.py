"""The stub's openai wires speak Azure OpenAI's paths and take its
``api-key`` header: pure (``azure.openai_path``, ``OpenAIWire.authorize``),
and the openai SDK's own ``AzureOpenAI`` client answered by a running stub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from flatgate.proxy.backends.azure import openai_path
from flatgate.proxy.backends.dialect import HeaderFn
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.backends.responses.stub import ResponsesWire
from tests.servers import Server
from tests.stub.helpers import stub

KEY = "azure-stub-key"
VERSION = "2024-10-21"


@pytest.mark.parametrize(
    ("azure", "own"),
    [
        ("/openai/v1/chat/completions", "/v1/chat/completions"),
        ("/openai/v1/responses", "/v1/responses"),
        ("/openai/v1/responses/compact", "/v1/responses/compact"),
        ("/openai/v1/embeddings", "/v1/embeddings"),
        ("/openai/v1/models", "/v1/models"),
        ("/openai/deployments/gpt-4o/chat/completions", "/v1/chat/completions"),
        ("/openai/deployments/emb/embeddings", "/v1/embeddings"),
        ("/openai/responses", "/v1/responses"),
        ("/openai/models", "/v1/models"),
        # Not Azure's, or not a whole deployment path: as they are.
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/openai/deployments/gpt-4o", "/openai/deployments/gpt-4o"),
        ("/openai/deployments//chat/completions", "/openai/deployments//chat/completions"),
        ("/healthz", "/healthz"),
    ],
)
def test_azures_paths_are_the_apis_own(azure: str, own: str) -> None:
    assert openai_path(azure) == own
    assert OpenAIWire().own_path(azure) == ResponsesWire().own_path(azure) == own


def headers(**given: str) -> HeaderFn:
    return lambda name: given.get(name.replace("-", "_"))


def test_the_api_key_header_is_a_key() -> None:
    wire = OpenAIWire()
    assert wire.authorize(headers(api_key=KEY), KEY) is None
    assert wire.authorize(headers(authorization=f"Bearer {KEY}"), KEY) is None
    denied = wire.authorize(headers(api_key="wrong"), KEY)
    assert denied is not None
    assert denied.status == 401
    assert b"Access denied due to invalid subscription key" in denied.body


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("openai", Path(tmp_path_factory.mktemp("azure-stub")), "--api-key", KEY) as s:
        yield s


@pytest.fixture(scope="module")
def responses(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub(
        "openai-responses", Path(tmp_path_factory.mktemp("azure-resp")), "--api-key", KEY
    ) as s:
        yield s


def azure_client(server: Server, key: str = KEY) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(
        azure_endpoint=server.url, api_version=VERSION, api_key=key, max_retries=0
    )


def test_azureopenai_is_answered_by_the_stub(chat: Server) -> None:
    with azure_client(chat) as client:
        answer = client.chat.completions.create(
            model="gpt-4o-deployment", messages=[{"role": "user", "content": "hello azure"}]
        )
        assert answer.choices[0].message.content == "hello azure"
        streamed = client.chat.completions.create(
            model="gpt-4o-deployment",
            messages=[{"role": "user", "content": "hello azure"}],
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == (
            "hello azure"
        )
        made = client.embeddings.create(model="emb-deployment", input=["a"])
        assert len(made.data) == 1
        assert [m.id for m in client.models.list()]


def test_azureopenai_responses_are_answered_by_the_stub(responses: Server) -> None:
    with azure_client(responses) as client:
        assert client.responses.create(model="dep", input="hello azure").output_text == (
            "hello azure"
        )


def test_a_wrong_api_key_is_azures_401(chat: Server) -> None:
    with azure_client(chat, "wrong") as client, pytest.raises(openai.AuthenticationError) as e:
        client.chat.completions.create(model="dep", messages=[{"role": "user", "content": "hello"}])
    assert "Access denied due to invalid subscription key" in str(e.value)
