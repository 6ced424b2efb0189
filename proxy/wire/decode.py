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

import struct
from collections.abc import Callable
from typing import Any

import msgspec

from flatgate.proxy.wire.layout import (
    COMPLETION_REQUEST,
    KEY_VALUE,
    MESSAGE,
    TOOL,
    TOOL_CALL,
    Table,
)
from flatgate.proxy.wire.schema import Role
from flatgate.proxy.wire.verify import MalformedBuffer

__all__ = [
    "Function",
    "FunctionCall",
    "Message",
    "Request",
    "Tool",
    "ToolCall",
    "read_request",
]

_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct("<H").unpack_from
_F32 = struct.Struct("<f").unpack_from
_I64 = struct.Struct("<q").unpack_from
_I8 = struct.Struct("<b").unpack_from
_VT_READERS = [struct.Struct(f"<{n}H").unpack_from for n in range(64)]
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


def _slots(t: Table, *names: str) -> tuple[int, ...]:
    return tuple(t.slot(n) for n in names)


_R_REQUEST_ID = COMPLETION_REQUEST.slot("request_id")
_R_PROVIDER = COMPLETION_REQUEST.slot("provider")
_R_MODEL = COMPLETION_REQUEST.slot("model_name")
_R_MAX_TOKENS = COMPLETION_REQUEST.slot("max_tokens")
_R_TEMPERATURE = COMPLETION_REQUEST.slot("temperature")
_R_TOOLS = COMPLETION_REQUEST.slot("tools")
_R_MESSAGES = COMPLETION_REQUEST.slot("messages")
_R_TOOL_CHOICE = COMPLETION_REQUEST.slot("tool_choice")
_R_TOOL_CHOICE_NAME = COMPLETION_REQUEST.slot("tool_choice_name")
_R_TOP_P = COMPLETION_REQUEST.slot("top_p")
_R_STOP = COMPLETION_REQUEST.slot("stop")
_R_SEED = COMPLETION_REQUEST.slot("seed")
_R_PRESENCE = COMPLETION_REQUEST.slot("presence_penalty")
_R_FREQUENCY = COMPLETION_REQUEST.slot("frequency_penalty")
_R_N = COMPLETION_REQUEST.slot("n")
_R_STREAM = COMPLETION_REQUEST.slot("stream")
_R_USER = COMPLETION_REQUEST.slot("user")
_R_TENANT = COMPLETION_REQUEST.slot("tenant")
_R_METADATA = COMPLETION_REQUEST.slot("metadata")
_R_INCLUDE_USAGE = COMPLETION_REQUEST.slot("include_usage")
_R_PTC = COMPLETION_REQUEST.slot("parallel_tool_calls")
_R_RESPONSE_FORMAT = COMPLETION_REQUEST.slot("response_format")
_R_TOP_K = COMPLETION_REQUEST.slot("top_k")
_M_ROLE, _M_CONTENT, _M_NAME, _M_CALLS, _M_CALL_ID, _M_IS_ERROR = _slots(
    MESSAGE, "role", "content", "name", "tool_calls", "tool_call_id", "is_error"
)
_M_FIELDS = len(MESSAGE.fields)
_C_ID, _C_NAME, _C_ARGS = _slots(TOOL_CALL, "id", "name", "arguments")
_T_NAME, _T_DESC, _T_PARAMS, _T_STRICT = _slots(TOOL, "name", "description", "parameters", "strict")
_K_KEY, _K_VALUE = _slots(KEY_VALUE, "key", "value")
_ROOT_FIELDS = len(COMPLETION_REQUEST.fields)
# Root fields read in a loop: strings, then scalars with their reader and type.
_ROOT_STRINGS = (
    (_R_REQUEST_ID, "request_id"),
    (_R_TOOL_CHOICE_NAME, "tool_choice_name"),
    (_R_USER, "user"),
    (_R_TENANT, "tenant"),
    (_R_RESPONSE_FORMAT, "response_format"),
)
_ROOT_SCALARS: tuple[tuple[int, str, Callable[..., tuple[Any, ...]], type], ...] = (
    (_R_PROVIDER, "provider", _I8, int),
    (_R_MAX_TOKENS, "max_tokens", _I32, int),
    (_R_TEMPERATURE, "temperature", _F32, float),
    (_R_TOOL_CHOICE, "tool_choice", _I8, int),
    (_R_TOP_P, "top_p", _F32, float),
    (_R_SEED, "seed", _I64, int),
    (_R_PRESENCE, "presence_penalty", _F32, float),
    (_R_FREQUENCY, "frequency_penalty", _F32, float),
    (_R_N, "n", _I32, int),
    (_R_STREAM, "stream", _I8, bool),
    (_R_INCLUDE_USAGE, "include_usage", _I8, bool),
    (_R_PTC, "parallel_tool_calls", _I8, bool),
    (_R_TOP_K, "top_k", _I32, int),
)


def _fields(buf: bytes | memoryview, pos: int, count: int) -> tuple[int, ...]:
    """The first ``count`` vtable entries of the table at ``pos`` (0 past its end)."""
    vt = pos - _I32(buf, pos)[0]
    have = (_U16(buf, vt)[0] - 4) >> 1
    if have >= count:
        entries: tuple[int, ...] = _VT_READERS[count](buf, vt + 4)
        return entries
    short: tuple[int, ...] = _VT_READERS[have](buf, vt + 4)
    padded: tuple[int, ...] = short + (0,) * (count - have)
    return padded


def _text(buf: bytes | memoryview, view: memoryview, s: int) -> str:
    """The string whose length word is at ``s``."""
    n = _U32(buf, s)[0]
    try:
        return str(view[s + 4 : s + 4 + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedBuffer(f"string at offset {s}: not UTF-8 ({exc.reason})") from None


def _field_text(buf: bytes | memoryview, view: memoryview, pos: int, off: int) -> str:
    """The string field at ``pos + off`` (``off`` non-zero)."""
    at = pos + off
    s = at + _U32(buf, at)[0]
    n = _U32(buf, s)[0]
    try:
        return str(view[s + 4 : s + 4 + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedBuffer(f"string at offset {s}: not UTF-8 ({exc.reason})") from None


def _text_field(buf: bytes | memoryview, view: memoryview, pos: int, off: int) -> str:
    """The string field at ``pos + off``, or ``""`` when absent (``off`` 0)."""
    return _field_text(buf, view, pos, off) if off else ""


def _vector(buf: bytes | memoryview, at: int) -> list[int]:
    """What the vector of offsets whose uoffset is at ``at`` points at."""
    v = at + _U32(buf, at)[0]
    out = []
    e = v + 4
    for _ in range(_U32(buf, v)[0]):
        out.append(e + _U32(buf, e)[0])
        e += 4
    return out


def _message(buf: bytes | memoryview, view: memoryview, pos: int) -> Message:
    f = _fields(buf, pos, _M_FIELDS)
    off = f[_M_ROLE]
    role = _I8(buf, pos + off)[0] if off else 0
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
        for c in _vector(buf, pos + off):
            cf = _fields(buf, c, 3)
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
    failed = bool(_I8(buf, pos + off)[0]) if off else False
    return Message(_ROLE_NAMES.get(role, "user"), content, name, calls, call_id, failed)


def _tool(buf: bytes | memoryview, view: memoryview, pos: int) -> Tool:
    f = _fields(buf, pos, 4)
    params = None
    off = f[_T_PARAMS]
    if off:
        at = pos + off
        s = at + _U32(buf, at)[0]
        params = msgspec.Raw(bytes(view[s + 4 : s + 4 + _U32(buf, s)[0]]))
    off = f[_T_STRICT]
    strict = bool(_I8(buf, pos + off)[0]) if off else None
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
    root = _U32(buf, 0)[0]
    f = _fields(buf, root, _ROOT_FIELDS)
    req = Request(_text_field(buf, view, root, f[_R_MODEL]), [])
    off = f[_R_MESSAGES]
    if off:
        req.messages = [_message(buf, view, m) for m in _vector(buf, root + off)]
    off = f[_R_TOOLS]
    if off:
        req.tools = [_tool(buf, view, t) for t in _vector(buf, root + off)]
    off = f[_R_STOP]
    if off:
        req.stop = [_text(buf, view, s) for s in _vector(buf, root + off)]
    off = f[_R_METADATA]
    if off:
        metadata = {}
        for kv in _vector(buf, root + off):
            kf = _fields(buf, kv, 2)
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
