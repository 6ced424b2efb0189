"""``backends.gemini.encode.encode_gemini``, more of the mapping: thought
signatures in call ids, thinking from Responses and Messages extras, a
part's own fields, audio, documents, a tool result's media, and the model
reading proto JSON's other spelling. Bodies validated by google-genai's
types, as in ``test_request``."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import msgspec
import pytest

from flatgate.proxy.apis.gemini.request import decode_request
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.gemini.encode import (
    signed_call_id,
    split_call_id,
)
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import (
    FunctionCall,
    Message,
    ToolCall,
)
from flatgate.proxy.wire.schema import ApiDialect, PartKind
from tests.backends.bedrock.converse_helpers import messages_request
from tests.backends.gemini.helpers import encode, wire
from tests.backends.helpers import user

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")
GEMINI = int(ApiDialect.GEMINI)


# -- more of the mapping ---------------------------------------------------------


@pytest.mark.parametrize("signature", ["U2lnbmF0dXJlIEI=", "YWJj", "YQ==", "+/+/"])
def test_a_signature_rides_in_a_call_id_exactly(signature: str) -> None:
    ident = signed_call_id("call_1", signature)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", ident)  # an id every client API takes
    assert split_call_id(ident) == ("call_1", signature)
    assert split_call_id("call_1") == ("call_1", None)
    assert signed_call_id("call_1", None) == "call_1"


def test_responses_reasoning_asks_for_thoughts() -> None:
    extras = json.dumps({"reasoning": {"effort": "high", "summary": "auto"}})
    req = wire(
        [Message("user", "hi")], extras=extras, extras_dialect=int(ApiDialect.OPENAI_RESPONSES)
    )
    body, omitted = encode(req)
    assert body["generationConfig"]["thinkingConfig"] == {
        "includeThoughts": True,
        "thinkingBudget": 24576,
    }
    assert omitted == []


@pytest.mark.parametrize(
    ("thinking", "config"),
    [
        ({"type": "disabled"}, {"thinkingBudget": 0}),
        ({"type": "adaptive"}, {"includeThoughts": True, "thinkingBudget": -1}),
    ],
)
def test_anthropic_thinking_off_and_adaptive(
    thinking: dict[str, Any], config: dict[str, Any]
) -> None:
    req = messages_request(
        {"model": "c", "max_tokens": 10, "messages": [user("hi")], "thinking": thinking}
    )
    body, _ = encode(req)
    assert body["generationConfig"]["thinkingConfig"] == config


def test_a_gemini_parts_own_fields_go_on_the_part() -> None:
    part = ContentPart(
        kind=int(PartKind.FILE),
        url="https://www.youtube.com/watch?v=9hE5-98ZeCg",
        media_type="video/mp4",
        dialect=GEMINI,
        extras=json.dumps({"videoMetadata": {"startOffset": "10s", "endOffset": "20s"}}),
    )
    body, _ = encode(wire([Message("user", "", parts=[part])]))
    assert body["contents"][0]["parts"] == [
        {
            "fileData": {
                "fileUri": "https://www.youtube.com/watch?v=9hE5-98ZeCg",
                "mimeType": "video/mp4",
            },
            "videoMetadata": {"startOffset": "10s", "endOffset": "20s"},
        }
    ]
    other = ContentPart(kind=int(PartKind.TEXT), text="x", dialect=GEMINI, extras='{"bogus": 1}')
    with pytest.raises(Untranslatable, match="bogus"):
        encode(wire([Message("user", "", parts=[other])]))


def test_anthropic_cache_control_on_a_part_is_named() -> None:
    part = ContentPart(
        kind=int(PartKind.TEXT),
        text="long",
        dialect=int(ApiDialect.ANTHROPIC_MESSAGES),
        extras='{"cache_control": {"type": "ephemeral"}}',
    )
    body, omitted = encode(wire([Message("user", "", parts=[part])]))
    assert body["contents"][0]["parts"] == [{"text": "long"}]
    assert omitted == ["cache_control"]


def test_audio_and_a_text_document() -> None:
    wav = b"RIFF\x00\x00\x00\x00WAVEfmt "
    parts = [
        ContentPart(kind=int(PartKind.AUDIO), data=wav, media_type="audio/x-wav"),
        ContentPart(kind=int(PartKind.DOCUMENT), text="the doc", media_type="text/plain"),
    ]
    body, _ = encode(wire([Message("user", "", parts=parts)]))
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "audio/wav", "data": base64.b64encode(wav).decode()}},
        {"text": "the doc"},
    ]


def test_a_tool_results_image_is_a_function_response_part() -> None:
    parts = [
        ContentPart(kind=int(PartKind.TEXT), text="the chart"),
        ContentPart(kind=int(PartKind.IMAGE), data=PNG, media_type="image/png"),
    ]
    req = wire(
        [
            Message("user", "draw"),
            Message("assistant", "", tool_calls=[ToolCall("d", FunctionCall("draw", "{}"))]),
            Message("tool", "", tool_call_id="d", parts=parts),
        ]
    )
    body, _ = encode(req)
    fr = body["contents"][2]["parts"][0]["functionResponse"]
    assert fr["response"] == {"output": "the chart"}
    assert fr["parts"] == [
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}}
    ]


def test_the_model_reads_protos_snake_case_spelling_too() -> None:
    camel = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}},
                    {"fileData": {"fileUri": "gs://b/c.pdf", "mimeType": "application/pdf"}},
                ],
            }
        ],
        "tools": [
            {"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}
        ],
        "generationConfig": {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": 9}},
    }
    snake = json.loads(
        json.dumps(camel)
        .replace("mimeType", "mime_type")
        .replace("fileUri", "file_uri")
        .replace("parametersJsonSchema", "parameters_json_schema")
        .replace("includeThoughts", "include_thoughts")
        .replace("thinkingBudget", "thinking_budget")
    )
    read_camel = decode_request(json.dumps(camel).encode())
    read_snake = decode_request(json.dumps(snake).encode())
    assert read_snake == read_camel
    # Written back, in camelCase only.
    assert json.loads(msgspec.json.encode(read_snake)) == camel
    with pytest.raises(msgspec.ValidationError, match="mimeType"):
        decode_request(b'{"contents":[{"parts":[{"inlineData":{"data":"iVBORw=="}}]}]}')
