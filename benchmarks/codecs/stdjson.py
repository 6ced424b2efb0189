"""The stdlib ``json`` codec: what a JSON-parsing gateway does.

Every op parses or writes the whole document: there is no way to read the
model without building every dict, list and string of the request first.
The body is the OpenAI request itself, which carries no provider: ``route``
reads one if present and defaults to OpenAI (0), as the wire's absent field
does. No I/O.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks.codecs.common import DELTA, Decoded, Delta, MessageView, ToolView, json_body

__all__ = ["OPS", "chunk", "decode", "encode", "inputs", "route"]

OPS = ("route", "decode", "encode", "chunk")


def inputs(request: dict[str, Any]) -> dict[str, object]:
    body = json_body(request)
    return {"route": body, "decode": body, "encode": request, "chunk": DELTA}


def route(data: bytes) -> tuple[int, str]:
    doc = json.loads(data)
    return doc.get("provider", 0), doc["model"]


def decode(data: bytes) -> Decoded:
    doc = json.loads(data)
    messages: list[MessageView] = []
    for m in doc["messages"]:
        calls = m.get("tool_calls") or ()
        views = tuple((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls)
        messages.append((m["role"], m.get("content"), views, m.get("tool_call_id")))
    tools: list[ToolView] = []
    for t in doc.get("tools") or ():
        f = t["function"]
        tools.append((f["name"], f.get("description"), f.get("parameters"), f.get("strict")))
    get = doc.get
    sampling = (
        get("temperature"),
        get("top_p"),
        get("max_completion_tokens") or get("max_tokens"),
        get("stop"),
        get("seed"),
        get("n"),
        get("presence_penalty"),
        get("frequency_penalty"),
        get("stream"),
        get("user"),
        get("tool_choice"),
    )
    return doc["model"], messages, tools, sampling


def encode(request: dict[str, Any]) -> bytes:
    return json.dumps(request, separators=(",", ":"), ensure_ascii=False).encode()


def chunk(delta: Delta) -> bytes:
    doc: dict[str, object] = {
        "request_id": delta.request_id,
        "content": delta.content,
        "model": delta.model,
    }
    if delta.index:
        doc["index"] = delta.index
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
