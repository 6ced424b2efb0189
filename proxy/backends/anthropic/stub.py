"""The stub's Anthropic protocol: the Messages API.

``POST /v1/messages`` (and ``GET /v1/models``). A request needs the
``anthropic-version`` header and ``max_tokens``; it is validated by
``stub_request``; a failure is a 400 in Anthropic's shape,
``{"type": "error", "error": {"type": "invalid_request_error", "message"}}``.
The forced tool is ``tool_choice: {"type": "tool", "name": ...}``.

- Non-streamed: a ``message`` object (``content`` blocks, ``stop_reason``
  ``end_turn`` / ``stop_sequence`` (with the ``stop_sequence`` that ended the
  echo) / ``max_tokens`` / ``tool_use``, ``usage.input_tokens`` and
  ``output_tokens``).
- Streamed: ``event:`` + ``data:`` pairs in the documented order:
  ``message_start`` (``output_tokens`` 1), ``content_block_start`` (index 0),
  one ``ping``, a ``content_block_delta`` per delta (``text_delta``, or
  ``input_json_delta`` fragments of a ``tool_use`` block), ``content_block_stop``,
  ``message_delta`` (stop reason, cumulative ``output_tokens``), ``message_stop``.
- A mid-stream error is ``event: error`` with ``overloaded_error``.
- With ``thinking`` enabled (or adaptive), the answer thinks first: block 0
  is a ``thinking`` block (one deterministic sentence, ``thinking_delta`` then
  a ``signature_delta`` with the stub's signature of it,
  ``stub_request.signature``), or, when the last user message holds
  Anthropic's test string ``REDACTED_TRIGGER``, a ``redacted_thinking`` block
  with ``REDACTED_DATA``; the text or tool block is then block 1.

The ``message``, its blocks, usage and errors are the Messages API's own
Structs (``events.Answer``, ``events.ContentBlock``, ``events.Usage``,
``events.ErrorBody``: the ones the ``anthropic`` backend reads); each
event's envelope is a dict or a byte template. Per token only the delta's
text is JSON-encoded. No I/O.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

import msgspec

from flatgate.proxy.apis.anthropic_messages import events
from flatgate.proxy.backends.anthropic.stub_request import (
    REDACTED_DATA,
    REDACTED_TRIGGER,
    Invalid,
    decode_messages_request,
    signature,
    to_stub_request,
)
from flatgate.proxy.backends.dialect import (
    LISTED_MODEL,
    NO_POSTS,
    Answer,
    Canned,
    HeaderFn,
    Rejected,
    Reply,
    StubRequest,
    deltas_of,
    id_header,
    is_streamed,
)
from flatgate.proxy.wire.chunk import frames
from flatgate.proxy.wire.schema import JSON, SSE, FinishReason

__all__ = ["AnthropicWire", "error_reply"]

_enc = msgspec.json.encode
_RETRY = [("retry-after", "1"), ("retry-after-ms", "1000")]
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'
# By the index of the answer's main block: 0, or 1 after a thinking block.
_TEXT_DELTA = tuple(
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"text_delta","text":' % i
    for i in (0, 1)
)
_JSON_DELTA = tuple(
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"input_json_delta","partial_json":' % i
    for i in (0, 1)
)
_DELTA_END = b"}}\n\n"
_BLOCK_STOP = tuple(
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n' % i
    for i in (0, 1)
)
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
# A tool_use block's input before its deltas.
_NO_INPUT = msgspec.Raw(b"{}")
_OVERLOADED = events.ErrorBody(events.ErrorDetail("overloaded_error", "Overloaded"))


def error_reply(status: int, type_: str, message: str) -> Reply:
    """An error in Anthropic's shape."""
    body = _enc(events.ErrorBody(events.ErrorDetail(type_, message)))
    return Reply(status, [("content-type", JSON)], body)


def _event(name: str, data: dict[str, Any] | events.ErrorBody) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _enc(data) + b"\n\n"


def _thought(req: StubRequest) -> events.ContentBlock | None:
    """The answer's thinking block, whole, when the request asks it to think."""
    if "thinking" not in req.params:
        return None
    if REDACTED_TRIGGER in req.last_user:
        return events.ContentBlock("redacted_thinking", data=REDACTED_DATA)
    words = len(req.last_user.split())
    text = f"The user wrote {words} words; I repeat them back."
    return events.ContentBlock("thinking", thinking=text, signature=signature(text))


def _thinking_events(block: events.ContentBlock) -> bytes:
    """Block 0 of a streamed answer that thinks."""
    if block.type == "redacted_thinking":
        start = block
        deltas: list[dict[str, Any]] = []
    else:
        start = events.ContentBlock("thinking", thinking="", signature="")
        deltas = [
            {"type": "thinking_delta", "thinking": block.thinking},
            {"type": "signature_delta", "signature": block.signature},
        ]
    out = [
        _event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": start},
        )
    ]
    for d in deltas:
        out.append(
            _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d})
        )
    out.append(_BLOCK_STOP[0])
    return b"".join(out)


def _stop_reason(ans: Answer) -> str:
    return "stop_sequence" if ans.stop_sequence else events.STOP_REASON_OF[ans.finish]


def _message(
    req: StubRequest,
    content: list[events.ContentBlock],
    stop: str | None,
    usage: frames.Usage,
    stop_sequence: str | None = None,
) -> events.Answer:
    return events.Answer(
        id=f"msg_{req.request_id or 'stub'}",
        type="message",
        role="assistant",
        model=req.model,
        content=content,
        stop_reason=stop,
        stop_sequence=stop_sequence,
        usage=events.Usage(usage.prompt_tokens, usage.completion_tokens),
    )


class _Rendering:
    __slots__ = ("_answer", "_at", "_req", "_thought", "content_type")

    def __init__(self, req: StubRequest, ans: Answer) -> None:
        self.content_type = SSE
        self._req = req
        self._answer = ans
        self._thought = _thought(req)
        self._at = 0 if self._thought is None else 1  # the main block's index

    def opening(self) -> bytes:
        req, ans = self._req, self._answer
        start = _message(req, [], None, frames.Usage(ans.usage.prompt_tokens, 1))
        call = ans.tool_call
        block = events.ContentBlock("text", text="")
        if call is not None:
            block = events.ContentBlock("tool_use", id=call.id, name=call.name, input=_NO_INPUT)
        thinking = b"" if self._thought is None else _thinking_events(self._thought)
        return b"".join(
            (
                _event("message_start", {"type": "message_start", "message": start}),
                thinking,
                _event(
                    "content_block_start",
                    {"type": "content_block_start", "index": self._at, "content_block": block},
                ),
                _PING,
            )
        )

    def steps(self) -> Iterator[bytes]:
        ans = self._answer
        if ans.tool_call is not None:
            head = _JSON_DELTA[self._at]
            for fragment in ans.tool_call.fragments():
                yield head + _enc(fragment) + _DELTA_END
            return
        head = _TEXT_DELTA[self._at]
        for delta in ans.deltas:
            yield head + _enc(delta) + _DELTA_END

    def closing(self) -> bytes:
        ans = self._answer
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(ans), "stop_sequence": ans.stop_sequence or None},
            "usage": events.Usage(output_tokens=ans.usage.completion_tokens),
        }
        return _BLOCK_STOP[self._at] + _event("message_delta", delta) + _MESSAGE_STOP

    def error(self) -> bytes:
        return _event("error", _OVERLOADED)


def _complete(req: StubRequest, ans: Answer) -> events.Answer:
    call = ans.tool_call
    thought = _thought(req)
    content: list[events.ContentBlock] = [] if thought is None else [thought]
    if call is not None:
        # The arguments as compact JSON, however the echo spelled them.
        arguments = msgspec.Raw(_enc(msgspec.json.decode(call.arguments)))
        content.append(events.ContentBlock("tool_use", id=call.id, name=call.name, input=arguments))
    elif ans.text:
        content.append(events.ContentBlock("text", text=ans.text))
    return _message(req, content, _stop_reason(ans), ans.usage, ans.stop_sequence or None)


class AnthropicWire:
    """The Anthropic side of the stub (see the module docstring)."""

    path = "/v1/messages"
    request_id_header = "request-id"
    tool_id_prefix = "toolu_"
    always_streams = False
    posts = NO_POSTS

    def route(self, method: str, path: str) -> Reply:
        if path == "/v1/models" and method == "GET":
            model = {
                "type": "model",
                "id": LISTED_MODEL,
                "display_name": LISTED_MODEL,
                "created_at": "1970-01-01T00:00:00Z",
            }
            doc = {
                "data": [model],
                "has_more": False,
                "first_id": LISTED_MODEL,
                "last_id": LISTED_MODEL,
            }
            return Reply(200, [("content-type", JSON)], _enc(doc))
        if path in (self.path, "/v1/models"):
            return error_reply(
                405, "invalid_request_error", f"Method {method} not allowed for {path}"
            )
        return error_reply(404, "not_found_error", "Not Found")

    def authorize(self, header: HeaderFn, api_key: str) -> Reply | None:
        # The Messages API takes the key as ``x-api-key``; the anthropic SDK
        # (2.x) sends it as ``Authorization: Bearer``, which the API accepts too.
        given = header("x-api-key")
        if given is None:
            scheme, _, token = (header("authorization") or "").partition(" ")
            given = token.strip() if scheme.lower() == "bearer" else None
        if given is not None and hmac.compare_digest(given, api_key):
            return None
        message = "x-api-key header is required" if given is None else "invalid x-api-key"
        return error_reply(401, "authentication_error", message)

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        if not header("anthropic-version"):
            raise Rejected(
                error_reply(400, "invalid_request_error", "anthropic-version: header is required")
            )
        try:
            return to_stub_request(
                decode_messages_request(body),
                header("x-request-id") or "",
                header("anthropic-beta") or "",
            )
        except Invalid as exc:
            raise Rejected(error_reply(400, "invalid_request_error", str(exc))) from None

    def fault(self, fault: str, req: StubRequest) -> Reply:
        if fault == "rate_limit":
            reply = error_reply(
                429,
                "rate_limit_error",
                "Number of requests has exceeded your rate limit (stub fault: rate_limit)",
            )
            reply.headers.extend(_RETRY)
            return reply
        if fault == "overloaded":
            return error_reply(529, "overloaded_error", "Overloaded")
        if fault == "auth":
            return error_reply(401, "authentication_error", "invalid x-api-key (stub fault: auth)")
        if fault == "reject":
            return error_reply(
                400, "invalid_request_error", "prompt is too long: 200001 tokens > 200000 maximum"
            )
        return error_reply(503, "api_error", "Service unavailable (stub fault: fail)")

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        body = _enc(_complete(req, ans))
        return Reply(
            200, [("content-type", JSON), *id_header(self.request_id_header, req.request_id)], body
        )

    def failed(self, req: StubRequest, header: HeaderFn) -> Reply:
        return error_reply(500, "api_error", "Internal server error (stub fault: error)")

    def stream(self, req: StubRequest, ans: Answer, header: HeaderFn) -> _Rendering:
        return _Rendering(req, ans)

    def canned(self, count: int) -> Canned:
        req = StubRequest("canned", "stub-canned", (), 0, "", True)
        ans = Answer(tuple(deltas_of("tok " * count)), FinishReason.STOP, frames.Usage(0, count))
        r = _Rendering(req, ans)
        streamed = Reply(
            200, [("content-type", SSE)], r.opening() + b"".join(r.steps()) + r.closing()
        )
        whole = Reply(200, [("content-type", JSON)], _enc(_complete(req, ans)))

        def pick(body: bytes, header: HeaderFn) -> Reply:
            return streamed if is_streamed(body) else whole

        return pick
