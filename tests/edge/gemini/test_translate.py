"""The Gemini edge's translation: a Gemini request as the wire's
``CompletionRequest``, every field carried, mapped or refused naming it, and
the round trip through the gemini backend's encoder back to what was sent."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.gemini.translate import write_gemini
from flatgate.proxy.apis.gemini.request import decode_request
from flatgate.proxy.backends.gemini.encode import encode_gemini
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import ApiDialect, PartKind, ToolChoiceMode

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def body(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
    base.update(fields)
    return base


def wire(data: dict[str, Any] | bytes, *, stream: bool = False) -> Request:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    buf = write_gemini(
        decode_request(raw), provider=1, model_name="m", stream=stream, tenant="t", request_id="r"
    )
    verify_request(buf)
    return read_request(buf)


def extras(req: Request) -> dict[str, Any]:
    assert req.extras_dialect == int(ApiDialect.GEMINI)
    out: dict[str, Any] = json.loads(req.extras)
    return out


def refused(data: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        wire(data)
    assert info.value.param == needle, info.value.message
    assert needle in info.value.message


def back(req: Request) -> dict[str, Any]:
    """The request as the gemini backend writes it again."""
    omitted: list[str] = []
    out: dict[str, Any] = json.loads(encode_gemini(req, omitted, False))
    assert omitted == []
    return out


def test_a_minimal_request() -> None:
    r = wire(body())
    assert (r.model_name, r.tenant, r.request_id, r.stream) == ("m", "t", "r", False)
    assert [(m.role, m.content) for m in r.messages] == [("user", "hello")]
    assert r.extras == "" and r.tools == [] and r.tool_choice == 0


def test_sampling_and_stream() -> None:
    config = {
        "temperature": 0.5,
        "topP": 0.9,
        "topK": 40.0,
        "maxOutputTokens": 77,
        "stopSequences": ["END", ""],
        "seed": 7,
        "presencePenalty": 0.1,
        "frequencyPenalty": 0.2,
        "candidateCount": 1,
    }
    r = wire(body(generationConfig=config), stream=True)
    assert (r.temperature, r.top_k, r.max_tokens) == (0.5, 40, 77)
    assert r.top_p == pytest.approx(0.9)
    assert (r.stop, r.seed, r.stream, r.include_usage) == (["END"], 7, True, True)
    assert r.presence_penalty == pytest.approx(0.1)
    assert r.frequency_penalty == pytest.approx(0.2)
    assert r.extras == ""


def test_system_instruction_and_roles() -> None:
    r = wire(
        body(
            systemInstruction={"parts": [{"text": "be "}, {"text": "brief"}]},
            contents=[
                {"parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"text": "hello"}]},
                {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
            ],
        )
    )
    got = [(m.role, m.content) for m in r.messages]
    assert got == [("system", "be brief"), ("user", "hi"), ("assistant", "hello"), ("user", "ab")]


def test_a_function_calling_round_trip_with_signatures() -> None:
    sent = body(
        contents=[
            {"role": "user", "parts": [{"text": "weather?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "thinking it over", "thought": True, "thoughtSignature": "c2lnMA=="},
                    {
                        "functionCall": {"name": "lookup", "args": {"q": "x"}},
                        "thoughtSignature": "c2lnMQ==",
                    },
                    {"functionCall": {"name": "lookup", "args": {"q": "y"}, "id": "own"}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "lookup", "response": {"t": 1}}},
                    {"functionResponse": {"name": "lookup", "id": "own", "response": {"t": 2}}},
                ],
            },
            {"role": "model", "parts": [{"text": "sunny", "thoughtSignature": "c2lnMg=="}]},
        ],
        tools=[{"functionDeclarations": [{"name": "lookup", "parametersJsonSchema": SCHEMA}]}],
        toolConfig={"functionCallingConfig": {"mode": "AUTO"}},
    )
    r = wire(sent)
    roles = [m.role for m in r.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    calls = r.messages[1].tool_calls or []
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("call_1_1", "lookup", {"q": "x"}),
        ("own", "lookup", {"q": "y"}),
    ]
    assert [(m.tool_call_id, json.loads(m.content or "")) for m in r.messages[2:4]] == [
        ("call_1_1", {"t": 1}),
        ("own", {"t": 2}),
    ]
    reasoning = [(p.text, p.opaque, p.dialect) for p in r.messages[1].reasoning or []]
    gemini = int(ApiDialect.GEMINI)
    assert reasoning == [
        ("thinking it over", b"\nc2lnMA==", gemini),
        ("", b"call_1_1\nc2lnMQ==", gemini),
    ]
    assert [p.opaque for p in r.messages[4].reasoning or []] == [b"gemini:text\nc2lnMg=="]
    assert r.tool_choice == ToolChoiceMode.Auto
    assert json.loads(bytes(r.tools[0].function.parameters or b"")) == SCHEMA
    # The gemini backend puts every signature back on its part.
    again = back(r)
    model = again["contents"][1]["parts"]
    assert model[0] == {"text": "thinking it over", "thought": True, "thoughtSignature": "c2lnMA=="}
    assert (
        model[1]["thoughtSignature"] == "c2lnMQ==" and model[1]["functionCall"]["name"] == "lookup"
    )
    assert again["contents"][3]["parts"] == [{"text": "sunny", "thoughtSignature": "c2lnMg=="}]
    answers = again["contents"][2]["parts"]
    assert [a["functionResponse"]["response"] for a in answers] == [{"t": 1}, {"t": 2}]


@pytest.mark.parametrize(
    ("config", "mode", "name", "extra"),
    [
        ({"mode": "ANY"}, ToolChoiceMode.Required, "", False),
        (
            {"mode": "ANY", "allowedFunctionNames": ["lookup"]},
            ToolChoiceMode.Function,
            "lookup",
            False,
        ),
        (
            {"mode": "ANY", "allowedFunctionNames": ["lookup", "b"]},
            ToolChoiceMode.Required,
            "",
            True,
        ),
        ({"mode": "NONE"}, ToolChoiceMode.None_, "", False),
        ({"mode": "VALIDATED"}, ToolChoiceMode.Auto, "", True),
    ],
)
def test_function_calling_modes(config: dict[str, Any], mode: int, name: str, extra: bool) -> None:
    tools = [{"functionDeclarations": [{"name": "lookup"}, {"name": "b"}]}]
    r = wire(body(tools=tools, toolConfig={"functionCallingConfig": config}))
    assert (r.tool_choice, r.tool_choice_name) == (mode, name)
    if extra:
        assert extras(r)["toolConfig"]["functionCallingConfig"] == config
    else:
        assert r.extras == ""


def test_openapi_parameters_become_json_schema() -> None:
    params = {"type": "OBJECT", "properties": {"type": {"type": "STRING"}}}
    tools = [{"functionDeclarations": [{"name": "f", "description": "d", "parameters": params}]}]
    r = wire(body(tools=tools))
    fn = r.tools[0].function
    assert (fn.name, fn.description) == ("f", "d")
    assert json.loads(bytes(fn.parameters or b"")) == {
        "type": "object",
        "properties": {"type": {"type": "string"}},
    }


def test_media_parts_both_spellings_and_alphabets() -> None:
    png = base64.urlsafe_b64encode(PNG).decode().rstrip("=")
    parts = [
        {"text": "what is this?"},
        {"inlineData": {"mimeType": "image/png", "data": png}},
        {
            "inlineData": {
                "mime_type": "application/pdf",
                "data": base64.b64encode(b"%PDF-1.4").decode(),
            }
        },
        {"fileData": {"fileUri": "gs://b/a.mp3", "mimeType": "audio/mpeg"}},
    ]
    r = wire(body(contents=[{"role": "user", "parts": parts}]))
    got = [(p.kind, p.text, p.data, p.media_type, p.url) for p in r.messages[0].parts or []]
    assert got == [
        (PartKind.TEXT, "what is this?", b"", "", ""),
        (PartKind.IMAGE, "", PNG, "image/png", ""),
        (PartKind.DOCUMENT, "", b"%PDF-1.4", "application/pdf", ""),
        (PartKind.AUDIO, "", b"", "audio/mpeg", "gs://b/a.mp3"),
    ]
    assert back(r)["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}
    }


def test_a_function_response_with_parts() -> None:
    png = base64.b64encode(PNG).decode()
    fr = {
        "name": "shot",
        "id": "c1",
        "response": {"ok": True},
        "parts": [{"inlineData": {"mimeType": "image/png", "data": png}}],
    }
    contents = [
        {"role": "model", "parts": [{"functionCall": {"name": "shot", "id": "c1"}}]},
        {"role": "user", "parts": [{"functionResponse": fr}]},
    ]
    r = wire(body(contents=contents))
    tool = r.messages[1]
    assert (tool.role, tool.tool_call_id) == ("tool", "c1")
    assert [(p.kind, p.text, p.data) for p in tool.parts or []] == [
        (PartKind.TEXT, '{"ok": true}', b""),
        (PartKind.IMAGE, "", PNG),
    ]


def test_fields_with_no_slot_are_gemini_extras() -> None:
    safety = [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
    config = {
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 128},
        "responseModalities": ["TEXT"],
        "responseMimeType": "text/x.enum",
        "temperature": 1.0,
    }
    r = wire(
        body(
            safetySettings=safety,
            cachedContent="cachedContents/abc",
            generationConfig=config,
            tools=[{"functionDeclarations": [{"name": "f"}]}, {"googleSearch": {}}],
            labels={"team": "a"},
        )
    )
    assert extras(r) == {
        "safetySettings": safety,
        "cachedContent": "cachedContents/abc",
        "generationConfig": {
            "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 128},
            "responseModalities": ["TEXT"],
            "responseMimeType": "text/x.enum",
        },
        "tools": [{"googleSearch": {}}],
        "labels": {"team": "a"},
    }
    again = back(r)
    assert again["safetySettings"] == safety and again["cachedContent"] == "cachedContents/abc"
    assert again["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 128
    assert again["tools"][-1] == {"googleSearch": {}}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA},
            {"type": "json_schema", "json_schema": {"name": "response", "schema": SCHEMA}},
        ),
        (
            {"responseMimeType": "application/json", "responseSchema": {"type": "STRING"}},
            {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": {"type": "string"}},
            },
        ),
        ({"responseMimeType": "application/json"}, {"type": "json_object"}),
    ],
)
def test_structured_output(config: dict[str, Any], expected: dict[str, Any]) -> None:
    r = wire(body(generationConfig=config))
    assert json.loads(r.response_format) == expected
    assert r.extras == ""


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, "contents.0.role"),
        ({"generationConfig": {"candidateCount": 2}}, "generationConfig.candidateCount"),
        ({"generationConfig": {"topK": 2.5}}, "generationConfig.topK"),
        ({"generationConfig": {"topK": 1e300}}, "generationConfig.topK"),
        (
            {"contents": [{"role": "user", "parts": [{"executableCode": {"code": "1"}}]}]},
            "contents.0.parts.0.executableCode",
        ),
        (
            {"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f"}}]}]},
            "contents.0.parts.0.functionCall",
        ),
        (
            {
                "contents": [
                    {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}
                ]
            },
            "contents.0.parts.0.functionResponse",
        ),
        (
            {
                "contents": [
                    {
                        "role": "model",
                        "parts": [{"inlineData": {"mimeType": "image/png", "data": "AAAA"}}],
                    }
                ]
            },
            "contents.0.parts.0.inlineData",
        ),
        (
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [{"inlineData": {"mimeType": "image/png", "data": "!!"}}],
                    }
                ]
            },
            "contents.0.parts.0.inlineData.data",
        ),
        (
            {"systemInstruction": {"parts": [{"fileData": {"fileUri": "gs://a"}}]}},
            "systemInstruction.parts.0",
        ),
        (
            {"tools": [{"functionDeclarations": [{"name": "f", "behavior": "NON_BLOCKING"}]}]},
            "tools.0.functionDeclarations.0.behavior",
        ),
        (
            {"generationConfig": {"responseSchema": {"type": "STRING"}}},
            "generationConfig.responseSchema",
        ),
        (
            {
                "tools": [{"functionDeclarations": [{"name": "f"}]}],
                "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}},
            },
            "toolConfig.functionCallingConfig.mode",
        ),
    ],
)
def test_refusals_name_the_field(fields: dict[str, Any], needle: str) -> None:
    refused(body(**fields), needle)


def test_a_model_in_the_body_is_not_the_model() -> None:
    assert wire(body(model="models/other")).model_name == "m"


def gemini_cli_request() -> dict[str, Any]:
    """A request of Gemini CLI's first turn's shape and size: a 30 KB
    systemInstruction, a dozen tools declared with ``parametersJsonSchema``,
    ``topK`` and ``thinkingConfig.includeThoughts``."""
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The absolute path " * 20},
            "limit": {"type": "number"},
            "flags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["path"],
    }
    tools = [
        {"name": f"tool_{k}", "description": "Reads a file. " * 40, "parametersJsonSchema": schema}
        for k in range(12)
    ]
    return {
        "contents": [
            {"role": "user", "parts": [{"text": "This is the Gemini CLI. " * 60}]},
            {"role": "user", "parts": [{"text": "say hi"}]},
        ],
        "systemInstruction": {"role": "user", "parts": [{"text": "You are an agent. " * 1700}]},
        "tools": [{"functionDeclarations": tools}],
        "generationConfig": {
            "temperature": 0,
            "topP": 1,
            "topK": 64,
            "thinkingConfig": {"includeThoughts": True},
        },
    }


def test_gemini_clis_first_request_passes() -> None:
    sent = gemini_cli_request()
    raw = json.dumps(sent).encode()
    assert len(raw) > 38_000
    r = wire(raw, stream=True)
    assert r.messages[0].role == "system" and len(r.messages[0].content or "") > 30_000
    assert (r.top_k, r.temperature, len(r.tools)) == (64, 0.0, 12)
    assert extras(r) == {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}}
    again = back(r)
    assert again["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
    assert again["generationConfig"]["topK"] == 64
    declared = again["tools"][0]["functionDeclarations"]
    assert [d["parametersJsonSchema"] for d in declared] == [
        t["parametersJsonSchema"] for t in sent["tools"][0]["functionDeclarations"]
    ]


def test_the_snake_case_spelling_of_google_genai() -> None:
    tools = [{"functionDeclarations": [{"name": "f", "parameters_json_schema": SCHEMA}]}]
    config = {"thinkingConfig": {"include_thoughts": True, "thinking_budget": 0}}
    r = wire(body(tools=tools, generationConfig=config))
    assert json.loads(bytes(r.tools[0].function.parameters or b"")) == SCHEMA
    assert extras(r)["generationConfig"]["thinkingConfig"] == {
        "includeThoughts": True,
        "thinkingBudget": 0,
    }


def test_not_a_request() -> None:
    with pytest.raises(msgspec.ValidationError, match="contents"):
        wire(b'{"contents": 3}')
