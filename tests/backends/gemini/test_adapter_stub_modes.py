"""The gemini and vertex stubs' canned and cadence modes (every endpoint
its own prebuilt answer) and their faults mid-stream, read by google-genai
and the anthropic SDK's AnthropicVertex."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from google import genai
from google.genai import errors, types

from flatgate.proxy.backends.registry import PROTOCOLS
from flatgate.proxy.stub.cadence import TOKEN, prebuilt
from tests.servers import Server, running
from tests.stub.helpers import stub

pytestmark = pytest.mark.integration

_OPEN: list[Any] = []


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _gemini(server: Server) -> genai.Client:
    made = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=server.url))
    _OPEN.append(made)
    return made


def _vertex(server: Server) -> anthropic.AnthropicVertex:
    made = anthropic.AnthropicVertex(base_url=f"{server.url}/v1", region="us-east5",
                                     project_id="p", access_token="t", max_retries=0)  # fmt: skip
    _OPEN.append(made)
    return made


def test_canned_answers_every_endpoint(tmp_path_factory: pytest.TempPathFactory) -> None:
    with stub("gemini", tmp_path_factory.mktemp("gemini-canned"), "--canned", "3") as s:
        client = _gemini(s)
        whole = client.models.generate_content(model="gemini-2.5-flash", contents="ignored")
        assert whole.text == "tok tok tok "
        streamed = [c.text for c in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents="ignored")]  # fmt: skip
        assert "".join(t or "" for t in streamed) == "tok tok tok "
        embedded = client.models.embed_content(
            model="gemini-embedding-001",
            contents="a parrot",
            config=types.EmbedContentConfig(output_dimensionality=4),
        )
        assert embedded.embeddings and len(embedded.embeddings[0].values or []) == 4
    with stub("vertex", tmp_path_factory.mktemp("vertex-canned"), "--canned", "3") as s:
        message = _vertex(s).messages.create(
            model="claude-sonnet-4-5@20250929", max_tokens=8,
            messages=[{"role": "user", "content": "ignored"}],
        )  # fmt: skip
        assert message.content[0].text == "tok tok tok "  # type: ignore[union-attr]


def test_cadence_paces_each_streaming_endpoint(tmp_path_factory: pytest.TempPathFactory) -> None:
    env = {"FLATGATE_STUB_CADENCE": "true", "FLATGATE_STUB_CADENCE_TOKENS": "4"}
    with running("stub", ["--protocol", "gemini"], tmp_path_factory.mktemp("g"), env=env) as s:
        client = _gemini(s)
        texts = [c.text for c in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents="ignored")]  # fmt: skip
        assert "".join(t or "" for t in texts) == TOKEN * 4
        whole = client.models.generate_content(model="gemini-2.5-flash", contents="ignored")
        assert whole.text == TOKEN * 4
        cadence = httpx.get(f"{s.url}/stats", timeout=5).json()["cadence"]
        assert "/{version}/models/{model}:streamGenerateContent" in cadence
    with running("stub", ["--protocol", "vertex"], tmp_path_factory.mktemp("v"), env=env) as s:
        with _vertex(s).messages.stream(
            model="claude-sonnet-4-5@20250929",
            max_tokens=8,
            messages=[{"role": "user", "content": "ignored"}],
        ) as events:
            final = events.get_final_message()  # fmt: skip
        assert final.content[0].text == TOKEN * 4  # type: ignore[union-attr]


def test_prebuilt_frames_of_each_streaming_endpoint() -> None:
    for name in ("gemini", "vertex"):
        for endpoint in PROTOCOLS[name].stub().endpoints:  # type: ignore[attr-defined]
            if endpoint.always_streams:
                p = prebuilt(endpoint, 3, lambda header: None)
                assert p.content_type == "text/event-stream"
                assert p.delta and p.final


def test_a_stream_s_error_fault_is_google_s_error_event(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with stub("gemini", tmp_path_factory.mktemp("gemini-faults")) as s:
        client = _gemini(s)
        with pytest.raises(errors.APIError) as failed:
            list(client.models.generate_content_stream(
                model="gemini-2.5-flash@error:1", contents="one two three"))  # fmt: skip
    assert "INTERNAL" in str(failed.value) or failed.value.code == 500
