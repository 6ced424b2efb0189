"""Vercel's AI SDK streaming a tool call through the gateway: ``streamText``
with one tool the model must call (the first step of its agent loop), from
each of its providers to the stub in each backend protocol
(``aisdk_run.mjs``'s ``tool`` runs; the AI SDK's pinned environment as
``test_aisdk_media.py`` says).

Its ``anthropic()`` provider puts ``eager_input_streaming: true`` on every
tool whenever it streams: an Anthropic backend is sent it on that tool, and
an OpenAI-compatible one (``openai``, ``openai-responses``), whose servers
stream tool arguments as they come anyway, is not, and the answer names it
(``x-flatgate-dropped-fields: tools.eager_input_streaming``) instead of
refusing the request.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.clients.conftest import DROPPING, PROTOCOLS, ROOT, ClientStack, model

pytestmark = pytest.mark.integration

MODULES = ROOT / ".venv" / "clients" / "aisdk"
SCRIPT = ROOT / "tests" / "clients" / "aisdk_run.mjs"
KEY = "sk-flatgate-acme"
PROMPT = "look up flatgate"
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
        "files": [],
        "runs": [
            {"id": run_id(v, p), "provider": v, "model": model(p), "tool": True}
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
def test_the_ai_sdk_streams_a_tool_call_through_any_backend(
    report: dict[str, Any], provider: str, protocol: str
) -> None:
    run = report[run_id(provider, protocol)]
    assert "error" not in run, run["error"]
    # The stub calls the tool the request names, its arguments the prompt.
    assert run["tool_calls"] == [{"name": "lookup", "input": {"input": PROMPT}}]
    [sent] = run["sent"]
    assert sent["body"]["stream"] is True
    if provider != "anthropic":
        return
    [tool] = sent["body"]["tools"]
    assert tool["eager_input_streaming"] is True
    if protocol in DROPPING:
        assert sent["dropped"] == "tools.eager_input_streaming"
    else:
        assert sent["dropped"] is None
