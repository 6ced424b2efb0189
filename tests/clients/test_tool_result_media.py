"""Images inside tool results, from the official SDKs, to each backend
protocol: the anthropic SDK's ``tool_result`` whose content is a text and an
``image`` block, and the openai SDK's Responses ``function_call_output``
whose output is an ``input_text`` and an ``input_image``.

The stub echoes the last user message, and a tool result is not one (each
backend protocol places a tool result's image its own way: in the
``tool_result`` block, in the ``function_call_output``, or, where Chat
Completions' tool messages take only text, in a user message after them), so
each stub sits behind a tap (``tests.clients.tap``) and the test reads what
the backend was sent: the image's bytes, intact, in the backend's own shape
(for ``fbs``, the FlatBuffer's part, read with the wire's reader).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.clients.media import b64, data_url, png
from tests.clients.tap import TappedGateway, tapped_gateway

pytestmark = pytest.mark.integration

PROTOCOLS = ("fbs", "openai", "openai-responses", "anthropic")
KEY = "sk-flatgate-acme"
PNG = png(size=(40, 30))
CHART: dict[str, object] = {"type": "object", "properties": {}}
TOOL_USE: Any = {"type": "tool_use", "id": "toolu_1", "name": "chart", "input": {}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TappedGateway]:
    with tapped_gateway(tmp_path_factory.mktemp("tool-media"), PROTOCOLS) as running:
        yield running


def messages_tool_result(gateway: TappedGateway, name: str) -> str:
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0) as client:
        message = client.messages.create(
            model=name,
            max_tokens=256,
            tools=[{"name": "chart", "description": "Draw the chart", "input_schema": CHART}],
            messages=[
                {"role": "user", "content": "draw the chart"},
                {
                    "role": "assistant",
                    "content": [TOOL_USE],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [
                                {"type": "text", "text": "the chart:"},
                                {
                                    "type": "image",
                                    "source": {
                                        "type": "base64",
                                        "media_type": "image/png",
                                        "data": b64(PNG),
                                    },
                                },
                            ],
                        }
                    ],
                },
            ],
        )
    return message.stop_reason or ""


def responses_function_output(gateway: TappedGateway, name: str) -> str:
    items: list[Any] = [
        {"role": "user", "content": "draw the chart"},
        {"type": "function_call", "call_id": "call_1", "name": "chart", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [
                {"type": "input_text", "text": "the chart:"},
                {"type": "input_image", "image_url": data_url(PNG, "image/png")},
            ],
        },
    ]
    tool: Any = {"type": "function", "name": "chart", "parameters": CHART, "strict": False}
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0) as client:
        response = client.responses.create(model=name, input=items, tools=[tool], store=False)
    return response.status or ""


SENDERS = {"messages": messages_tool_result, "responses": responses_function_output}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("api", sorted(SENDERS))
def test_an_image_in_a_tool_result_reaches_the_backend_intact(
    gateway: TappedGateway, api: str, protocol: str
) -> None:
    tap = gateway.taps[protocol]
    before = len(tap.seen)
    assert SENDERS[api](gateway, f"echo-{protocol}")
    assert tap.media()[before:] == [[("image/png", PNG)]]
