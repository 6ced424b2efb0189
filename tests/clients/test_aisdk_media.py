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

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.clients.conftest import PROTOCOLS, ROOT, ClientStack, model
from tests.clients.media import b64, bytes_echo, image_echo, pdf, png

pytestmark = pytest.mark.integration

MODULES = ROOT / ".venv" / "clients" / "aisdk"
SCRIPT = ROOT / "tests" / "clients" / "aisdk_run.mjs"
KEY = "sk-flatgate-acme"
PROMPT = "describe these files"
PNG = png()
PDF = pdf()
# The AI SDK's providers, each with the API it speaks (aisdk_run.mjs).
PROVIDERS = ("openai", "openai-chat", "openai-compatible", "anthropic")


def run_id(provider: str, protocol: str) -> str:
    return f"{provider}-to-{protocol}"


@pytest.fixture(scope="module")
def report(stack: ClientStack) -> dict[str, Any]:
    """Every provider to every protocol, in one node process."""
    node = shutil.which("node")
    if node is None or not (MODULES / "node_modules" / "ai").exists():
        raise RuntimeError(f"node or {MODULES} is missing: `make test` installs it")
    spec = {
        "modules": str(MODULES),
        "base_url": stack.base_url,
        "api_key": KEY,
        "prompt": PROMPT,
        "files": [
            {"data": b64(PNG), "media_type": "image/png", "filename": "shot.png"},
            {"data": b64(PDF), "media_type": "application/pdf", "filename": "paper.pdf"},
        ],
        "runs": [
            {"id": run_id(v, p), "provider": v, "model": model(p)}
            for v in PROVIDERS
            for p in PROTOCOLS
        ],
    }
    done = subprocess.run(
        [node, str(SCRIPT), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "127.0.0.1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return out


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
