"""Vercel's AI SDK with ``file`` parts (a PNG and a PDF) through the gateway
to the stub in each backend protocol: ``generateText`` with its OpenAI
provider (the Responses API, its default, and Chat Completions), its
OpenAI-compatible provider (Chat Completions) and its Anthropic provider
(Messages), each provider to each backend protocol.

The AI SDK lives in its own pinned environment (``.venv/clients/aisdk``,
from ``tests/clients/aisdk/package-lock.json``; ``make test`` installs it)
and runs ``aisdk_run.mjs`` under node as one subprocess for every run; the
test reads the JSON report it prints. Files are sent as bytes (a ``file``
part with ``data``), never as URLs: the AI SDK downloads a URL a provider
does not take, and the tests have no network.

The stub echoes the last user message with each part described, so the
answer holds each file's digest: the bytes the SDK encoded (a data URL, an
``input_image``/``input_file``, an Anthropic ``image``/``document`` block)
arrived at the backend intact.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.clients import aisdk
from tests.clients.aisdk import PROVIDERS, run_id
from tests.clients.conftest import PROTOCOLS, ClientStack, model
from tests.clients.media import b64, bytes_echo, image_echo, pdf, png

pytestmark = pytest.mark.integration

PROMPT = "describe these files"
PNG = png()
PDF = pdf()


@pytest.fixture(scope="module")
def report(stack: ClientStack) -> dict[str, Any]:
    """Every provider to every protocol, in one node process."""
    return aisdk.run(
        stack.base_url,
        PROMPT,
        [
            {"data": b64(PNG), "media_type": "image/png", "filename": "shot.png"},
            {"data": b64(PDF), "media_type": "application/pdf", "filename": "paper.pdf"},
        ],
        [
            {"id": run_id(v, p), "provider": v, "model": model(p)}
            for v in PROVIDERS
            for p in PROTOCOLS
        ],
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_ai_sdks_file_parts_reach_the_backend_intact(
    report: dict[str, Any], provider: str, protocol: str
) -> None:
    run = report[run_id(provider, protocol)]
    assert "error" not in run, run["error"]
    text = run["text"]
    assert text.startswith(PROMPT), text
    image, document = image_echo(PNG), bytes_echo(PDF, "application/pdf")
    assert image in text and document in text, text
    assert text.index(image) < text.index(document), text
    # One request, through the API the provider speaks.
    [sent] = run["sent"]
    path = "/messages" if provider == "anthropic" else "/chat/completions"
    assert sent["url"].endswith("/responses" if provider == "openai" else path), sent["url"]
