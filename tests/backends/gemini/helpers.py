"""What the Gemini tests share: google-genai's own types over the bodies we
write and read, and the golden files (``golden/README.md``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.genai import _common
from google.genai import types as genai

from flatgate.proxy.apis.gemini.request import decode_request
from flatgate.proxy.backends.gemini.encode import encode_gemini
from flatgate.proxy.wire.request.decode import Message, Request

GOLDEN = Path(__file__).parent / "golden"


class GenerateContentBody(_common.BaseModel):
    """The REST body of ``generateContent`` as google-genai's types have it
    (camelCase aliases, unknown fields forbidden)."""

    contents: list[genai.Content]
    system_instruction: genai.Content | None = None
    tools: list[genai.Tool] | None = None
    tool_config: genai.ToolConfig | None = None
    safety_settings: list[genai.SafetySetting] | None = None
    generation_config: genai.GenerationConfig | None = None
    cached_content: str | None = None
    labels: dict[str, str] | None = None


def golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text())


def golden_bytes(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def validate(body: bytes) -> dict[str, Any]:
    """``body`` checked by google-genai's types (every member known, every
    value of its type); the parsed body."""
    doc: dict[str, Any] = json.loads(body)
    assert "model" not in doc
    GenerateContentBody.model_validate(doc)
    return doc


def sdk_response(body: bytes | dict[str, Any]) -> genai.GenerateContentResponse:
    """An answer read by google-genai's response type."""
    doc = json.loads(body) if isinstance(body, bytes) else body
    return genai.GenerateContentResponse.model_validate(doc)


def encode(req: Request, *, drop: bool = False) -> tuple[dict[str, Any], list[str]]:
    """``req``'s body, validated by google-genai's types and read back by our
    own model, and the names left out."""
    omitted: list[str] = []
    body = encode_gemini(req, omitted, drop)
    doc = validate(body)
    assert decode_request(body) is not None
    return doc, omitted


def wire(messages: list[Message], **fields: Any) -> Request:
    """A wire request as the proxy holds one, built directly."""
    return Request(model_name="gemini-test", messages=messages, **fields)
