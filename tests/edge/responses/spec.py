"""What the Open Responses specification requires of a response object and
of each streaming event, written out by hand, and a check against it.

Source: the specification's OpenAPI document in ``openresponses/openresponses``
at commit ``92c12d96`` (spec version 2026-04-24), its schema components
(one JSON file each, by the schema's name): each table below names the one it copies
(the ``required`` list and each required property's type, ``|null`` where
the schema allows null; ``any``: required, of any type). The specification's
text ("HTTP Requests and Responses", "Streaming HTTP Responses") adds that a
stream is ``text/event-stream``, each event's ``event:`` line names its
``type``, and the terminal event is the literal ``[DONE]``.

``problems(value, name)`` lists what ``value`` lacks of the schema ``name``
(nested objects checked by their own schemas: a response's tools, reasoning,
text, usage, error and output items, an event's response, item and part).
The suite's own code is not copied: these tables are the schemas' text.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["EVENTS", "SCHEMAS", "problems", "stream_problems"]

STR, INT, NUM, BOOL, ARR, OBJ = "string", "integer", "number", "boolean", "array", "object"

# Schema name -> required property -> its type (a name of this table for a
# nested object the check goes into).
SCHEMAS: dict[str, dict[str, str]] = {
    # ResponseResource.json
    "ResponseResource": {
        "id": STR,
        "object": STR,
        "created_at": INT,
        "completed_at": "integer|null",
        "status": STR,
        "incomplete_details": "IncompleteDetails|null",
        "model": STR,
        "previous_response_id": "string|null",
        "instructions": "string|array|null",
        "output": "[Item]",
        "error": "Error|null",
        "tools": "[Tool]",
        "tool_choice": "string|object",
        "truncation": STR,
        "parallel_tool_calls": BOOL,
        "text": "TextField",
        "top_p": NUM,
        "presence_penalty": NUM,
        "frequency_penalty": NUM,
        "top_logprobs": INT,
        "temperature": NUM,
        "reasoning": "Reasoning|null",
        "user": "string|null",
        "usage": "Usage|null",
        "max_output_tokens": "integer|null",
        "max_tool_calls": "integer|null",
        "store": BOOL,
        "background": BOOL,
        "service_tier": STR,
        "metadata": "any",
        "safety_identifier": "string|null",
        "prompt_cache_key": "string|null",
    },
    # FunctionTool.json (a tool of another type is the client's, as sent)
    "FunctionTool": {
        "type": STR,
        "name": STR,
        "description": "string|null",
        "parameters": "object|null",
        "strict": "boolean|null",
    },
    # Reasoning.json
    "Reasoning": {"effort": "string|null", "summary": "string|null"},
    # TextField.json
    "TextField": {"format": OBJ},
    # Usage.json, InputTokensDetails.json, OutputTokensDetails.json
    "Usage": {
        "input_tokens": INT,
        "output_tokens": INT,
        "total_tokens": INT,
        "input_tokens_details": "InputTokensDetails",
        "output_tokens_details": "OutputTokensDetails",
    },
    "InputTokensDetails": {"cached_tokens": INT},
    "OutputTokensDetails": {"reasoning_tokens": INT},
    # Error.json, IncompleteDetails.json
    "Error": {"code": STR, "message": STR},
    "IncompleteDetails": {"reason": STR},
    # Message.json, OutputTextContent.json
    "Message": {"type": STR, "id": STR, "status": STR, "role": STR, "content": "[Part]"},
    "OutputTextContent": {"type": STR, "text": STR, "annotations": ARR},
    # SummaryTextContent.json
    "SummaryTextContent": {"type": STR, "text": STR},
    # FunctionCall.json
    "FunctionCall": {
        "type": STR,
        "id": STR,
        "call_id": STR,
        "name": STR,
        "arguments": STR,
        "status": STR,
    },
    # ReasoningBody.json
    "ReasoningBody": {"type": STR, "id": STR, "summary": "[Part]"},
    # ErrorPayload.json (an error event's ``error``)
    "ErrorPayload": {"type": STR, "code": "string|null", "message": STR, "param": "string|null"},
}

_EVENT = {"type": STR, "sequence_number": INT}
_AT = {**_EVENT, "item_id": STR, "output_index": INT}
_PART = {**_AT, "content_index": INT}
_SUMMARY = {**_AT, "summary_index": INT}

# Event type -> its required properties: Response*StreamingEvent.json and
# ErrorStreamingEvent.json, for every event flatgate sends.
EVENTS: dict[str, dict[str, str]] = {
    "response.created": {**_EVENT, "response": "ResponseResource"},
    "response.in_progress": {**_EVENT, "response": "ResponseResource"},
    "response.completed": {**_EVENT, "response": "ResponseResource"},
    "response.incomplete": {**_EVENT, "response": "ResponseResource"},
    "response.failed": {**_EVENT, "response": "ResponseResource"},
    "response.output_item.added": {**_EVENT, "output_index": INT, "item": "Item|null"},
    "response.output_item.done": {**_EVENT, "output_index": INT, "item": "Item|null"},
    "response.content_part.added": {**_PART, "part": "Part"},
    "response.content_part.done": {**_PART, "part": "Part"},
    "response.output_text.delta": {**_PART, "delta": STR},
    "response.output_text.done": {**_PART, "text": STR},
    "response.function_call_arguments.delta": {**_AT, "delta": STR},
    "response.function_call_arguments.done": {**_AT, "arguments": STR},
    "response.reasoning_summary_part.added": {**_SUMMARY, "part": "Part"},
    "response.reasoning_summary_part.done": {**_SUMMARY, "part": "Part"},
    "response.reasoning_summary_text.delta": {**_SUMMARY, "delta": STR},
    "response.reasoning_summary_text.done": {**_SUMMARY, "text": STR},
    "error": {**_EVENT, "error": "ErrorPayload"},
}

# ItemField.json, the content unions and Tool.json: the schema an item's, a
# part's or a tool's type names (another type is not checked).
_BY_TYPE = {
    "Item": {"message": "Message", "function_call": "FunctionCall", "reasoning": "ReasoningBody"},
    "Part": {"output_text": "OutputTextContent", "summary_text": "SummaryTextContent"},
    "Tool": {"function": "FunctionTool"},
}
_JSON_TYPES: dict[str, type] = {STR: str, BOOL: bool, ARR: list, OBJ: dict}


def _is(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == INT:
        return type(value) is int
    if kind == NUM:
        return type(value) in (int, float)
    return isinstance(value, _JSON_TYPES[kind])


def _named(value: Any, kind: str, where: str) -> list[str]:
    """``value`` against one alternative of a type: a JSON type, a schema of
    ``SCHEMAS``, ``[X]`` (an array of X), or ``Item`` / ``Part`` / ``Tool``
    (the schema its ``type`` names)."""
    if kind.startswith("["):
        if not isinstance(value, list):
            return [f"{where}: expected an array"]
        return [p for i, v in enumerate(value) for p in _named(v, kind[1:-1], f"{where}.{i}")]
    if kind in _BY_TYPE:
        if not isinstance(value, dict):
            return [f"{where}: expected an object"]
        schema = _BY_TYPE[kind].get(value.get("type", ""))
        return problems(value, schema, where) if schema else []
    if kind in SCHEMAS:
        return problems(value, kind, where)
    return [] if _is(value, kind) else [f"{where}: expected {kind}, got {value!r:.60}"]


def _check(value: Any, kind: str, where: str) -> list[str]:
    if kind == "any":
        return []
    found: list[str] = []
    for alternative in kind.split("|"):
        got = _named(value, alternative, where)
        if not got:
            return []
        found = found or got
    return found


def problems(value: Any, name: str, where: str = "") -> list[str]:
    """What ``value`` lacks of schema ``name`` (``SCHEMAS``), each a path
    and why; ``[]`` when it has it all."""
    if not isinstance(value, dict):
        return [f"{where or name}: expected an object"]
    out: list[str] = []
    for key, kind in SCHEMAS[name].items():
        at = f"{where}.{key}" if where else key
        if key not in value:
            out.append(f"{at}: required")
        else:
            out += _check(value[key], kind, at)
    return out


def stream_problems(raw: bytes) -> list[str]:
    """What an SSE body lacks of the specification: each event's ``event:``
    line its data's ``type``, each event's required fields (``EVENTS``, an
    event of another type is a problem), sequence numbers from 0 up by one,
    and the literal ``[DONE]`` last, once."""
    out: list[str] = []
    blocks = [b for b in raw.decode().split("\n\n") if b and not b.startswith(":")]
    if not blocks or blocks[-1] != "data: [DONE]":
        out.append("the stream does not end with data: [DONE]")
    seq = 0
    for block in blocks[:-1]:
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = json.loads(lines["data"])
        kind = data.get("type")
        if lines.get("event") != kind:
            out.append(f"event: {lines.get('event')} names {kind}")
        if kind not in EVENTS:
            out.append(f"{kind}: not an event of the specification")
            continue
        for key, want in EVENTS[kind].items():
            if key not in data:
                out.append(f"{kind}.{key}: required")
            else:
                out += _check(data[key], want, f"{kind}.{key}")
        if data.get("sequence_number") != seq:
            out.append(f"{kind}: sequence_number {data.get('sequence_number')}, expected {seq}")
        seq += 1
    return out
