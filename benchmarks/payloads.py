"""Seeded, realistic OpenAI-style chat requests for every benchmark.

Owns the one payload generator the codec benchmarks share (STYLE 18):
``make_request(size_bytes, seed)`` returns a plain ``dict`` in the OpenAI Chat
Completions JSON shape (a system prompt, alternating user/assistant turns, an
assistant tool call and its tool result, tool definitions, sampling
parameters), so any codec can take it from there: ``json``/``msgspec`` encode
it as is, a protobuf or FlatBuffers writer maps it field by field.
``to_flatbuffer(d)`` is its ``CompletionRequest`` FlatBuffer: the edge's
validation, then the stock ``flatbuffers.Builder`` with the generated code
(``benchmarks.codecs.stock_writer``, a fresh builder), not the edge's writer.
``to_messages(d)`` is the same conversation as an Anthropic Messages request,
for the rows that compare the two client APIs. ``media_requests()`` are
``CompletionRequest`` FlatBuffers carrying one image part each, by the
image's size (``MEDIA_SIZES``), for the rows that show a read's cost does not
grow with the image.

Deterministic: the same arguments give the same dict and the same bytes. No
I/O. The text is words drawn from a fixed vocabulary, so it compresses and
tokenises roughly like prose; ``size_bytes`` is the total UTF-8 size of the
message contents (the "prompt"), the rest of the request adds a few hundred
bytes on top.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import msgspec

from benchmarks.codecs.common import edge_request
from benchmarks.codecs.stock_writer import write_request_stock
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.writer import RequestWriter
from flatgate.proxy.wire.schema import ApiDialect, PartKind, Provider, Role

__all__ = [
    "MEDIA_SIZES",
    "PROMPT_SIZES",
    "make_request",
    "media_requests",
    "prompt_bytes",
    "to_flatbuffer",
    "to_gemini",
    "to_messages",
]

PROMPT_SIZES = {"1KB": 1 << 10, "16KB": 16 << 10, "128KB": 128 << 10, "1MB": 1 << 20}
# The image sizes of media_requests: 32 MiB is the largest body the services
# take by default.
MEDIA_SIZES = {"1KiB": 1 << 10, "1MiB": 1 << 20, "32MiB": 32 << 20}

_VOCABULARY = (
    "the a of to and in is for that on with as it be by this are from at or an "
    "model request token stream backend latency prompt context answer question "
    "user assistant system tool function call result value table buffer offset "
    "route proxy gateway server client memory cache batch queue worker thread "
    "summarise explain translate compare list describe why how when where which "
    "data report customer order invoice weather city forecast temperature rain "
    "élan café naïve über 東京 データ"
)
_WORDS = tuple(_VOCABULARY.split())
# Keeps no builder: every request is written by a new ``flatbuffers.Builder``.
_FRESH = BuilderPool(size=0)

_TOOL_NAMES = ("get_weather", "search_orders", "lookup_customer", "convert_currency", "run_sql")


def _text(rng: random.Random, size: int) -> str:
    """About ``size`` UTF-8 bytes of prose (at least one word)."""
    words: list[str] = []
    total = 0
    while total < size or not words:
        word = rng.choice(_WORDS)
        words.append(word)
        total += len(word.encode()) + 1
    return " ".join(words)


def _tool(rng: random.Random, i: int) -> dict[str, Any]:
    name = _TOOL_NAMES[i % len(_TOOL_NAMES)] + ("" if i < len(_TOOL_NAMES) else f"_{i}")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": _text(rng, 80),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": _text(rng, 30)},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


def make_request(
    size_bytes: int, seed: int = 0, *, messages: int = 8, tools: int = 1
) -> dict[str, Any]:
    """An OpenAI chat request whose message contents total ~``size_bytes``.

    ``messages`` (>= 4) counts every message: the system prompt, a developer
    note when the count is even, a user turn, an assistant tool call and its
    tool result when ``tools`` > 0, then assistant/user pairs; the request
    ends on a user turn or the tool result. ``tools`` definitions are attached.
    """
    if messages < 4 or tools < 0 or size_bytes < 0:
        raise ValueError("need messages >= 4, tools >= 0, size_bytes >= 0")
    rng = random.Random(seed)
    defs = [_tool(rng, i) for i in range(tools)]
    # The system prompt takes a fifth; the other turns share the rest.
    system_size = size_bytes // 5
    msgs: list[dict[str, Any]] = [{"role": "system", "content": _text(rng, system_size)}]
    rest = messages - 1
    # After the system prompt: a developer note when needed for parity, then a
    # user turn (answered by a tool call and its result when there are tools),
    # then assistant/user pairs: it ends on a user turn (or the tool result).
    roles = ["developer"] if rest % 2 == 0 else []
    roles += ["user", "call", "tool"] if defs else ["user"]
    roles += ["assistant", "user"] * ((rest - len(roles)) // 2)
    turn_size = max(1, (size_bytes - system_size) // (len(roles) - bool(defs)))
    for role in roles:
        if role == "call":
            call_id = f"call_{rng.getrandbits(48):012x}"
            args = msgspec.json.encode({"query": _text(rng, 24), "limit": rng.randint(1, 20)})
            function = {"name": defs[0]["function"]["name"], "arguments": args.decode()}
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                }
            )
        elif role == "tool":
            call_id = msgs[-1]["tool_calls"][0]["id"]
            msgs.append({"role": "tool", "tool_call_id": call_id, "content": _text(rng, turn_size)})
        else:
            msgs.append({"role": role, "content": _text(rng, turn_size)})
    request: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": msgs,
        "temperature": 0.7,
        "top_p": 0.95,
        "max_tokens": 512,
        "stream": True,
        "stream_options": {"include_usage": True},
        "stop": ["\n\nUser:", "<|end|>"],
        "seed": seed,
        "user": f"user-{rng.getrandbits(32):08x}",
        "metadata": {"team": "search", "trace": f"{rng.getrandbits(64):016x}"},
    }
    if defs:
        request["tools"] = defs
        request["tool_choice"] = "auto"
        request["parallel_tool_calls"] = True
    return request


def prompt_bytes(request: dict[str, Any]) -> int:
    """The UTF-8 size of the message contents (what ``size_bytes`` targets)."""
    return sum(len((m.get("content") or "").encode()) for m in request["messages"])


def to_flatbuffer(
    request: dict[str, Any], *, provider: int = 0, request_id: str | None = None
) -> bytes:
    """``request`` (``make_request``'s shape) as a finished ``CompletionRequest``,
    validated by the edge's model and written by the stock builder."""
    return write_request_stock(
        _FRESH,
        edge_request(request),
        provider=provider,
        model_name=request["model"],
        request_id=request_id or "",
    )


def to_messages(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` (``make_request``'s shape) as an Anthropic Messages request
    with the same content: the system prompt (and a developer note) as
    top-level ``system`` text blocks, the assistant's tool call as a
    ``tool_use`` block (its arguments parsed into ``input``), the tool's answer
    as a ``tool_result`` block in a user turn, the tools' ``parameters`` as
    ``input_schema``; ``stop`` -> ``stop_sequences``, ``user`` ->
    ``metadata.user_id``. What the Messages API has no field for (``seed``,
    ``metadata``, ``stream_options``, ``parallel_tool_calls``) is left out."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for m in request["messages"]:
        role, content = m["role"], m.get("content")
        if role in ("system", "developer"):
            system.append({"type": "text", "text": content})
        elif role == "tool":
            result = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": content}
            turns.append({"role": "user", "content": [result]})
        elif m.get("tool_calls"):
            uses = [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": msgspec.json.decode(c["function"]["arguments"]),
                }
                for c in m["tool_calls"]
            ]
            turns.append({"role": "assistant", "content": uses})
        else:
            turns.append({"role": role, "content": content})
    out: dict[str, Any] = {
        "model": request["model"],
        "max_tokens": request["max_tokens"],
        "system": system,
        "messages": turns,
        "temperature": request["temperature"],
        "top_p": request["top_p"],
        "stop_sequences": request["stop"],
        "metadata": {"user_id": request["user"]},
        "stream": request["stream"],
    }
    if request.get("tools"):
        out["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
                "strict": t["function"]["strict"],
            }
            for t in request["tools"]
        ]
        out["tool_choice"] = {"type": request["tool_choice"]}
    return out


def to_responses(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` (``make_request``'s shape) as an OpenAI Responses request
    with the same content: the system prompt as ``instructions``, the other
    turns as ``input`` items (a developer note and the user and assistant
    turns as ``message`` items, the assistant's tool call as a
    ``function_call`` item, the tool's answer as a ``function_call_output``),
    the tools as function tools; ``max_tokens`` -> ``max_output_tokens``.
    What the Responses API has no field for (``stop``, ``seed``) is left out;
    ``store`` is false, as agents send it."""
    instructions = ""
    items: list[dict[str, Any]] = []
    for m in request["messages"]:
        role, content = m["role"], m.get("content")
        if role == "system" and not instructions:
            instructions = content
        elif role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": content}
            )
        elif m.get("tool_calls"):
            items.extend(
                {
                    "type": "function_call",
                    "call_id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in m["tool_calls"]
            )
        else:
            items.append({"type": "message", "role": role, "content": content})
    out: dict[str, Any] = {
        "model": request["model"],
        "instructions": instructions,
        "input": items,
        "max_output_tokens": request["max_tokens"],
        "temperature": request["temperature"],
        "top_p": request["top_p"],
        "metadata": request["metadata"],
        "user": request["user"],
        "stream": request["stream"],
        "store": False,
    }
    if request.get("tools"):
        out["tools"] = [
            {
                "type": "function",
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "parameters": t["function"]["parameters"],
                "strict": t["function"]["strict"],
            }
            for t in request["tools"]
        ]
        out["tool_choice"] = request["tool_choice"]
    return out


def to_gemini(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` (``make_request``'s shape) as a Gemini ``generateContent``
    request with the same content: the system prompt and the developer note
    as ``systemInstruction`` text parts, the user turns as ``user`` contents,
    the assistant's as ``model`` contents (its tool call a ``functionCall``
    part, its arguments parsed into ``args``), the tool's answer a
    ``functionResponse`` part in a ``user`` content (``{"output": ...}``),
    the tools as ``functionDeclarations`` with ``parametersJsonSchema``;
    ``temperature``, ``top_p``, ``max_tokens``, ``stop`` and ``seed`` in
    ``generationConfig``. The model and ``stream`` are the URL's, not the
    body's; what Gemini has no field for (``user``, ``metadata``) is left
    out."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for m in request["messages"]:
        role, content = m["role"], m.get("content")
        if role in ("system", "developer"):
            system.append({"text": content})
        elif role == "tool":
            call = m["tool_call_id"]
            answer = {"id": call, "name": names[call], "response": {"output": content}}
            contents.append({"role": "user", "parts": [{"functionResponse": answer}]})
        elif m.get("tool_calls"):
            parts = []
            for c in m["tool_calls"]:
                names[c["id"]] = c["function"]["name"]
                args = msgspec.json.decode(c["function"]["arguments"])
                parts.append(
                    {"functionCall": {"id": c["id"], "name": c["function"]["name"], "args": args}}
                )
            contents.append({"role": "model", "parts": parts})
        else:
            role = "model" if role == "assistant" else "user"
            contents.append({"role": role, "parts": [{"text": content}]})
    out: dict[str, Any] = {
        "contents": contents,
        "systemInstruction": {"parts": system},
        "generationConfig": {
            "temperature": request["temperature"],
            "topP": request["top_p"],
            "maxOutputTokens": request["max_tokens"],
            "stopSequences": request["stop"],
            "seed": request["seed"],
        },
    }
    if request.get("tools"):
        out["tools"] = [
            {
                "functionDeclarations": [
                    {
                        "name": t["function"]["name"],
                        "description": t["function"]["description"],
                        "parametersJsonSchema": t["function"]["parameters"],
                    }
                    for t in request["tools"]
                ]
            }
        ]
        out["toolConfig"] = {"functionCallingConfig": {"mode": "AUTO"}}
    return out


def media_requests(sizes: dict[str, int] | None = None) -> dict[str, bytes]:
    """By label, a ``CompletionRequest`` (flatgate's writer) of a system prompt
    and a user turn whose parts are a line of text and one image of that many
    bytes: a PNG's signature and header (1568 x 1000 px), then zeros."""
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", 1568, 1000)
    out = {}
    for label, size in (sizes or MEDIA_SIZES).items():
        image = ContentPart(
            kind=int(PartKind.IMAGE),
            data=header + bytes(max(0, size - len(header))),
            media_type="image/png",
            dialect=int(ApiDialect.ANTHROPIC_MESSAGES),
        )
        text = ContentPart(kind=int(PartKind.TEXT), text="What is in this screenshot?")
        w = RequestWriter()
        w.strings(
            request_id="bench-1",
            model_name="claude-sonnet-4-5",
            tenant="",
            user="",
            tool_choice_name="",
            response_format=b"",
        )
        w.messages(
            [
                (int(Role.System), b"You are a careful assistant."),
                (int(Role.User), b"", b"", b"", (), False, (), (text, image)),
            ]
        )
        out[label] = w.finish(provider=int(Provider.Anthropic), max_tokens=1024, stream=True)
    return out
