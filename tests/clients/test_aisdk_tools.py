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

from typing import Any

import pytest

from tests.clients import aisdk
from tests.clients.aisdk import PROVIDERS, run_id
from tests.clients.conftest import DROPPING, PROTOCOLS, ClientStack, model

pytestmark = pytest.mark.integration

PROMPT = "look up flatgate"


@pytest.fixture(scope="module")
def report(stack: ClientStack) -> dict[str, Any]:
    """Every provider to every protocol, in one node process."""
    return aisdk.run(
        stack.base_url,
        PROMPT,
        [],
        [
            {"id": run_id(v, p), "provider": v, "model": model(p), "tool": True}
            for v in PROVIDERS
            for p in PROTOCOLS
        ],
    )


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
