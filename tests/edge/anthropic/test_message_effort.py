"""A system message's ``output_config`` (Anthropic's per-message effort;
Claude Code 2.1.332 sends one with its default model): mapped onto the
request's own ``output_config``, the effort in force for the answer, by
where the message stands (``apis.anthropic_messages.effort``); an effort-only
system message is no message; an ``output_config`` where Anthropic takes
none is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.backends.anthropic.adapter import encode_request as anthropic_request
from flatgate.proxy.backends.openai.adapter import encode_request as openai_request
from flatgate.proxy.backends.responses.adapter import encode_request as responses_request
from flatgate.proxy.wire.request.decode import Request, read_request

FIXTURES = Path(__file__).parents[2] / "clients" / "fixtures"
BETA = {"anthropic-beta": "mid-conversation-output-config-2026-07-01"}
USER = {"role": "user", "content": "plan it"}
SAID = {"role": "assistant", "content": "1. export 2. import"}
CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}],
}
RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
}


def effort(level: str, text: str = "") -> dict[str, Any]:
    """A system message setting ``level`` (content ``text``: none by default)."""
    content: Any = [{"type": "text", "text": text}] if text else []
    return {"role": "system", "content": content, "output_config": {"effort": level}}


def edge(messages: list[dict[str, Any]], **fields: Any) -> Request:
    body = {"model": "m", "max_tokens": 16, "messages": messages, **fields}
    req = decode_messages(msgspec.json.encode(body))
    return read_request(write_messages(req, provider=1, model_name="m", headers=BETA))


def in_force(req: Request) -> Any:
    extras = json.loads(req.extras) if req.extras else {}
    return extras.get("output_config")


def test_claude_codes_first_request_is_read_and_its_effort_carried() -> None:
    body = (FIXTURES / "claude_request_default.json").read_bytes()
    captured = json.loads(body)
    [(i, message)] = [(i, m) for i, m in enumerate(captured["messages"]) if "output_config" in m]
    assert (i, message["role"], message["output_config"]) == (1, "system", {"effort": "medium"})
    headers = {"anthropic-beta": "per-turn-control-2026-07-01"}
    req = read_request(
        write_messages(decode_messages(body), provider=1, model_name="m", headers=headers)
    )
    assert in_force(req) == {"effort": "medium"}
    # The system message's text is still there, at its position.
    assert [m.role for m in req.messages][-2:] == ["user", "system"]
    omitted: list[str] = []
    sent = json.loads(openai_request(req, model="m", omitted=omitted))
    assert sent["reasoning_effort"] == "medium"
    assert not [name for name in omitted if "output_config" in name]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        # Between an assistant turn and the next user turn: from that turn on.
        ([USER, SAID, effort("low"), USER], {"effort": "low"}),
        # Right after a user turn with new input: the answer to it.
        ([USER, effort("low")], {"effort": "low"}),
        ([USER, effort("low", "be brief"), SAID, USER], {"effort": "low"}),
        # The last one in force wins.
        ([USER, effort("low"), SAID, effort("max"), USER], {"effort": "max"}),
        # After the answer to the last new input (its tool's result is no new
        # input): from a later turn, not this answer.
        ([USER, CALL, RESULT, effort("low")], {"effort": "high"}),
        ([USER, effort("low"), CALL, RESULT, effort("max")], {"effort": "low"}),
        # A null effort sets nothing.
        ([USER, {**effort("low"), "output_config": {"effort": None}}], {"effort": "high"}),
    ],
)
def test_the_effort_in_force_is_the_requests_own(
    messages: list[dict[str, Any]], expected: dict[str, str]
) -> None:
    req = edge(messages, output_config={"effort": "high", "format": None})
    assert in_force(req) == {"format": None, **expected}


def test_without_a_top_level_one_the_messages_effort_is_the_requests() -> None:
    req = edge([USER, SAID, effort("low"), USER])
    assert in_force(req) == {"effort": "low"}
    # An effort-only system message is no message: nothing for it to say.
    assert [m.role for m in req.messages] == ["user", "assistant", "user"]
    assert json.loads(openai_request(req, model="m"))["reasoning_effort"] == "low"
    assert json.loads(responses_request(req, model="m"))["reasoning"] == {"effort": "low"}
    assert json.loads(anthropic_request(req, model="claude"))["output_config"] == {"effort": "low"}
    assert in_force(edge([USER, CALL, RESULT, effort("low")])) is None


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{**USER, "output_config": {"effort": "low"}}], "messages.0.output_config"),
        ([USER, {**SAID, "output_config": {}}], "messages.1.output_config"),
        (
            [USER, {**effort("low"), "output_config": {"format": {}}}],
            "messages.1.output_config.format",
        ),
        ([USER, {**effort("low"), "output_config": "low"}], "messages.1.output_config"),
    ],
)
def test_an_output_config_anthropic_takes_nowhere_is_refused(
    messages: list[dict[str, Any]], param: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        edge(messages)
    assert info.value.param == param
