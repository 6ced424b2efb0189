"""The ``anthropic`` SDK's tool runner (its beta messages ``tool_runner``)
with its defaults and a ``@beta_tool`` function, through the gateway to the
stub in each backend protocol, whole and streamed, to its final message.

The runner threads its conversation by default: its first request carries
``thread: {"type": "create"}`` and the ``message-threads-2026-08-12`` beta,
and a server that holds the thread is sent only the new messages after that.
flatgate holds no thread: it refuses ``thread`` with Anthropic's documented
``error.details.error_code = "thread_unsupported_request"``, and the SDK then
sends the same turn again without it, and the whole history on every later
turn. A ``thread`` taken and ignored would leave the second turn with the
tool's result and nothing before it.

The stub calls a tool only when ``tool_choice`` forces it, so the first turn
forces ``lookup``; once the call has come back the runner is told to let the
model choose (``set_messages_params``, as its docs show), and the stub
answers with the echo of the user's message: the final message.
"""

from __future__ import annotations

import uuid
from typing import Any

import anthropic
import pytest
from anthropic import beta_tool
from anthropic.types.beta import BetaMessage, BetaToolChoiceToolParam

from tests.clients.conftest import PROTOCOLS, ClientStack, model

pytestmark = pytest.mark.integration

KEY = "sk-flatgate-acme"
PROMPT = "what the runner asks the tool about"
# The tool's answer: its words are counted in the next turn's input tokens.
FOUND = "three words found"
FORCE: BetaToolChoiceToolParam = {"type": "tool", "name": "lookup"}


def run(stack: ClientStack, name: str, streamed: bool) -> dict[str, Any]:
    """The runner's run: the messages it yielded, the tool's calls, the
    stream events' types (streamed) and the request id its requests carried."""
    rid = f"tool-runner-{uuid.uuid4().hex}"
    with anthropic.Anthropic(
        base_url=stack.url, api_key=KEY, max_retries=0, default_headers={"x-request-id": rid}
    ) as client:
        return {"rid": rid, **run_with(client, name, streamed)}


def run_with(client: anthropic.Anthropic, name: str, streamed: bool) -> dict[str, Any]:
    """The run itself: the first turn forces the tool, the next ones do not."""
    asked: list[str] = []

    @beta_tool
    def lookup(input: str) -> str:
        """Look the text up.

        Args:
            input: The text to look up.
        """
        asked.append(input)
        return FOUND

    runner = client.beta.messages.tool_runner(
        model=name,
        max_tokens=256,
        tools=[lookup],
        tool_choice=FORCE,
        messages=[{"role": "user", "content": PROMPT}],
        stream=streamed,
    )
    messages: list[BetaMessage] = []
    events: list[str] = []
    for item in runner:
        if isinstance(item, BetaMessage):
            message = item
        else:
            events += [e.type for e in item]
            message = item.get_final_message()
        messages.append(message)
        if len(messages) == 1:
            runner.set_messages_params(lambda p: {**p, "tool_choice": {"type": "auto"}})
    final = runner.until_done()
    return {
        "messages": messages,
        "final": final,
        "asked": asked,
        "events": events,
    }


@pytest.mark.parametrize("mode", ["whole", "streamed"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_tool_runner_calls_its_tool_and_reaches_its_final_message(
    stack: ClientStack, protocol: str, mode: str
) -> None:
    name = model(protocol)
    ran = run(stack, name, mode == "streamed")
    first, second = ran["messages"]
    # The forced call carried the user's message; the tool ran once.
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("lookup", {"input": PROMPT})
    assert ran["asked"] == [PROMPT]
    # The model was sent the whole history back, the tool's result included.
    final = ran["final"]
    assert final is second or final.id == second.id
    assert final.stop_reason == "end_turn"
    assert [b.text for b in final.content if b.type == "text"] == [PROMPT]
    assert final.usage.output_tokens == len(PROMPT.split())
    assert final.usage.input_tokens == first.usage.input_tokens + len(FOUND.split())
    assert first.id != final.id and final.model == name
    if mode == "streamed":
        assert ran["events"].count("message_start") == 2
        assert ran["events"].count("message_stop") == 2
        # The call's arguments and the answer's text came as deltas.
        assert {"input_json", "text"} <= set(ran["events"])
    # The thread was refused once (with the error code the SDK falls back on),
    # then every turn was answered: the refusal, the first turn sent again
    # without it, the second turn with the whole history.
    rid = ran["rid"]
    entries = stack.access(lambda e: bool(e["request_id"] == rid), 3)
    assert [(e["path"], e["status"]) for e in entries] == [
        ("/v1/messages", 400),
        ("/v1/messages", 200),
        ("/v1/messages", 200),
    ]
    assert {e["tenant"] for e in entries} == {"acme"}
