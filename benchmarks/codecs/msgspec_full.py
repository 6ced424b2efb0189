"""The ``msgspec`` codec: typed Structs, full decode, reused Decoder/Encoder.

The Structs here are this benchmark's own plain typed mirror of the OpenAI
request, not the edge's ``ChatCompletionRequest``: the edge's model carries
validation constraints and keeps some fields as ``msgspec.Raw`` (which cannot
be encoded back when empty), so it is not a two-way codec. These decode every
field into typed objects and encode back to the same JSON (``omit_defaults``
drops what the client did not send). ``gc=False`` like the edge's Structs: the
Structs themselves are not tracked by the garbage collector. No I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec

from benchmarks.codecs.common import DELTA, Decoded, Delta, MessageView, ToolView, json_body

__all__ = ["OPS", "Chunk", "Request", "chunk", "decode", "encode", "inputs", "route"]

OPS = ("route", "decode", "encode", "chunk")


class FunctionCall(msgspec.Struct, gc=False, omit_defaults=True):
    name: str
    arguments: str


class ToolCall(msgspec.Struct, gc=False, omit_defaults=True):
    id: str
    function: FunctionCall
    type: str = "function"


class Message(msgspec.Struct, gc=False, omit_defaults=True):
    role: str
    content: str | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class Function(msgspec.Struct, gc=False, omit_defaults=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, gc=False, omit_defaults=True):
    function: Function
    type: str = "function"


class StreamOptions(msgspec.Struct, gc=False, omit_defaults=True):
    include_usage: bool = False


class Request(msgspec.Struct, gc=False, omit_defaults=True):
    model: str
    messages: list[Message]
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    n: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None


class Chunk(msgspec.Struct, gc=False, omit_defaults=True):
    """The ``CompletionChunk`` fields a token delta carries, as JSON."""

    request_id: str = ""
    content: str = ""
    index: int = 0
    model: str = ""


_DECODER = msgspec.json.Decoder(Request)
_ENCODER = msgspec.json.Encoder()


def inputs(request: dict[str, Any]) -> dict[str, object]:
    body = json_body(request)
    return {"route": body, "decode": body, "encode": _DECODER.decode(body), "chunk": DELTA}


def route(data: bytes) -> tuple[int, str]:
    # The OpenAI body carries no provider: the default, as the wire's absent field.
    return 0, _DECODER.decode(data).model


def decode(data: bytes) -> Decoded:
    req = _DECODER.decode(data)
    messages: list[MessageView] = []
    for m in req.messages:
        calls = m.tool_calls or ()
        views = tuple((c.id, c.function.name, c.function.arguments) for c in calls)
        messages.append((m.role, m.content, views, m.tool_call_id))
    tools: list[ToolView] = []
    for t in req.tools or ():
        f = t.function
        tools.append((f.name, f.description, f.parameters, f.strict))
    sampling = (
        req.temperature,
        req.top_p,
        req.max_completion_tokens or req.max_tokens,
        req.stop,
        req.seed,
        req.n,
        req.presence_penalty,
        req.frequency_penalty,
        req.stream,
        req.user,
        req.tool_choice,
    )
    return req.model, messages, tools, sampling


def encode(request: Request) -> bytes:
    return _ENCODER.encode(request)


def chunk(delta: Delta) -> bytes:
    return _ENCODER.encode(
        Chunk(
            request_id=delta.request_id,
            content=delta.content,
            index=delta.index,
            model=delta.model,
        )
    )
