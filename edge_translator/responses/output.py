"""The pieces of a Responses answer's JSON: its output items
(``OutputItem``), a message's tokens' logprobs (``logprobs_of``), its
``usage`` and a failed response's ``error``.

Owns how each output item reads in ``output`` and in its
``response.output_item.done`` event: a message (``msg_...``, one
``output_text`` part with ``annotations: []``, and its tokens' ``logprobs``
when the backend sent any), a reasoning item
(``rs_...``, its summary as one ``summary_text`` part, ``encrypted_content``
when asked for and there is one), a function call (``fc_...``, ``call_id``,
``name`` and ``namespace`` as the client declared the tool, ``arguments``).
``render`` decides when each begins and ends. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, Usage
from flatgate.proxy.wire.schema import ApiDialect

__all__ = ["FC", "MSG", "RS", "OutputItem", "failed_error", "logprobs_of", "usage_json"]

# Item kinds: a message, a reasoning item, a function call.
MSG, RS, FC = 1, 2, 3

_encode = msgspec.json.Encoder().encode
_CHAT = int(ApiDialect.OPENAI_CHAT)


class _Top(msgspec.Struct, gc=False, omit_defaults=False):
    token: str
    logprob: float
    bytes: list[int] | None = None


class _Token(msgspec.Struct, gc=False, omit_defaults=False):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[_Top] = []


class _Tokens(msgspec.Struct, gc=False):
    content: list[_Token] | None = None


class _Logprobs(msgspec.Struct, gc=False):
    logprobs: _Tokens | None = None


_decode_logprobs = msgspec.json.Decoder(_Logprobs).decode


def logprobs_of(chunk: Chunk) -> list[bytes]:
    """A chunk's tokens' logprobs (its extras ``{"logprobs": {"content":
    [...]}}``, in Chat Completions' shape from every backend), each entry's
    JSON as the Responses API writes it: ``bytes`` is required there, so one
    a backend left out or sent as null is the token's UTF-8 (what Chat
    Completions sends); none when it has none."""
    if chunk.extras_dialect != _CHAT:
        return []
    try:
        tokens = _decode_logprobs(chunk.extras.encode()).logprobs
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []  # not the backend's: its adapter writes well-formed extras
    if tokens is None or not tokens.content:
        return []
    for t in tokens.content:
        if t.bytes is None:
            t.bytes = list(t.token.encode())
        for top in t.top_logprobs:
            if top.bytes is None:
                top.bytes = list(top.token.encode())
    return [_encode(t) for t in tokens.content]


def usage_json(u: Usage | None) -> bytes:
    """The ``usage`` object of a response (``null``: none reported)."""
    if u is None:
        return b"null"
    return (
        b'{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d,"cache_write_tokens":%d},'
        b'"output_tokens":%d,'
        b'"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}'
        % (
            u.prompt_tokens,
            u.cached_tokens,
            u.cache_write_tokens,
            u.completion_tokens,
            u.reasoning_tokens,
            u.prompt_tokens + u.completion_tokens,
        )
    )


def failed_error(err: FlatgateError) -> dict[str, str]:
    """A failed response's ``error``: its ``code`` one of OpenAI's (the SDK's
    type allows no other: a 429 is ``rate_limit_exceeded``, with the wait in
    the message as OpenAI words it, which Codex reads; the rest
    ``server_error``), flatgate's own code in the message."""
    message = f"{err.message} (code: {err.code})"
    if 429 not in (err.status, err.code.status):  # a mid-stream error chunk is a 502
        return {"code": "server_error", "message": message}
    if err.retry_after is not None:
        message += f" Please try again in {max(err.retry_after, 0.001):g}s."
    return {"code": "rate_limit_exceeded", "message": message}


class OutputItem:
    """An output item: its kind, id, index, what it has so far, and its JSON
    once done."""

    __slots__ = (
        "call_id",
        "done",
        "encrypted",
        "head",
        "id",
        "index",
        "kind",
        "logprobs",
        "name",
        "namespace",
        "ref",
        "texts",
    )

    def __init__(self, kind: int, item_id: str, index: int) -> None:
        self.kind = kind
        self.id = item_id
        self.index = index
        # ``"item_id":...,"output_index":N``: every event about it names it so.
        self.ref = b'"item_id":' + _encode(item_id) + b',"output_index":%d' % index
        self.texts: list[str] = []
        # A message's tokens' logprobs, each entry's JSON as the backend sent it.
        self.logprobs: list[bytes] = []
        self.done: bytes | None = None
        self.head = b""
        self.encrypted = ""
        self.call_id = self.name = self.namespace = ""

    def logprobs_member(self) -> bytes:
        """A message's ``output_text`` ``logprobs`` member (none without any:
        the part reads as it did before they were asked for)."""
        if not self.logprobs:
            return b""
        return b',"logprobs":[' + b",".join(self.logprobs) + b"]"

    def json(self, status: bytes, encrypted: bool) -> bytes:
        """The item as an ``output`` entry (``status``: of a message or call)."""
        text = "".join(self.texts)
        head = b'{"id":' + _encode(self.id)
        if self.kind == MSG:
            return (
                head
                + b',"type":"message","status":"'
                + status
                + b'","role":"assistant","content":[{"type":"output_text","text":'
                + _encode(text)
                + b',"annotations":[]'
                + self.logprobs_member()
                + b"}]}"
            )
        if self.kind == RS:
            summary = b'{"type":"summary_text","text":' + _encode(text) + b"}" if text else b""
            out = head + b',"type":"reasoning","summary":[' + summary + b"]"
            if encrypted and self.encrypted:
                out += b',"encrypted_content":' + _encode(self.encrypted)
            return out + b"}"
        out = (
            head
            + b',"type":"function_call","status":"'
            + status
            + b'","arguments":'
            + _encode(text)
            + b',"call_id":'
            + _encode(self.call_id)
            + b',"name":'
            + _encode(self.name)
        )
        if self.namespace:
            out += b',"namespace":' + _encode(self.namespace)
        return out + b"}"
