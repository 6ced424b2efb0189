"""How many tokens a request's prompt is, estimated without a tokenizer.

Owns the one estimate flatgate uses wherever it must count a prompt before a
backend has: the edge's ``POST /v1/messages/count_tokens`` answers with it, and
the limits work reserves token budgets with it (on the ``CompletionRequest``
it routes, so both count exactly the same text)::

    tokens = ceil(UTF-8 bytes of the text the model reads / 4) + 4 per message

Why this and not a tokenizer: tokenizers are per model (Claude's is not
public, a Llama's differs from GPT's), loading one costs memory per worker
and running one costs tens of microseconds per kilobyte, while a gateway
routes one request shape to many models. Byte-pair encodings average close
to 4 bytes of English prose per token (OpenAI's rule of thumb is 4 characters,
Anthropic's about 3.5), and every chat template adds a few tokens per message
for the role and its delimiters (OpenAI's cookbook counts 3 to 4). It is an
estimate: within some tens of percent for prose, above the truth for dense
ASCII such as code and JSON, below it for CJK text (3 bytes a character and
about a token each). The text counted: every message's content, each tool
call's name and arguments, and each tool definition's name, description and
parameter schema.

Bounded, whatever the buffer: the proxy estimates a request before anything
verifies it, so ``estimate_request`` never raises on a buffer ``read_route``
accepted (an offset that leaves the buffer ends the count there), reads at
most ``MAX_OBJECTS`` tables, and counts at most ``max_bytes`` of text
(default ``MAX_BYTES``, the verifier's bound on what a buffer expands to).
Offsets shared many times over (2,000 messages that are one 256 KiB message)
cannot make the estimate, and so a token reservation, exceed that of an
honest request of ``max_bytes``.

Pure: no I/O; ``estimate_request`` reads lengths only (no string is decoded).
"""

from __future__ import annotations

import struct

from flatgate.proxy.wire.buffer import I32, U16, U32, elements, field_at
from flatgate.proxy.wire.layout import COMPLETION_REQUEST, MESSAGE, TOOL, TOOL_CALL
from flatgate.proxy.wire.request.verify import MAX_BYTES, MAX_OBJECTS

__all__ = [
    "BYTES_PER_TOKEN",
    "TOKENS_PER_MESSAGE",
    "estimate_request",
    "estimate_tokens",
    "reservation",
]

BYTES_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4

_R_MESSAGES = COMPLETION_REQUEST.voffset("messages")
_R_TOOLS = COMPLETION_REQUEST.voffset("tools")
_R_MAX_TOKENS = COMPLETION_REQUEST.voffset("max_tokens")
_R_N = COMPLETION_REQUEST.voffset("n")
_M_CONTENT = MESSAGE.voffset("content")
_M_CALLS = MESSAGE.voffset("tool_calls")
_C_TEXT = (TOOL_CALL.voffset("name"), TOOL_CALL.voffset("arguments"))
_T_TEXT = (TOOL.voffset("name"), TOOL.voffset("description"), TOOL.voffset("parameters"))


def estimate_tokens(text_bytes: int, messages: int) -> int:
    """The estimate for ``text_bytes`` of UTF-8 text in ``messages`` messages."""
    return -(-text_bytes // BYTES_PER_TOKEN) + TOKENS_PER_MESSAGE * messages


def _length(buf: bytes | memoryview, table: int, voffset: int) -> int:
    """The byte length of the string field at ``voffset`` (0: absent)."""
    at = field_at(buf, table, voffset)
    if not at:
        return 0
    n: int = U32(buf, at + U32(buf, at)[0])[0]
    return n


def _tables(buf: bytes | memoryview, table: int, voffset: int, most: int) -> list[int]:
    """The tables of the vector field at ``voffset`` (none when absent), at
    most ``most`` of them."""
    at = field_at(buf, table, voffset)
    if not at or most <= 0:
        return []
    return elements(buf, at, most)


def estimate_request(buf: bytes | memoryview, *, max_bytes: int = MAX_BYTES) -> int:
    """The estimate for a ``CompletionRequest`` that ``read_route`` accepted,
    its text counted up to ``max_bytes`` (see the module docstring)."""
    text = 0
    messages: list[int] = []
    try:
        root = U32(buf, 0)[0]
        messages = _tables(buf, root, _R_MESSAGES, MAX_OBJECTS)
        left = MAX_OBJECTS - len(messages)
        u16, u32 = U16, U32
        for m in messages:  # _length and field_at inlined: this loop is the cost
            vt = m - I32(buf, m)[0]
            size = u16(buf, vt)[0]
            off = u16(buf, vt + _M_CONTENT)[0] if size >= _M_CONTENT + 2 else 0
            if off:
                at = m + off
                text += u32(buf, at + u32(buf, at)[0])[0]
            if size >= _M_CALLS + 2 and u16(buf, vt + _M_CALLS)[0]:
                calls = _tables(buf, m, _M_CALLS, left)
                left -= len(calls)
                for call in calls:
                    text += sum(_length(buf, call, v) for v in _C_TEXT)
        for tool in _tables(buf, root, _R_TOOLS, left):
            text += sum(_length(buf, tool, v) for v in _T_TEXT)
    except struct.error:  # an offset past the buffer: what was read so far
        pass
    return estimate_tokens(text if text < max_bytes else max_bytes, len(messages))


def _root_int(buf: bytes | memoryview, voffset: int, default: int) -> int:
    """The root's int32 field at ``voffset``; ``default`` when absent or outside
    the buffer."""
    try:
        at = field_at(buf, U32(buf, 0)[0], voffset)
        value: int = I32(buf, at)[0] if at else default
    except struct.error:
        return default
    return value


def reservation(
    buf: bytes | memoryview, default_max_tokens: int, *, max_bytes: int = MAX_BYTES
) -> int:
    """The tokens a request may use at most, reserved against its tenant's
    token limits before it is sent: the prompt's estimate plus, for each of
    its ``n`` choices, its ``max_tokens`` (``default_max_tokens`` when it sets
    none). For a ``CompletionRequest`` that ``read_route`` accepted."""
    most = _root_int(buf, _R_MAX_TOKENS, 0)
    if most <= 0:
        most = default_max_tokens
    n = _root_int(buf, _R_N, 1)
    return estimate_request(buf, max_bytes=max_bytes) + most * max(n, 1)
