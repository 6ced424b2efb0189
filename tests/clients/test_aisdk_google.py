"""Vercel's AI SDK through the gateway's Gemini API: its Google provider
(``@ai-sdk/google``, ``createGoogleGenerativeAI`` with ``baseURL`` the
gateway's ``/v1beta``, as Google's own is) to the stub in each backend
protocol (``every_backend``): ``generateText`` with a PNG as a ``file`` part
(the provider's ``inlineData``), and ``streamText`` with one tool the model
must call (``toolConfig`` mode ``ANY`` naming it: the first step of its
agent loop, streamed as ``streamGenerateContent?alt=sse``); and its
embedding model: ``embedMany`` of one text (``embedContent``) and of two
(``batchEmbedContents``), to each protocol whose backend serves embeddings,
and the refusal of an Anthropic or Vertex one. The AI SDK runs
in its pinned environment (``aisdk_run.mjs``, ``tests/clients/aisdk.py``),
one node process for every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.clients import aisdk
from tests.clients.aisdk import run_id
from tests.clients.every_backend import PROTOCOLS, every_backend, model
from tests.clients.media import b64, image_echo, png
from tests.servers import Server

pytestmark = pytest.mark.integration

PROMPT = "flatgate reaches the AI SDK's Google provider"
PNG = png()
# The backends that refuse embeddings: an anthropic and a vertex one serve none.
NO_EMBEDDINGS = ("anthropic", "vertex")
# The backends that serve embeddings: not those, nor the bedrock one, whose
# model (Nova, through Converse) is no embeddings model (Titan's and Cohere's
# are, test_bedrock's).
EMBEDDING = tuple(p for p in PROTOCOLS if p not in (*NO_EMBEDDINGS, "bedrock"))
# embedMany's inputs by run kind: one text goes as embedContent, more as
# batchEmbedContents.
EMBED = {"embed-one": [PROMPT], "embed-many": [PROMPT, "flatgate embeds a second text"]}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with every_backend(tmp_path_factory.mktemp("aisdk-google")) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def report(gateway: Server) -> dict[str, Any]:
    """Each kind of run to every protocol, in one node process."""
    return aisdk.run(
        f"{gateway.url}/v1beta",
        PROMPT,
        [{"data": b64(PNG), "media_type": "image/png", "filename": "shot.png"}],
        [
            {"id": run_id(kind, p), "provider": "google", "model": model(p), "tool": kind == "tool"}
            for kind in ("text", "tool")
            for p in PROTOCOLS
        ]
        + [
            {"id": run_id(kind, p), "provider": "google", "model": model(p), "embed": texts}
            for kind, texts in EMBED.items()
            for p in PROTOCOLS
        ],
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_google_provider_sends_an_image_through_any_backend(
    report: dict[str, Any], gateway: Server, protocol: str
) -> None:
    run = report[run_id("text", protocol)]
    assert "error" not in run, run["error"]
    assert run["text"] == f"{PROMPT} {image_echo(PNG)}"
    # One request, Gemini's, the image as inline data.
    [sent] = run["sent"]
    assert sent["url"] == f"{gateway.url}/v1beta/models/{model(protocol)}:generateContent"
    [turn] = sent["body"]["contents"]
    assert [sorted(part) for part in turn["parts"]] == [["text"], ["inlineData"]]
    assert turn["parts"][1]["inlineData"]["mimeType"] == "image/png"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_google_provider_streams_a_tool_call_through_any_backend(
    report: dict[str, Any], gateway: Server, protocol: str
) -> None:
    run = report[run_id("tool", protocol)]
    assert "error" not in run, run["error"]
    # The stub calls the tool the request names, its arguments the prompt.
    assert run["tool_calls"] == [{"name": "lookup", "input": {"input": PROMPT}}]
    [sent] = run["sent"]
    assert sent["url"] == (
        f"{gateway.url}/v1beta/models/{model(protocol)}:streamGenerateContent?alt=sse"
    )
    config = sent["body"]["toolConfig"]["functionCallingConfig"]
    assert config == {"mode": "ANY", "allowedFunctionNames": ["lookup"]}


@pytest.mark.parametrize("protocol", EMBEDDING)
def test_the_google_provider_embeds_through_any_backend(
    report: dict[str, Any], gateway: Server, protocol: str
) -> None:
    one, many = report[run_id("embed-one", protocol)], report[run_id("embed-many", protocol)]
    assert "error" not in one and "error" not in many, (one.get("error"), many.get("error"))
    [sent] = one["sent"]
    assert sent["url"] == f"{gateway.url}/v1beta/models/{model(protocol)}:embedContent"
    [sent] = many["sent"]
    assert sent["url"] == f"{gateway.url}/v1beta/models/{model(protocol)}:batchEmbedContents"
    [alone] = one["embeddings"]
    first, second = many["embeddings"]
    assert len(alone) == len(first) == len(second) > 0
    # The same text, the same vector, alone or in a batch; another text, another.
    assert first == pytest.approx(alone)
    assert second != first


@pytest.mark.parametrize("protocol", NO_EMBEDDINGS)
def test_a_backend_without_embeddings_refuses_the_google_provider(
    report: dict[str, Any], protocol: str
) -> None:
    error = report[run_id("embed-one", protocol)]["error"]
    assert error["status"] == 400
    assert "serves embeddings" in error["message"], error
