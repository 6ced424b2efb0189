"""The protobuf codec: ``schema/gateway.proto``'s twin of the wire request.

Runs on whichever backend ``google.protobuf`` picked (``backend()``; upb, the
C one, is the default). ``FromString`` parses the whole message into the upb
arena; Python objects (``str`` for each string) are made when a field is read,
so ``route`` reads two fields and ``decode`` reads every field a backend needs.
``encode`` maps the edge's ``ChatCompletionRequest`` field by field, as the
FlatBuffers writers do, then serializes. ``translate`` is the edge's op with a
protobuf writer: validate the JSON with the edge's model, map, serialize.
No I/O.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.internal import api_implementation

from benchmarks.codecs.common import (
    DELTA,
    MODELS,
    REQUEST_ID,
    Decoded,
    Delta,
    MessageView,
    ToolView,
    edge_request,
    json_body,
)
from flatgate.edge_translator.catalog import resolve_model
from flatgate.generated import gateway_pb2 as pb
from flatgate.proxy.apis.openai_chat.request import (
    AssistantMessage,
    ChatCompletionRequest,
    ContentPart,
    DeveloperMessage,
    SystemMessage,
    TextPart,
    ToolChoiceFunction,
    ToolMessage,
    UserMessage,
    decode_request,
)

__all__ = [
    "OPS",
    "backend",
    "chunk",
    "decode",
    "encode",
    "inputs",
    "route",
    "to_message",
    "translate",
]

OPS = ("route", "decode", "encode", "chunk", "translate")

_ROLE: dict[type, int] = {
    UserMessage: pb.USER,
    SystemMessage: pb.SYSTEM,
    DeveloperMessage: pb.DEVELOPER,
    AssistantMessage: pb.ASSISTANT,
    ToolMessage: pb.TOOL,
}
_CHOICE = {
    "auto": pb.TOOL_CHOICE_AUTO,
    "none": pb.TOOL_CHOICE_NONE,
    "required": pb.TOOL_CHOICE_REQUIRED,
}


def backend() -> str:
    """The protobuf runtime in use: ``upb``, ``cpp`` or ``python``."""
    return str(api_implementation.Type())


def _text(content: str | list[ContentPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def to_message(
    req: ChatCompletionRequest, *, provider: int = 0, model_name: str = "", request_id: str = ""
) -> Any:
    """``req`` as a ``llmgateway.CompletionRequest`` message (not serialized)."""
    messages = []
    for m in req.messages:
        calls = getattr(m, "tool_calls", None) or ()
        messages.append(
            pb.Message(
                role=_ROLE[type(m)],
                content=_text(m.content),
                name=getattr(m, "name", None),
                tool_calls=[
                    pb.ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                    for c in calls
                ],
                tool_call_id=getattr(m, "tool_call_id", None),
            )
        )
    tools = [
        pb.Tool(
            name=t.function.name,
            description=t.function.description,
            parameters=bytes(t.function.parameters).decode(),
            strict=bool(t.function.strict),
        )
        for t in req.tools or ()
    ]
    choice = req.tool_choice
    choice_name = None
    if isinstance(choice, ToolChoiceFunction):
        mode, choice_name = pb.TOOL_CHOICE_FUNCTION, choice.function.name
    else:
        mode = _CHOICE[choice] if choice else pb.TOOL_CHOICE_UNSET
    stop = req.stop
    metadata = req.metadata
    return pb.CompletionRequest(
        request_id=request_id,
        provider=provider,
        model_name=model_name or req.model,
        max_tokens=req.max_completion_tokens or req.max_tokens or 0,
        temperature=req.temperature,
        tools=tools,
        messages=messages,
        tool_choice=mode,
        tool_choice_name=choice_name,
        top_p=req.top_p,
        stop=[stop] if isinstance(stop, str) else stop,
        seed=req.seed,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        n=req.n or 0,
        stream=bool(req.stream),
        user=req.user,
        metadata=None
        if metadata is None
        else [pb.KeyValue(key=k, value=v) for k, v in sorted(metadata.items())],
        include_usage=bool(req.stream_options and req.stream_options.include_usage),
        parallel_tool_calls=req.parallel_tool_calls,
        response_format=bytes(req.response_format).decode() or None,
    )


def inputs(request: dict[str, Any]) -> dict[str, object]:
    req = edge_request(request)
    wire = to_message(req).SerializeToString()
    return {
        "route": wire,
        "decode": wire,
        "encode": req,
        "chunk": DELTA,
        "translate": json_body(request),
    }


def route(data: bytes) -> tuple[int, str]:
    msg = pb.CompletionRequest.FromString(data)
    return msg.provider, msg.model_name


def _optional(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def decode(data: bytes) -> Decoded:
    req = pb.CompletionRequest.FromString(data)
    messages: list[MessageView] = []
    for m in req.messages:
        views = tuple((c.id, c.name, c.arguments) for c in m.tool_calls)
        messages.append((m.role, m.content, views, m.tool_call_id))
    tools: list[ToolView] = []
    for t in req.tools:
        tools.append((t.name, t.description, t.parameters, t.strict))
    sampling = (
        _optional(req, "temperature"),
        _optional(req, "top_p"),
        req.max_tokens,
        list(req.stop),
        _optional(req, "seed"),
        req.n,
        _optional(req, "presence_penalty"),
        _optional(req, "frequency_penalty"),
        req.stream,
        req.user,
        req.tool_choice,
    )
    return req.model_name, messages, tools, sampling


def encode(request: ChatCompletionRequest) -> bytes:
    out: bytes = to_message(request).SerializeToString()
    return out


def chunk(delta: Delta) -> bytes:
    out: bytes = pb.CompletionChunk(
        request_id=delta.request_id,
        content=delta.content,
        index=delta.index,
        model=delta.model,
    ).SerializeToString()
    return out


def translate(body: bytes) -> bytes:
    req = decode_request(body)
    model = resolve_model(MODELS, req.model)
    msg = to_message(req, provider=model.provider_id, model_name=model.name, request_id=REQUEST_ID)
    out: bytes = msg.SerializeToString()
    return out
