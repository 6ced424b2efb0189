"""``backends.gemini.encode.encode_gemini``: the generateContent body a wire
request becomes. Every body is validated by google-genai's own types
(``helpers.validate``); the documented function-calling exchange with thought
signatures is a golden file (``golden/README.md``)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import UnsupportedField
from flatgate.proxy.backends.gemini.encode import (
    SIGNED_TEXT,
)
from flatgate.proxy.wire.parts import ContentPart, ReasoningPart
from flatgate.proxy.wire.request.decode import (
    Function,
    FunctionCall,
    Message,
    Tool,
    ToolCall,
)
from flatgate.proxy.wire.schema import ApiDialect, PartKind, ToolChoiceMode
from tests.backends.bedrock.converse_helpers import messages_request
from tests.backends.gemini.helpers import encode, golden, wire
from tests.backends.helpers import request, user

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")
GEMINI = int(ApiDialect.GEMINI)
FLIGHT = golden("function_call_request.json")


def flight_tools() -> list[Tool]:
    decls = FLIGHT["tools"][0]["functionDeclarations"]
    return [
        Tool(
            Function(d["name"], d["description"], msgspec.Raw(json.dumps(d["parameters"]).encode()))
        )
        for d in decls
    ]


# -- the documented exchange ---------------------------------------------------


def test_the_documented_function_call_with_its_signature() -> None:
    signature = FLIGHT["contents"][1]["parts"][0]["thoughtSignature"]
    req = wire(
        [
            Message("user", FLIGHT["contents"][0]["parts"][0]["text"]),
            Message(
                "assistant",
                "",
                tool_calls=[ToolCall("c1", FunctionCall("check_flight", '{"flight": "AA100"}'))],
                reasoning=[ReasoningPart(opaque=signature.encode(), dialect=GEMINI, id="c1")],
            ),
            Message("tool", '{"status": "delayed", "departure_time": "12 PM"}', tool_call_id="c1"),
        ],
        tools=flight_tools(),
    )
    body, omitted = encode(req)
    assert omitted == []
    expected = json.loads(json.dumps(FLIGHT["contents"]))
    expected[1]["parts"][0]["functionCall"]["id"] = "c1"
    expected[2]["parts"][0]["functionResponse"]["id"] = "c1"
    assert body["contents"] == expected
    decls = body["tools"][0]["functionDeclarations"]
    want = FLIGHT["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in decls] == [d["name"] for d in want]
    # JSON Schema as sent, where Gemini takes JSON Schema.
    assert [d["parametersJsonSchema"] for d in decls] == [d["parameters"] for d in want]


# -- the conversation ----------------------------------------------------------


def test_system_and_developer_messages_are_the_system_instruction() -> None:
    req = request(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                user("Hi"),
                {"role": "developer", "content": "Answer in French."},
                user("Again"),
            ],
        }
    )
    body, _ = encode(req)
    assert body["systemInstruction"] == {
        "parts": [{"text": "Be brief."}, {"text": "Answer in French."}]
    }
    # The two user turns, with nothing between them, are one content.
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Hi"}, {"text": "Again"}]}]


def test_assistant_turns_are_model_contents() -> None:
    req = request(
        {
            "model": "m",
            "messages": [user("Hi"), {"role": "assistant", "content": "Hello"}, user("Bye")],
            "max_tokens": 50,
        }
    )
    body, _ = encode(req)
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["generationConfig"] == {"maxOutputTokens": 50}


def test_an_image_is_inline_data_and_a_url_is_file_data() -> None:
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    req = request(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpeg"}},
                    ],
                }
            ],
        }
    )
    body, omitted = encode(req)
    parts = body["contents"][0]["parts"]
    assert parts[0] == {"text": "What is this?"}
    assert parts[1] == {
        "inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}
    }
    assert parts[2] == {
        "fileData": {"fileUri": "https://example.com/cat.jpeg", "mimeType": "image/jpeg"}
    }
    assert omitted == ["detail"]


def test_another_providers_file_id_is_refused_naming_the_part() -> None:
    part = ContentPart(
        kind=int(PartKind.FILE), file_id="file-abc", dialect=int(ApiDialect.OPENAI_CHAT)
    )
    req = wire(
        [Message("user", "", parts=[ContentPart(kind=int(PartKind.TEXT), text="Read"), part])]
    )
    with pytest.raises(Untranslatable) as exc:
        encode(req)
    assert exc.value.param == "messages[0].content[1]"
    body, omitted = encode(req, drop=True)
    assert body["contents"][0]["parts"] == [{"text": "Read"}]
    assert omitted == ["messages[0].content[1]"]


def test_a_gemini_file_is_file_data() -> None:
    part = ContentPart(
        kind=int(PartKind.FILE),
        file_id="https://generativelanguage.googleapis.com/v1beta/files/x1",
        media_type="application/pdf",
        dialect=GEMINI,
    )
    body, _ = encode(wire([Message("user", "", parts=[part])]))
    assert body["contents"][0]["parts"] == [
        {
            "fileData": {
                "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/x1",
                "mimeType": "application/pdf",
            }
        }
    ]


def test_a_pdf_is_inline_data() -> None:
    pdf = b"%PDF-1.4\n%%EOF"
    part = ContentPart(
        kind=int(PartKind.DOCUMENT),
        data=pdf,
        media_type="application/pdf",
        title="T",
        filename="report.pdf",
    )
    body, omitted = encode(wire([Message("user", "", parts=[part])]))
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "application/pdf", "data": base64.b64encode(pdf).decode()}}
    ]
    assert omitted == ["title", "filename"]  # no field of Gemini's takes them: named


def test_tool_results_answer_their_calls_by_name() -> None:
    req = request(
        {
            "model": "m",
            "messages": [
                user("Weather in Paris and Rome?"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                        },
                        {
                            "id": "b",
                            "type": "function",
                            "function": {"name": "weather", "arguments": ""},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "sunny"},
                {"role": "tool", "tool_call_id": "b", "content": '{"sky": "rain"}'},
            ],
            "tools": [{"type": "function", "function": {"name": "weather"}}],
        }
    )
    body, _ = encode(req)
    model, results = body["contents"][1], body["contents"][2]
    assert model["parts"] == [
        {"functionCall": {"name": "weather", "args": {"city": "Paris"}, "id": "a"}},
        {"functionCall": {"name": "weather", "args": {}, "id": "b"}},
    ]
    # Parallel results in one user turn; text as output, a JSON object as it is.
    assert results == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "weather", "response": {"output": "sunny"}, "id": "a"}},
            {"functionResponse": {"name": "weather", "response": {"sky": "rain"}, "id": "b"}},
        ],
    }
    assert body["tools"][0]["functionDeclarations"] == [
        {"name": "weather", "parametersJsonSchema": {"type": "object"}}
    ]


def test_a_failed_call_is_an_error_response() -> None:
    req = wire(
        [
            Message("user", "go"),
            Message("assistant", "", tool_calls=[ToolCall("x", FunctionCall("f", "{}"))]),
            Message("tool", "no such file", tool_call_id="x", is_error=True),
        ]
    )
    body, _ = encode(req)
    fr = body["contents"][2]["parts"][0]["functionResponse"]
    assert fr["response"] == {"error": "no such file"}


def test_a_result_that_answers_no_call_is_refused() -> None:
    req = wire([Message("user", "go"), Message("tool", "42", tool_call_id="nobody")])
    with pytest.raises(Untranslatable, match=r"messages\[1\]"):
        encode(req)


def test_arguments_that_are_not_an_object_are_refused() -> None:
    req = wire([Message("assistant", "", tool_calls=[ToolCall("x", FunctionCall("f", "[1]"))])])
    with pytest.raises(Untranslatable, match=r"messages\[0\]"):
        encode(req)


# -- reasoning -----------------------------------------------------------------


def test_thoughts_and_the_text_signature_go_back_where_they_came_from() -> None:
    req = wire(
        [
            Message("user", "2+2?"),
            Message(
                "assistant",
                "4.",
                reasoning=[
                    ReasoningPart(text="Adding.", dialect=GEMINI),
                    ReasoningPart(opaque=b"c2ln", dialect=GEMINI, id=SIGNED_TEXT),
                ],
            ),
            Message("user", "And 3+3?"),
        ]
    )
    body, omitted = encode(req)
    assert body["contents"][1] == {
        "role": "model",
        "parts": [{"text": "Adding.", "thought": True}, {"text": "4.", "thoughtSignature": "c2ln"}],
    }
    assert omitted == []


def test_a_signature_back_under_a_responses_items_id_goes_where_its_payload_says() -> None:
    """A Responses client sends a reasoning item back under the item's own id
    (``rs_...``): the payload (``<where>\\n<signature>``) still says the text's."""
    req = wire(
        [
            Message("user", "2+2?"),
            Message(
                "assistant",
                "4.",
                reasoning=[
                    ReasoningPart(opaque=f"{SIGNED_TEXT}\nc2ln".encode(), dialect=GEMINI, id="rs_1")
                ],
            ),
            Message("user", "And 3+3?"),
        ]
    )
    body, omitted = encode(req)
    assert body["contents"][1]["parts"] == [{"text": "4.", "thoughtSignature": "c2ln"}]
    assert omitted == []


def test_a_thought_back_under_a_responses_items_id_is_a_thought_again() -> None:
    req = wire(
        [
            Message("user", "2+2?"),
            Message(
                "assistant",
                "4.",
                reasoning=[
                    ReasoningPart(text="Adding.", opaque=b"\nc2ln", dialect=GEMINI, id="rs_1")
                ],
            ),
            Message("user", "And 3+3?"),
        ]
    )
    body, _ = encode(req)
    assert body["contents"][1]["parts"] == [
        {"text": "Adding.", "thought": True, "thoughtSignature": "c2ln"},
        {"text": "4."},
    ]


def test_claudes_signed_thinking_is_left_out_and_named() -> None:
    req = wire(
        [
            Message("user", "hi"),
            Message(
                "assistant",
                "hello",
                reasoning=[
                    ReasoningPart(
                        text="hm", opaque=b"sig", dialect=int(ApiDialect.ANTHROPIC_MESSAGES)
                    )
                ],
            ),
        ]
    )
    body, omitted = encode(req)
    assert body["contents"][1]["parts"] == [{"text": "hello"}]
    assert omitted == ["reasoning"]


def test_reasoning_effort_is_a_thinking_budget() -> None:
    req = request({"model": "m", "messages": [user("hi")], "reasoning_effort": "medium"})
    body, _ = encode(req)
    assert body["generationConfig"]["thinkingConfig"] == {
        "includeThoughts": True,
        "thinkingBudget": 8192,
    }


def test_anthropic_thinking_is_its_budget() -> None:
    req = messages_request(
        {
            "model": "claude",
            "max_tokens": 2000,
            "messages": [user("hi")],
            "thinking": {"type": "enabled", "budget_tokens": 1500},
        }
    )
    body, _ = encode(req)
    assert body["generationConfig"] == {
        "maxOutputTokens": 2000,
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1500},
    }


# -- settings ------------------------------------------------------------------


def test_sampling_settings_are_the_generation_config() -> None:
    req = request(
        {
            "model": "m",
            "messages": [user("hi")],
            "temperature": 1.5,
            "top_p": 0.5,
            "stop": ["END"],
            "seed": 7,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "user": "u1",
        }
    )
    body, omitted = encode(req)
    assert body["generationConfig"] == {
        "stopSequences": ["END"],
        "temperature": 1.5,
        "topP": 0.5,
        "seed": 7,
        "presencePenalty": 0.5,
        "frequencyPenalty": -0.5,
    }
    assert omitted == ["user"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.5),
        ("stop", ["a", "b", "c", "d", "e", "f"]),
        ("n", 2),
        ("parallel_tool_calls", False),
    ],
)
def test_what_gemini_cannot_take_is_refused_by_name(field: str, value: Any) -> None:
    fields: dict[str, Any] = {field: value}
    if field == "parallel_tool_calls":
        fields["tools"] = [Tool(Function("f"))]
    # Written as the wire has it (the edge's OpenAI API caps some of them first).
    req = wire([Message("user", "hi")], **fields)
    with pytest.raises(Untranslatable) as exc:
        encode(req)
    assert exc.value.param == field
    _, omitted = encode(req, drop=True)
    assert omitted == [field]


def test_response_formats() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = request(
        {
            "model": "m",
            "messages": [user("hi")],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": schema},
            },
        }
    )
    body, _ = encode(req)
    assert body["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseJsonSchema": schema,
    }
    req = request(
        {"model": "m", "messages": [user("hi")], "response_format": {"type": "json_object"}}
    )
    body, _ = encode(req)
    assert body["generationConfig"] == {"responseMimeType": "application/json"}


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "f"}},
            {"mode": "ANY", "allowedFunctionNames": ["f"]},
        ),
    ],
)
def test_tool_choice(choice: Any, config: dict[str, Any]) -> None:
    req = request(
        {
            "model": "m",
            "messages": [user("hi")],
            "tools": [{"type": "function", "function": {"name": "f", "strict": True}}],
            "tool_choice": choice,
        }
    )
    body, omitted = encode(req)
    assert body["toolConfig"] == {"functionCallingConfig": config}
    assert omitted == ["strict"]


def test_tool_choice_mode_is_read_from_the_wire() -> None:
    req = wire(
        [Message("user", "hi")], tools=[Tool(Function("f"))], tool_choice=int(ToolChoiceMode.Unset)
    )
    body, _ = encode(req)
    assert "toolConfig" not in body


# -- Gemini's own fields -------------------------------------------------------


def test_gemini_extras_are_geminis_own_fields() -> None:
    extras = {
        "safetySettings": [
            {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}
        ],
        "cachedContent": "cachedContents/abc",
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "low"}, "temperature": 0.2},
        "tools": [{"googleSearch": {}}],
        "contents": [{"role": "user", "parts": [{"text": "never taken"}]}],
    }
    req = wire(
        [Message("user", "hi")],
        temperature=0.9,
        tools=[Tool(Function("f"))],
        extras=json.dumps(extras),
        extras_dialect=GEMINI,
    )
    body, omitted = encode(req)
    assert body["safetySettings"] == extras["safetySettings"]
    assert body["cachedContent"] == "cachedContents/abc"
    assert body["generationConfig"] == {
        "temperature": 0.2,
        "thinkingConfig": {"thinkingLevel": "low"},
    }
    assert body["tools"] == [
        {"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]},
        {"googleSearch": {}},
    ]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert omitted == []


def test_another_dialects_unknown_extras_are_refused() -> None:
    req = wire(
        [Message("user", "hi")],
        extras='{"logit_bias": {"1": 2}}',
        extras_dialect=int(ApiDialect.OPENAI_CHAT),
    )
    with pytest.raises(UnsupportedField):
        encode(req)
    _, omitted = encode(req, drop=True)
    assert omitted == ["logit_bias"]
