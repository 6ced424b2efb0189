"""OpenAI request -> ``CompletionRequest`` FlatBuffer: the OpenAI edge's hot path.

Owns ``write_request``: a decoded ``ChatCompletionRequest`` (docs/design.md,
"The wire contract"; what each field means on the wire is ``mapping``) as a
``CompletionRequest`` buffer, through the edges' shared writer
(``wire.request.writer.RequestWriter``).

Conventions (besides the writer's): metadata is sorted by key
(``KeyValue.key`` is the table's key), ``max_completion_tokens`` wins over
``max_tokens``, text content parts are joined, and a message with nothing but
a role and text takes the writer's one-pack path; a message with an image,
audio or a file part carries all its content as the wire's content parts
(``apis.openai_chat.parts``: data URLs and base64 decoded there, once; a
part that does not decode is ``InvalidRequest`` naming it), and no text;
the fields with no slot travel as the extras (``request.extras_json``).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from flatgate.edge_translator.openai.mapping import (
    ROLE_OF,
    extras_of,
    max_tokens_of,
    reasoning_of,
    stops_of,
    text_of,
    tool_choice_of,
)
from flatgate.proxy.apis.openai_chat.parts import has_media, parts_of
from flatgate.proxy.apis.openai_chat.request import (
    AssistantMessage,
    ChatCompletionRequest,
    ToolCall,
    ToolMessage,
    extras_json,
)
from flatgate.proxy.wire.request.writer import Call, RequestWriter, WireMessage
from flatgate.proxy.wire.schema import ApiDialect

__all__ = ["write_request"]

_CHAT = int(ApiDialect.OPENAI_CHAT)


def _calls(calls: Sequence[ToolCall]) -> list[Call]:
    return [(c.id.encode(), c.function.name.encode(), c.function.arguments.encode()) for c in calls]


def write_request(
    req: ChatCompletionRequest,
    *,
    provider: int,
    model_name: str,
    tenant: str = "",
    request_id: str = "",
    fields: dict[str, msgspec.Raw] | None = None,
) -> bytes:
    """``req`` as a ``CompletionRequest`` buffer (the schema-specific writer),
    its extras (dialect ``OpenAIChat``) its known extra fields and the
    unknown ones of ``fields`` (``request.Decoded.fields``)."""
    extras = extras_json(req, fields)
    w = RequestWriter()
    choice, choice_name = tool_choice_of(req)
    rf = bytes(req.response_format)
    w.strings(
        request_id=request_id,
        model_name=model_name,
        tenant=tenant,
        user=req.user or "",
        tool_choice_name=choice_name,
        response_format=b"" if rf == b"null" else rf,
        extras=extras,
    )

    wire: list[WireMessage] = []
    add = wire.append
    role_of = ROLE_OF
    for i, msg in enumerate(req.messages):
        kind = type(msg)
        content = msg.content
        if type(content) is list and has_media(content):
            # A user or tool message with an image, audio or a file: all of
            # its content as parts, in the client's order.
            name, call_id, _ = extras_of(msg)
            parts = parts_of(content, f"messages.[{i}].content")
            add((role_of[kind], b"", name, call_id, (), False, (), parts))
            continue
        data = (content if type(content) is str else text_of(content)).encode()
        if kind is AssistantMessage and (
            msg.refusal or msg.reasoning_content or msg.reasoning  # type: ignore[union-attr]
        ):
            assert isinstance(msg, AssistantMessage)
            name, _, calls = extras_of(msg)
            # The refusal after the text, as a refusal part's; the reasoning
            # as the message's reasoning part.
            data += (msg.refusal or "").encode()
            add((role_of[kind], data, name, b"", _calls(calls), False, reasoning_of(msg)))
        elif (
            not data
            or kind is ToolMessage
            or msg.name
            or (kind is AssistantMessage and msg.tool_calls)  # type: ignore[union-attr]
        ):
            name, call_id, calls = extras_of(msg)
            add((role_of[kind], data, name, call_id, _calls(calls), False))
        else:
            add((role_of[kind], data))
    w.messages(wire)

    if req.tools:
        specs = []
        for tool in req.tools:
            fn = tool.function
            params = bytes(fn.parameters)
            specs.append(
                (
                    fn.name.encode(),
                    (fn.description or "").encode(),
                    b"" if params == b"null" else params,
                    bool(fn.strict),
                )
            )
        w.tools(specs)
    if req.stop:
        stops = [x.encode() for x in stops_of(req)]
        if stops:
            w.stops(stops)
    if req.metadata:
        w.metadata(req.metadata)

    stream = bool(req.stream)
    options = req.stream_options
    return w.finish(
        provider=provider,
        tool_choice=choice,
        max_tokens=max_tokens_of(req),
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k or 0,
        seed=req.seed,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        n=req.n or 0,
        stream=stream,
        include_usage=stream and options is not None and options.include_usage,
        parallel_tool_calls=req.parallel_tool_calls,
        extras_dialect=_CHAT if extras else 0,
    )
