"""The stub's Converse side: a Converse or ConverseStream request read into
a ``StubRequest``, and the echo (``dialect.Answer``) written as Bedrock
writes its answers. The ``bedrock`` Wire (``stub``) routes
``/model/{modelId}/converse`` and ``/converse-stream`` here.

``parse_converse`` decodes the body with the one model of the API
(``apis.bedrock_converse``) and checks what Bedrock checks before a model
runs: ``messages`` given and not empty, starting with a user turn, roles
alternating between ``user`` and ``assistant``, each message with content,
each content block a union of exactly one member, ``toolUse`` only from the
assistant and ``toolResult`` only from the user, both only with a
``toolConfig``, a ``toolChoice`` only with tools, ``maxTokens`` at least 1,
``temperature`` and ``topP`` from 0 to 1, image formats png, jpeg, gif or
webp and document formats as the service model lists them. A failure is
Bedrock's 400: ``{"message": "..."}`` with ``x-amzn-errortype:
ValidationException`` (``Rejected``). What the echo reads: the system
blocks (a System message), each message's text (its images, documents and
audio described with their digests, ``dialect.described``, as the other
stubs do), a tool's result as a Tool message, ``maxTokens``,
``stopSequences``, the forced tool (``toolChoice.tool``), the offered tools,
and ``additionalModelRequestFields.thinking`` (enabled: the answer thinks
first, a reasoning block signed as the Messages stub signs one).

``render_whole`` writes a ``Converse`` answer; ``render_stream`` (or the
``ConverseRendering`` parts the server paces: ``opening``, one ``steps``
frame per delta, ``closing``, ``error``) writes the event-stream messages
AWS documents: ``messageStart``, the reasoning block (when thinking), then
``contentBlockDelta`` text per delta or a ``contentBlockStart`` with
``toolUse`` and ``toolUse.input`` fragments, ``contentBlockStop``,
``messageStop`` (``stopReason``), ``metadata`` (usage and latency). A
mid-stream ``error`` fault is a ``modelStreamErrorException``. Per delta
only the delta's text is JSON-encoded; the headers are encoded once. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from flatgate.proxy.apis.bedrock_converse.answer import (
    STOP_REASON_OF,
    Converse,
    Metrics,
    Output,
    TokenUsage,
)
from flatgate.proxy.apis.bedrock_converse.blocks import (
    AUDIO_FORMATS,
    DOCUMENT_FORMATS,
    IMAGE_FORMATS,
    ContentBlock,
    Message,
    ReasoningContent,
    ReasoningText,
    ToolUseBlock,
)
from flatgate.proxy.apis.bedrock_converse.request import ConverseRequest, decode_request
from flatgate.proxy.backends.anthropic.stub_request import signature
from flatgate.proxy.backends.bedrock.eventstream import (
    CONTENT_TYPE,
    encode_frame,
    encode_headers,
)
from flatgate.proxy.backends.dialect import (
    Answer,
    OfferedTool,
    Rejected,
    Reply,
    StubRequest,
    described,
    split_model,
)
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import JSON, PartKind, Role

__all__ = [
    "ConverseRendering",
    "error_reply",
    "parse_converse",
    "render_stream",
    "render_whole",
]

_enc = msgspec.json.encode
_MEDIA = {
    "pdf": "application/pdf",
    "csv": "text/csv",
    "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "html": "text/html",
    "txt": "text/plain",
    "md": "text/markdown",
}


def error_reply(status: int, kind: str, message: str) -> Reply:
    """An error as Bedrock answers one: its type in ``x-amzn-errortype``."""
    headers = [("content-type", JSON), ("x-amzn-errortype", kind)]
    return Reply(status, headers, _enc({"message": message}))


def _invalid(message: str) -> Rejected:
    return Rejected(error_reply(400, "ValidationException", message))


def _constraint(path: str, rule: str) -> Rejected:
    return _invalid(
        f"1 validation error detected: Value at '{path}' failed to satisfy constraint: {rule}"
    )


def _set(value: object) -> bool:
    # An absent Raw member is the empty ``Raw()``, not None.
    return value is not None and not (isinstance(value, msgspec.Raw) and not len(value))


def _members(block: msgspec.Struct) -> list[str]:
    """The members of a union that are set (one, when it is well formed)."""
    return [f for f in block.__struct_fields__ if _set(getattr(block, f))]


def _part(block: ContentBlock, at: str) -> ContentPart | None:
    """An image's, document's or audio's block as the part the echo describes."""
    if block.image is not None:
        fmt = block.image.format
        if fmt not in IMAGE_FORMATS:
            raise _constraint(f"{at}.image.format", "Member must satisfy enum value set")
        data = block.image.source.data or b""
        return ContentPart(kind=int(PartKind.IMAGE), data=data, media_type=f"image/{fmt}")
    if block.document is not None:
        doc = block.document
        if doc.format is not None and doc.format not in DOCUMENT_FORMATS:
            raise _constraint(f"{at}.document.format", "Member must satisfy enum value set")
        media = _MEDIA.get(doc.format or "txt", "")
        src = doc.source
        if src.data is not None:
            return ContentPart(kind=int(PartKind.DOCUMENT), data=src.data, media_type=media)
        text = src.text if src.text is not None else "".join(c.text for c in src.content or ())
        return ContentPart(kind=int(PartKind.DOCUMENT), text=text, media_type=media)
    if block.audio is not None:
        fmt = block.audio.format
        if fmt not in AUDIO_FORMATS:
            raise _constraint(f"{at}.audio.format", "Member must satisfy enum value set")
        data = block.audio.source.data or b""
        return ContentPart(kind=int(PartKind.AUDIO), data=data, media_type=f"audio/{fmt}")
    return None


def _message(i: int, m: Message, tools: bool, out: list[tuple[int, str]]) -> None:
    where = f"messages.{i}"
    if not m.content:
        raise _constraint(f"{where}.content", "Member must have length greater than or equal to 1")
    parts: list[ContentPart] = []
    media = False
    for j, block in enumerate(m.content):
        at = f"{where}.content.{j}"
        set_ = _members(block)
        if len(set_) != 1:
            raise _invalid(f"{at}: a content block must have exactly one member, not {set_}")
        if block.text is not None:
            parts.append(ContentPart(kind=int(PartKind.TEXT), text=block.text))
        elif block.tool_use is not None or block.tool_result is not None:
            if not tools:
                raise _invalid(
                    "The toolConfig field must be defined when using toolUse and toolResult "
                    "content blocks."
                )
            if block.tool_use is not None and m.role != "assistant":
                raise _invalid(f"{at}: toolUse blocks are only allowed in assistant messages")
            if block.tool_result is not None:
                if m.role != "user":
                    raise _invalid(f"{at}: toolResult blocks are only allowed in user messages")
                texts = [c.text for c in block.tool_result.content if c.text is not None]
                out.append((Role.Tool, "".join(texts)))
        else:
            part = _part(block, at)
            if part is not None:
                media = True
                parts.append(part)
    if not parts:
        return
    role = Role.User if m.role == "user" else Role.Assistant
    if media:
        out.append((role, described(parts)))
    else:
        out.append((role, "".join(p.text for p in parts)))


def _thinking(r: ConverseRequest) -> dict[str, object] | None:
    extra = r.additional_model_request_fields
    if not len(extra):
        return None
    try:
        fields = msgspec.json.decode(extra, type=dict[str, object])
    except msgspec.DecodeError:
        raise _invalid("additionalModelRequestFields: not a JSON object") from None
    thinking = fields.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        return thinking
    return None


def parse_converse(
    body: bytes, *, model: str = "", request_id: str = "", stream: bool = False
) -> StubRequest:
    """A Converse body (``model``: the URL's model id, with its fault suffix;
    ``stream``: the ConverseStream path) as the echo reads it; ``Rejected``
    with Bedrock's 400 when Bedrock would refuse it."""
    try:
        r = decode_request(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _invalid(f"Malformed input request: {exc}") from None
    if not r.messages:
        raise _constraint("messages", "Member must not be null and must not be empty")
    tools = r.tool_config
    messages: list[tuple[int, str]] = []
    for j, s in enumerate(r.system or ()):
        if s.text is not None:
            if not s.text:
                raise _constraint(f"system.{j}.text", "Member must have length >= 1")
            messages.append((Role.System, s.text))
    previous = ""
    for i, m in enumerate(r.messages):
        if m.role not in ("user", "assistant"):
            raise _constraint(f"messages.{i}.role", "Member must satisfy enum value set")
        if i == 0 and m.role != "user":
            raise _invalid("A conversation must start with a user message.")
        if m.role == previous:
            raise _invalid(
                "A conversation must alternate between user and assistant roles. "
                f"Two {m.role} messages in a row: messages.{i - 1} and messages.{i}."
            )
        previous = m.role
        _message(i, m, tools is not None, messages)
    forced = ""
    offered: tuple[OfferedTool, ...] = ()
    if tools is not None:
        if not tools.tools:
            raise _constraint("toolConfig.tools", "Member must have length >= 1")
        specs = [t.tool_spec for t in tools.tools if t.tool_spec is not None]
        offered = tuple(OfferedTool(s.name, bytes(s.input_schema.json).decode()) for s in specs)
        choice = tools.tool_choice
        if choice is not None:
            if len(_members(choice)) != 1:
                raise _invalid("toolConfig.toolChoice: exactly one of auto, any, tool")
            if choice.tool is not None:
                forced = choice.tool.name
    config = r.inference_config
    max_tokens = 0
    stop: tuple[str, ...] = ()
    if config is not None:
        if config.max_tokens is not None:
            if config.max_tokens < 1:
                raise _constraint("inferenceConfig.maxTokens", "Member must be >= 1")
            max_tokens = config.max_tokens
        for name, value in (("temperature", config.temperature), ("topP", config.top_p)):
            if value is not None and not 0 <= value <= 1:
                raise _constraint(f"inferenceConfig.{name}", "Member must be from 0 to 1")
        stop = tuple(config.stop_sequences or ())
    thinking = _thinking(r)
    name, fault, after = split_model(model)
    return StubRequest(
        request_id=request_id,
        model=name,
        messages=tuple(messages),
        max_tokens=max_tokens,
        forced_tool=forced,
        stream=stream,
        metadata=dict(r.request_metadata or {}),
        fault=fault,
        fault_after=after,
        stop=stop,
        params={"thinking": thinking} if thinking is not None else {},
        offered=offered,
    )


def _thought(req: StubRequest) -> tuple[str, str] | None:
    """The answer's reasoning (text, signature) when the request thinks."""
    if "thinking" not in req.params:
        return None
    words = len(req.last_user.split())
    text = f"The user wrote {words} words; I repeat them back."
    return text, signature(text)


def _stop_reason(ans: Answer) -> str:
    if ans.stop_sequence:
        return "stop_sequence"
    return STOP_REASON_OF.get(ans.finish, "end_turn")


def _usage(ans: Answer) -> TokenUsage:
    u = ans.usage
    prompt, output = u.prompt_tokens, u.completion_tokens
    return TokenUsage(prompt, output, prompt + output)


def render_whole(req: StubRequest, ans: Answer) -> bytes:
    """The echo as a ``Converse`` answer."""
    blocks: list[ContentBlock] = []
    thought = _thought(req)
    if thought is not None:
        text = ReasoningText(*thought)
        blocks.append(ContentBlock(reasoning_content=ReasoningContent(reasoning_text=text)))
    call = ans.tool_call
    if call is not None:
        use = ToolUseBlock(call.id, call.name, msgspec.Raw(call.arguments.encode()))
        blocks.append(ContentBlock(tool_use=use))
    else:
        blocks.append(ContentBlock(text=ans.text))
    out = Converse(
        output=Output(Message("assistant", blocks)),
        stop_reason=_stop_reason(ans),
        usage=_usage(ans),
        metrics=Metrics(0),
    )
    return _enc(out)


def _head(kind: str) -> bytes:
    return encode_headers(
        [(":event-type", kind), (":content-type", JSON), (":message-type", "event")]
    )


_HEADS = {
    kind: _head(kind)
    for kind in (
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    )
}
_DELTA = _HEADS["contentBlockDelta"]
# A text delta's payload before its JSON string, by block index (0, or 1
# after a reasoning block): per token only the text is encoded.
_TEXT_DELTA = tuple(b'{"contentBlockIndex":%d,"delta":{"text":' % i for i in (0, 1))
_ERROR_HEAD = encode_headers(
    [
        (":exception-type", "modelStreamErrorException"),
        (":content-type", JSON),
        (":message-type", "exception"),
    ]
)


def _frame(kind: str, payload: object) -> bytes:
    return encode_frame(_HEADS[kind], _enc(payload))


class ConverseRendering:
    """One streamed echo as ConverseStream's event-stream messages."""

    content_type = CONTENT_TYPE

    __slots__ = ("_answer", "_index", "_req")

    def __init__(self, req: StubRequest, ans: Answer) -> None:
        self._req = req
        self._answer = ans
        # The answer's main block: 0, or 1 after a reasoning block.
        self._index = 0 if "thinking" not in req.params else 1

    def opening(self) -> bytes:
        out = [_frame("messageStart", {"role": "assistant"})]
        thought = _thought(self._req)
        if thought is not None:
            text, sig = thought
            out.append(_frame("contentBlockDelta", _reasoning_delta({"text": text})))
            out.append(_frame("contentBlockDelta", _reasoning_delta({"signature": sig})))
            out.append(_frame("contentBlockStop", {"contentBlockIndex": 0}))
        call = self._answer.tool_call
        if call is not None:
            start = {"toolUse": {"toolUseId": call.id, "name": call.name}}
            out.append(
                _frame("contentBlockStart", {"contentBlockIndex": self._index, "start": start})
            )
        return b"".join(out)

    def steps(self) -> Iterator[bytes]:
        i = self._index
        call = self._answer.tool_call
        if call is not None:
            for fragment in call.fragments():
                payload = {"contentBlockIndex": i, "delta": {"toolUse": {"input": fragment}}}
                yield encode_frame(_DELTA, _enc(payload))
            return
        head = _TEXT_DELTA[i]
        for text in self._answer.deltas:
            yield encode_frame(_DELTA, head + _enc(text) + b"}}")

    def closing(self) -> bytes:
        ans = self._answer
        return b"".join(
            [
                _frame("contentBlockStop", {"contentBlockIndex": self._index}),
                _frame("messageStop", {"stopReason": _stop_reason(ans)}),
                _frame("metadata", {"usage": _usage(ans), "metrics": Metrics(0)}),
            ]
        )

    def error(self) -> bytes:
        payload = {"message": "The stub's model failed mid-stream (the error fault)."}
        return encode_frame(_ERROR_HEAD, _enc(payload))


def _reasoning_delta(delta: dict[str, str]) -> dict[str, object]:
    return {"contentBlockIndex": 0, "delta": {"reasoningContent": delta}}


def render_stream(req: StubRequest, ans: Answer) -> Iterator[bytes]:
    """The echo as ConverseStream's frames, opening to closing (no faults)."""
    r = ConverseRendering(req, ans)
    yield r.opening()
    yield from r.steps()
    yield r.closing()
