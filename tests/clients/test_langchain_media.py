"""LangChain's chat models with image content blocks through the gateway to
the stub in each backend protocol: ``ChatOpenAI`` (Chat Completions and,
with ``use_responses_api``, the Responses API) and ``ChatAnthropic``
(Messages), each with LangChain's standard ``image`` and ``file`` (PDF)
blocks, and ``ChatOpenAI`` with the OpenAI ``image_url`` block its docs show.

LangChain lives in its own pinned environment (``.venv/langchain``, from
``tests/clients/requirements-langchain.txt``; ``make test`` installs it) and
runs ``langchain_media_run.py`` there, one process for every run. The stub
echoes the last user message with each part described, so an answer holding
the file's digest proves its bytes arrived intact.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.clients.conftest import PROTOCOLS, ROOT, ClientStack, model
from tests.clients.media import b64, bytes_echo, image_echo, pdf, png

pytestmark = pytest.mark.integration

PYTHON = ROOT / ".venv" / "langchain" / "bin" / "python"
SCRIPT = ROOT / "tests" / "clients" / "langchain_media_run.py"
KEY = "sk-flatgate-acme"
PROMPT = "what do these show"
PNG = png()
PDF = pdf()
# (chat model, blocks) as langchain_media_run.py names them.
RUNS = [
    ("openai", "standard"),
    ("openai", "openai"),
    ("openai-responses", "standard"),
    ("anthropic", "standard"),
]


def run_id(chat: str, blocks: str, protocol: str) -> str:
    return f"{chat}-{blocks}-to-{protocol}"


@pytest.fixture(scope="module")
def report(stack: ClientStack) -> dict[str, Any]:
    if not PYTHON.exists():
        raise RuntimeError(f"{PYTHON} is missing: `make test` installs it")
    spec = {
        "base_url": stack.url,
        "api_key": KEY,
        "prompt": PROMPT,
        "image": b64(PNG),
        "pdf": b64(PDF),
        "runs": [
            {"id": run_id(c, b, p), "chat": c, "blocks": b, "model": model(p)}
            for c, b in RUNS
            for p in PROTOCOLS
        ],
    }
    done = subprocess.run(
        [str(PYTHON), str(SCRIPT), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "LANGSMITH_TRACING": "false"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return out


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("chat", "blocks"), RUNS, ids=[f"{c}-{b}" for c, b in RUNS])
def test_langchains_image_blocks_reach_the_backend_intact(
    report: dict[str, Any], chat: str, blocks: str, protocol: str
) -> None:
    run = report[run_id(chat, blocks, protocol)]
    assert "error" not in run, run["error"]
    text = run["text"]
    assert text.startswith(PROMPT), text
    assert image_echo(PNG) in text, text
    if blocks == "standard":
        document = bytes_echo(PDF, "application/pdf")
        assert document in text, text
        assert text.index(image_echo(PNG)) < text.index(document), text
