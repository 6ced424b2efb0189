"""A Responses request as a ``CompletionRequest`` (``responses.translate``),
read back with the wire's own reader (after its verifier)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.responses.echo import echo_of
from flatgate.edge_translator.responses.render import StreamRenderer
from flatgate.edge_translator.responses.translate import encrypted_of, reasoning_part, write_request
from flatgate.proxy.apis.openai_responses.items import Item
from flatgate.proxy.apis.openai_responses.request import decode_request
from flatgate.proxy.wire.chunk.frames import Chunk
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import ApiDialect, FinishReason, ToolChoiceMode
from tests.edge.responses.common import decoded, parse_sse

RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
CODEX = Path(__file__).parents[2] / "clients" / "fixtures"


def wire(**body: Any) -> Request:
    buf = write_request(
        decoded(**body), provider=2, model_name="served", tenant="t", request_id="r1"
    )
    verify_request(buf)
    return read_request(buf)


def shape(r: Request) -> list[tuple[str, str | None]]:
    return [(m.role, m.content) for m in r.messages]


def test_a_string_input_with_instructions() -> None:
    r = wire(instructions="Be brief.", input="Hello!")
    assert shape(r) == [("system", "Be brief."), ("user", "Hello!")]
    assert (r.model_name, r.tenant, r.request_id, r.provider) == ("served", "t", "r1", 2)
    assert r.extras == "" and r.extras_dialect == 0


def test_roles_and_text_parts() -> None:
    r = wire(
        input=[
            {"role": "system", "content": "s"},
            {"role": "developer", "content": [{"type": "input_text", "text": "d"}]},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "x"},
                    {"type": "refusal", "refusal": "y"},
                ],
            },
            {"role": "user", "content": ""},
        ]
    )
    assert shape(r) == [
        ("system", "s"),
        ("developer", "d"),
        ("user", "ab"),
        ("assistant", "xy"),
        ("user", ""),
    ]


def test_an_assistant_turn_folds_into_one_message() -> None:
    r = wire(
        input=[
            {"role": "user", "content": "weather?"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [
                    {"type": "summary_text", "text": "one"},
                    {"type": "summary_text", "text": "two"},
                ],
                "encrypted_content": "gAAAAB",
            },
            {"type": "message", "role": "assistant", "content": "Let me look."},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"c":"P"}',
            },
            {
                "type": "function_call",
                "call_id": "call_2",
                "name": "find",
                "namespace": "crm",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {
                "type": "function_call_output",
                "call_id": "call_2",
                "output": [{"type": "input_text", "text": "none"}],
            },
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "raw"}],
            },
            {"role": "assistant", "content": "It is sunny."},
            {"role": "assistant", "content": "Anything else?"},
        ]
    )
    user, turn, out1, out2, last = r.messages
    assert user.content == "weather?"
    assert turn.role == "assistant" and turn.content == "Let me look."
    assert [(c.id, c.function.name, c.function.arguments) for c in turn.tool_calls or ()] == [
        ("call_1", "get_weather", '{"c":"P"}'),
        ("call_2", "crm__find", "{}"),
    ]
    assert turn.reasoning == [
        ReasoningPart(text="one\n\ntwo", opaque=b"gAAAAB", dialect=RESPONSES, id="rs_1")
    ]
    assert (out1.role, out1.tool_call_id, out1.content) == ("tool", "call_1", "sunny")
    assert (out2.role, out2.tool_call_id, out2.content) == ("tool", "call_2", "none")
    assert last.content == "It is sunny.\n\nAnything else?"
    assert last.reasoning == [ReasoningPart(text="raw", dialect=RESPONSES)]
    assert last.tool_calls is None


def test_tools_choice_format_and_scalars() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    r = wire(
        tools=[
            {
                "type": "function",
                "name": "f",
                "description": "F.",
                "parameters": schema,
                "strict": True,
            }
        ],
        tool_choice={"type": "function", "name": "f"},
        text={
            "format": {
                "type": "json_schema",
                "name": "out",
                "schema": schema,
                "strict": True,
                "description": "D",
            }
        },
        max_output_tokens=64,
        temperature=0.25,
        top_p=0.5,
        parallel_tool_calls=False,
        metadata={"b": "2", "a": "1"},
        user="end-user",
        stream=True,
    )
    assert r.tools is not None
    (tool,) = r.tools
    assert (tool.function.name, tool.function.description, tool.function.strict) == (
        "f",
        "F.",
        True,
    )
    assert json.loads(bytes(tool.function.parameters or b"")) == schema
    assert (r.tool_choice, r.tool_choice_name) == (ToolChoiceMode.Function, "f")
    assert json.loads(r.response_format) == {
        "type": "json_schema",
        "json_schema": {"name": "out", "description": "D", "schema": schema, "strict": True},
    }
    assert (r.max_tokens, r.temperature, r.top_p) == (64, 0.25, 0.5)
    assert r.parallel_tool_calls is False
    assert r.metadata == {"a": "1", "b": "2"}
    assert r.user == "end-user"
    assert r.stream and r.include_usage  # a Responses answer always reports usage


def test_json_object_format() -> None:
    assert json.loads(wire(text={"format": {"type": "json_object"}}).response_format) == {
        "type": "json_object"
    }
    assert wire(text={"format": {"type": "text"}}).response_format == ""


def test_the_extras_travel_with_their_dialect() -> None:
    r = wire(include=["reasoning.encrypted_content"], store=False, tools=[{"type": "web_search"}])
    assert r.extras_dialect == RESPONSES
    assert json.loads(r.extras) == {
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "tools": [{"type": "web_search"}],
    }


def test_another_dialects_reasoning_round_trips_through_encrypted_content() -> None:
    signed = ReasoningPart(
        text="hmm", opaque=b"sig-\x00\xff", dialect=int(ApiDialect.ANTHROPIC_MESSAGES)
    )
    redacted = ReasoningPart(
        opaque=b"data", dialect=int(ApiDialect.ANTHROPIC_MESSAGES), redacted=True
    )
    for part in (signed, redacted):
        text = encrypted_of(part)
        assert text.startswith("fg1.")
        back = reasoning_part(Item(type="reasoning", encrypted_content=text, summary=[]))
        assert (back.opaque, back.dialect, back.redacted) == (
            part.opaque,
            part.dialect,
            part.redacted,
        )


def test_openai_encrypted_content_travels_as_is() -> None:
    part = ReasoningPart(opaque=b"gAAAA", dialect=RESPONSES, id="rs_9")
    assert encrypted_of(part) == "gAAAA"
    assert encrypted_of(ReasoningPart()) == ""
    bogus = reasoning_part(Item(type="reasoning", encrypted_content="fg1.x.y"))
    assert (bogus.opaque, bogus.dialect) == (b"fg1.x.y", RESPONSES)


@pytest.mark.parametrize("dialect", ["0", "3", "5", "128", "200", "9" * 5000])
def test_a_dialect_flatgate_never_wraps_is_refused_naming_input(dialect: str) -> None:
    # The wire's dialect is a byte: 128 did not fit (a struct.error, a 500).
    with pytest.raises(InvalidRequest) as caught:
        reasoning_part(Item(type="reasoning", encrypted_content=f"fg1.{dialect}.QUFB"))
    assert caught.value.param == "input" and "dialect" in caught.value.message


def test_a_streamed_anthropic_signature_comes_back_to_the_backend() -> None:
    """Rendered to a client that asked for encrypted content, then sent back as
    its next input: the wire holds the Anthropic signature again."""
    req = decoded(include=["reasoning.encrypted_content"])
    r = StreamRenderer(response_id="resp_1", created=1, model="m", echo=echo_of(req))
    sig = base64.b64encode(b"signature").decode().encode()
    part = ReasoningPart(opaque=sig, dialect=int(ApiDialect.ANTHROPIC_MESSAGES))
    raw = r.feed(Chunk(reasoning="think")) + r.feed(Chunk(reasoning_part=part))
    raw += r.feed(Chunk(content="ok", finish_reason=FinishReason.STOP))
    done = [d for n, d in parse_sse(raw) if n == "response.output_item.done"]
    item = done[0]["item"]
    turn = wire(input=[{"role": "user", "content": "q"}, item, done[1]["item"]]).messages[1]
    assert turn.reasoning == [
        ReasoningPart(text="think", opaque=sig, dialect=part.dialect, id=item["id"])
    ]
    assert turn.content == "ok"


@pytest.mark.parametrize("name", ["codex_request.json", "codex_request_gpt-5.5.json"])
def test_a_captured_codex_request(name: str) -> None:
    """Codex's own requests (``tests/clients/fixtures``): every function on the
    wire (namespaces flattened), every hosted tool and Codex's other fields
    in the extras, its developer and user messages in order."""
    raw = (CODEX / name).read_bytes()
    body = json.loads(raw)
    d = decode_request(raw)
    r = read_request(write_request(d, provider=0, model_name="m"))
    wanted = []
    for tool in body["tools"]:
        if tool["type"] == "function":
            wanted.append(tool["name"])
        elif tool["type"] == "namespace":
            wanted += [
                f"{tool['name']}__{t['name']}" for t in tool["tools"] if t["type"] == "function"
            ]
    assert [t.function.name for t in r.tools or ()] == wanted
    extras = json.loads(r.extras)
    hosted = [t for t in body["tools"] if t["type"] not in ("function", "namespace")]
    assert extras.pop("tools") == hosted
    assert extras == {k: body[k] for k in extras}
    assert set(extras) >= {"include", "reasoning", "store", "prompt_cache_key", "client_metadata"}
    assert [m.role for m in r.messages] == [i["role"] for i in body["input"]]


def test_a_later_call_is_not_folded_into_an_earlier_turn_without_calls() -> None:
    """An assistant turn with no text and no calls, then a user turn, then a
    call: the call is the second assistant turn's alone (the first turn's
    list is not reused for the next)."""
    r = wire(
        input=[
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "c"},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        ]
    )
    assert [m.role for m in r.messages] == ["user", "assistant", "user", "assistant"]
    assert r.messages[1].tool_calls is None
    assert [c.id for c in r.messages[3].tool_calls or ()] == ["call_1"]
