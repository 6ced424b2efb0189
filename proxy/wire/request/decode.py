"""Reading a whole ``CompletionRequest`` into Python values, for the backends that
need it decoded (the JSON adapters), fast.

``read_request`` takes a buffer that ``verify_request`` has accepted and
returns a ``Request``. It follows offsets itself with ``struct`` (the
generated object API allocates a table object per access and copies every
string twice), trusting the bounds the verifier checked, and decodes every
string as strict UTF-8: a string that is not raises ``MalformedBuffer`` (the
verifier does not look at string bytes). A table or string that many offsets
share is decoded once per reference, so what it builds is bounded by what the
verifier's ``max_bytes`` let through, not by the buffer's size.

The message, tool and tool-call structs have the OpenAI Chat Completions
shape (the schema's field names are OpenAI's), so an OpenAI-compatible request
embeds them as they are; other adapters map them. Optional scalars absent from
the buffer are ``None``; absent strings are ``""``.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from flatgate.proxy.wire.buffer import U32, UNPACK, MalformedBuffer, elements, entries
from flatgate.proxy.wire.layout import (
    COMPLETION_REQUEST,
    CONTENT_PART,
    KEY_VALUE,
    MESSAGE,
    REASONING_PART,
    TOOL,
    TOOL_CALL,
    FieldKind,
    Table,
)
from flatgate.proxy.wire.parts import ContentPart, ReasoningPart
from flatgate.proxy.wire.schema import Role

__all__ = [
    "ContentPart",
    "Function",
    "FunctionCall",
    "Message",
    "Request",
    "Tool",
    "ToolCall",
    "read_request",
]

_ROLE_NAMES = {int(r): r.name.lower() for r in Role}
_ASSISTANT = int(Role.Assistant)


class FunctionCall(msgspec.Struct, gc=False):
    name: str
    arguments: str


class ToolCall(msgspec.Struct, gc=False):
    id: str
    function: FunctionCall
    type: str = "function"


class Message(msgspec.Struct, gc=False, omit_defaults=True):
    """One message; ``content`` is ``None`` only for an assistant turn without text.

    ``is_error`` (a failed tool call's result) is not an OpenAI field: an
    adapter that embeds messages as they are must map it first.
    """

    role: str
    content: str | None = None
    name: str = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str = ""
    is_error: bool = False
    # Role assistant only: the reasoning to send back (not an OpenAI chat
    # field: an adapter that embeds messages as they are must map it first).
    reasoning: list[ReasoningPart] | None = None
    # The content's parts when it holds more than text (then ``content`` is
    # "" or None): not OpenAI's shape, so an adapter maps them.
    parts: list[ContentPart] | None = None


class Function(msgspec.Struct, gc=False, omit_defaults=True):
    name: str
    description: str = ""
    # The JSON Schema of the parameters, as the caller wrote it (not parsed).
    parameters: msgspec.Raw | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, gc=False):
    function: Function
    type: str = "function"


class Request(msgspec.Struct):
    """A decoded ``CompletionRequest``."""

    model_name: str
    messages: list[Message]
    request_id: str = ""
    provider: int = 0
    max_tokens: int = 0
    temperature: float | None = None
    tools: list[Tool] = []
    tool_choice: int = 0
    tool_choice_name: str = ""
    top_p: float | None = None
    stop: list[str] = []
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    n: int = 0
    stream: bool = False
    user: str = ""
    tenant: str = ""
    metadata: dict[str, str] = {}
    include_usage: bool = False
    parallel_tool_calls: bool | None = None
    # response_format's JSON text ("" when absent).
    response_format: str = ""
    # 0: not given.
    top_k: int = 0
    # The client's fields with no slot, one JSON object text ("": none), in
    # the dialect ``extras_dialect`` (``schema.ApiDialect``) names.
    extras: str = ""
    extras_dialect: int = 0


def _slots(t: Table, *names: str) -> tuple[int, ...]:
    return tuple(t.slot(n) for n in names)


_TYPES_OF: dict[str, type] = {"f": float, "d": float, "?": bool}
_R_MODEL, _R_MESSAGES, _R_TOOLS, _R_STOP, _R_METADATA = _slots(
    COMPLETION_REQUEST, "model_name", "messages", "tools", "stop", "metadata"
)
_M_ROLE, _M_CONTENT, _M_NAME, _M_CALLS, _M_CALL_ID, _M_IS_ERROR, _M_REASONING, _M_PARTS = _slots(
    MESSAGE,
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "is_error",
    "reasoning",
    "parts",
)
# A content part: its strings (every field but the scalars and data), read
# by name; its scalars with their readers.
_CP_FIELDS = len(CONTENT_PART.fields)
_CP_DATA = CONTENT_PART.slot("data")
_CP_STRINGS = tuple(
    (i, f.name) for i, f in enumerate(CONTENT_PART.specs) if f.kind == FieldKind.STRING
)
_CP_SCALARS = tuple(
    (i, f.name, UNPACK[f.fmt], _TYPES_OF.get(f.fmt, int))
    for i, f in enumerate(CONTENT_PART.specs)
    if f.kind == FieldKind.SCALAR
)
_P_TEXT, _P_OPAQUE, _P_DIALECT, _P_ID, _P_REDACTED = _slots(
    REASONING_PART, "text", "opaque", "dialect", "id", "redacted"
)
_P_FIELDS = len(REASONING_PART.fields)
_DIALECT = UNPACK[REASONING_PART.spec("dialect").fmt]
_REDACTED = UNPACK[REASONING_PART.spec("redacted").fmt]
_M_FIELDS = len(MESSAGE.fields)
_C_ID, _C_NAME, _C_ARGS = _slots(TOOL_CALL, "id", "name", "arguments")
_C_FIELDS = len(TOOL_CALL.fields)
_T_NAME, _T_DESC, _T_PARAMS, _T_STRICT = _slots(TOOL, "name", "description", "parameters", "strict")
_T_FIELDS = len(TOOL.fields)
_K_KEY, _K_VALUE = _slots(KEY_VALUE, "key", "value")
_K_FIELDS = len(KEY_VALUE.fields)
_ROOT_FIELDS = len(COMPLETION_REQUEST.fields)
_ROLE = UNPACK[MESSAGE.spec("role").fmt]
_IS_ERROR = UNPACK[MESSAGE.spec("is_error").fmt]
_STRICT = UNPACK[TOOL.spec("strict").fmt]
# Root fields read in a loop (every string but model_name, which the Request
# is made with, then every scalar, with its reader and Python type); each is
# the Request attribute of the same name.
_ROOT_STRINGS = tuple(
    (i, f.name)
    for i, f in enumerate(COMPLETION_REQUEST.specs)
    if f.kind == FieldKind.STRING and f.name != "model_name"
)
_TYPES = _TYPES_OF
_ROOT_SCALARS: tuple[tuple[int, str, Callable[..., tuple[Any, ...]], type], ...] = tuple(
    (i, f.name, UNPACK[f.fmt], _TYPES.get(f.fmt, int))
    for i, f in enumerate(COMPLETION_REQUEST.specs)
    if f.kind == FieldKind.SCALAR
)


def _field_text(buf: bytes | memoryview, view: memoryview, pos: int, off: int) -> str:
    """The string field at ``pos + off`` (``off`` non-zero)."""
    at = pos + off
    s = at + U32(buf, at)[0]
    n = U32(buf, s)[0]
    try:
        return str(view[s + 4 : s + 4 + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedBuffer(f"string at offset {s}: not UTF-8 ({exc.reason})") from None


def _text_field(buf: bytes | memoryview, view: memoryview, pos: int, off: int) -> str:
    """The string field at ``pos + off``, or ``""`` when absent (``off`` 0)."""
    return _field_text(buf, view, pos, off) if off else ""


def _reasoning(buf: bytes | memoryview, view: memoryview, pos: int) -> ReasoningPart:
    f = entries(buf, pos, _P_FIELDS)
    opaque = b""
    off = f[_P_OPAQUE]
    if off:
        at = pos + off
        v = at + U32(buf, at)[0]
        opaque = bytes(view[v + 4 : v + 4 + U32(buf, v)[0]])
    off = f[_P_DIALECT]
    dialect = _DIALECT(buf, pos + off)[0] if off else 0
    off = f[_P_REDACTED]
    redacted = bool(_REDACTED(buf, pos + off)[0]) if off else False
    return ReasoningPart(
        _text_field(buf, view, pos, f[_P_TEXT]),
        opaque,
        dialect,
        _text_field(buf, view, pos, f[_P_ID]),
        redacted,
    )


def _content_part(buf: bytes | memoryview, view: memoryview, pos: int) -> ContentPart:
    f = entries(buf, pos, _CP_FIELDS)
    values: dict[str, Any] = {}
    for slot, name in _CP_STRINGS:
        off = f[slot]
        if off:
            values[name] = _field_text(buf, view, pos, off)
    for slot, name, reader, kind in _CP_SCALARS:
        off = f[slot]
        if off:
            values[name] = kind(reader(buf, pos + off)[0])
    off = f[_CP_DATA]
    if off:
        at = pos + off
        v = at + U32(buf, at)[0]
        values["data"] = bytes(view[v + 4 : v + 4 + U32(buf, v)[0]])
    return ContentPart(**values)


def _message(buf: bytes | memoryview, view: memoryview, pos: int) -> Message:
    f = entries(buf, pos, _M_FIELDS)
    off = f[_M_ROLE]
    role = _ROLE(buf, pos + off)[0] if off else 0
    off = f[_M_CONTENT]
    content: str | None = _field_text(buf, view, pos, off) if off else ""
    off = f[_M_NAME]
    name = _field_text(buf, view, pos, off) if off else ""
    off = f[_M_CALL_ID]
    call_id = _field_text(buf, view, pos, off) if off else ""
    calls = None
    off = f[_M_CALLS]
    if off:
        calls = []
        for c in elements(buf, pos + off):
            cf = entries(buf, c, _C_FIELDS)
            calls.append(
                ToolCall(
                    _field_text(buf, view, c, cf[_C_ID]) if cf[_C_ID] else "",
                    FunctionCall(
                        _field_text(buf, view, c, cf[_C_NAME]) if cf[_C_NAME] else "",
                        _field_text(buf, view, c, cf[_C_ARGS]) if cf[_C_ARGS] else "",
                    ),
                )
            )
    if role == _ASSISTANT and not content:
        content = None
    off = f[_M_IS_ERROR]
    failed = bool(_IS_ERROR(buf, pos + off)[0]) if off else False
    off = f[_M_REASONING]
    reasoning = [_reasoning(buf, view, p) for p in elements(buf, pos + off)] if off else None
    off = f[_M_PARTS]
    parts = [_content_part(buf, view, p) for p in elements(buf, pos + off)] if off else None
    return Message(
        _ROLE_NAMES.get(role, "user"), content, name, calls, call_id, failed, reasoning, parts
    )


def _tool(buf: bytes | memoryview, view: memoryview, pos: int) -> Tool:
    f = entries(buf, pos, _T_FIELDS)
    params = None
    off = f[_T_PARAMS]
    if off:
        at = pos + off
        s = at + U32(buf, at)[0]
        params = msgspec.Raw(bytes(view[s + 4 : s + 4 + U32(buf, s)[0]]))
    off = f[_T_STRICT]
    strict = bool(_STRICT(buf, pos + off)[0]) if off else None
    return Tool(
        Function(
            _field_text(buf, view, pos, f[_T_NAME]) if f[_T_NAME] else "",
            _field_text(buf, view, pos, f[_T_DESC]) if f[_T_DESC] else "",
            params,
            strict,
        )
    )


def read_request(buf: bytes | memoryview) -> Request:
    """The request in ``buf``, which ``verify_request`` accepted; ``MalformedBuffer``
    for a string that is not UTF-8."""
    view = memoryview(buf)
    root = U32(buf, 0)[0]
    f = entries(buf, root, _ROOT_FIELDS)
    req = Request(_text_field(buf, view, root, f[_R_MODEL]), [])
    off = f[_R_MESSAGES]
    if off:
        req.messages = [_message(buf, view, m) for m in elements(buf, root + off)]
    off = f[_R_TOOLS]
    if off:
        req.tools = [_tool(buf, view, t) for t in elements(buf, root + off)]
    off = f[_R_STOP]
    if off:
        # A vector's uoffsets are read as fields of it: element j at 4 + 4j.
        v = root + off + U32(buf, root + off)[0]
        req.stop = [_field_text(buf, view, v, 4 + 4 * j) for j in range(U32(buf, v)[0])]
    off = f[_R_METADATA]
    if off:
        metadata = {}
        for kv in elements(buf, root + off):
            kf = entries(buf, kv, _K_FIELDS)
            metadata[_text_field(buf, view, kv, kf[_K_KEY])] = _text_field(
                buf, view, kv, kf[_K_VALUE]
            )
        req.metadata = metadata
    for slot, name in _ROOT_STRINGS:
        off = f[slot]
        if off:
            setattr(req, name, _field_text(buf, view, root, off))
    for slot, name, reader, kind in _ROOT_SCALARS:
        off = f[slot]
        if off:
            setattr(req, name, kind(reader(buf, root + off)[0]))
    return req
