"""One run of the OpenAI Agents SDK's default model against a gateway, for
``test_agents_sdk``: run by ``.venv/agents/bin/python`` (the SDK's own pinned
environment, ``tests/clients/requirements-agents.txt``), never imported by the
tests, which read the JSON report it prints on stdout.

The agent has one function tool, ``lookup(input)``, and is told to call it
first (``tool_choice``): the stub answers a forced tool with a call whose
arguments are ``{"input": <the last user message>}``, the SDK runs the tool
and calls the model again without forcing it (``reset_tool_choice``), and the
stub then echoes the user's message: that is the final output.

Usage: ``agents_run.py BASE_URL API_KEY REQUEST_ID MODEL PROMPT``: the run
whole (``Runner.run``), then streamed (``Runner.run_streamed``), each request
of one sent with ``x-request-id: REQUEST_ID-whole`` (or ``-streamed``); the
report holds both, by those names (one process: the SDK takes seconds to
import).
"""

# The SDK lives in its own environment, not in the one mypy reads:
# mypy: disable-error-code="import-not-found,untyped-decorator"

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI


async def run(
    base_url: str, api_key: str, request_id: str, model: str, prompt: str, *, stream: bool
) -> dict[str, Any]:
    looked_up: list[str] = []

    # The argument's name is the stub's: it calls a forced tool with {"input": ...}.
    @function_tool
    def lookup(input: str) -> str:
        """Look the text up."""
        looked_up.append(input)
        return f"found {len(input.split())} words"

    client = AsyncOpenAI(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        default_headers={"x-request-id": request_id},
    )
    set_default_openai_client(client)
    set_tracing_disabled(True)
    agent = Agent(
        name="echo",
        instructions="Look the text up, then answer.",
        tools=[lookup],
        model=model,
        model_settings=ModelSettings(tool_choice="lookup"),
    )
    events: list[str] = []
    if stream:
        streamed = Runner.run_streamed(agent, prompt)
        async for event in streamed.stream_events():
            if event.type == "raw_response_event":
                events.append(str(event.data.type))
        result: Any = streamed
    else:
        result = await Runner.run(agent, prompt)
    await client.close()
    return {
        "request_id": request_id,
        "model_class": type(OpenAIProvider().get_model(model)).__name__,
        "final_output": result.final_output,
        "looked_up": looked_up,
        "items": [item.type for item in result.new_items],
        "response_ids": [r.response_id for r in result.raw_responses],
        "output_tokens": [r.usage.output_tokens for r in result.raw_responses],
        "events": events,
    }


async def both(base_url: str, api_key: str, request_id: str, model: str, prompt: str) -> Any:
    return {
        mode: await run(base_url, api_key, f"{request_id}-{mode}", model, prompt, stream=stream)
        for mode, stream in (("whole", False), ("streamed", True))
    }


def main(argv: list[str]) -> None:
    base_url, api_key, request_id, model, prompt = argv
    print(json.dumps(asyncio.run(both(base_url, api_key, request_id, model, prompt))))


if __name__ == "__main__":
    main(sys.argv[1:])
