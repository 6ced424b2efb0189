"""The stub's OpenAI protocol: Chat Completions as OpenAI and vLLM serve it.

``POST /v1/chat/completions`` and ``GET /v1/models``.

- The request is validated by the API's rules (missing or empty ``model`` and
  ``messages``, unknown roles, a tool message without ``tool_call_id``,
  non-positive token limits, a media part that does not decode or stands
  outside a user or tool message, a named ``tool_choice`` without that tool,
  ``stream_options`` without ``stream``);
  a failure is a 400 in OpenAI's shape, ``{"error": {"message", "type",
  "param", "code"}}``, with ``param`` naming the field
  (``messages[1].tool_call_id``). Unknown fields are ignored, as OpenAI does.
- A message with ``image_url``, ``input_audio`` or ``file`` parts echoes as
  ``dialect.described`` shows them (``stub_request``: kind, media type,
  byte count, digest, an image's pixel size).
- ``max_completion_tokens`` wins over ``max_tokens``; the forced tool is
  ``tool_choice: {"type": "function", "function": {"name": ...}}``.
- Non-streamed: a ``chat.completion``. Streamed: ``data:`` events of
  ``chat.completion.chunk``: a role chunk, content deltas (or a tool call's
  start and its argument fragments), a chunk with the finish reason (and, as
  vLLM does, ``stop_reason`` naming the stop sequence that ended the echo); with
  ``stream_options.include_usage`` every chunk carries ``"usage": null`` and a
  last chunk with no choices carries the usage; then ``data: [DONE]``.

Azure OpenAI's paths are this API's too (``own_path``: the v1 API's
``/openai/v1/...``, the deployment URLs' ``/openai/deployments/{d}/...`` and
``/openai/responses``, ``/openai/models``; the ``api-version`` query is not
read), and its ``api-key`` header a key as good as ``Authorization: Bearer``
(a wrong one is Azure's 401).

Per token only the delta's text is JSON-encoded: each stream's constant parts
are encoded once. ``OpenAIWire``'s keys, faults, errors and routes are OpenAI's
for both of its APIs: the Responses API's wire (``openai_responses``) is this
one with its own path, request and renderings. No I/O.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator
from typing import Any

import msgspec

from flatgate.proxy.backends.azure import openai_path
from flatgate.proxy.backends.dialect import (
    LISTED_MODEL,
    NO_POSTS,
    Answer,
    Canned,
    HeaderFn,
    Rejected,
    Rendering,
    Reply,
    StubRequest,
    deltas_of,
    id_header,
    is_streamed,
)
from flatgate.proxy.backends.openai.stub_request import (
    Invalid,
    decode_chat_request,
    to_stub_request,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.schema import JSON, FinishReason

__all__ = ["SSE", "OpenAIWire", "error_reply"]

SSE = "text/event-stream; charset=utf-8"
_enc = msgspec.json.encode
_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool_calls",
}
_DONE = b"data: [DONE]\n\n"
# OpenAI's code for a missing or wrong key, the same as flatgate's own.
_BAD_KEY = codes.INVALID_API_KEY.code
_RETRY = [("retry-after", "1"), ("retry-after-ms", "1000")]
# Azure OpenAI's 401 for a wrong api-key.
_AZURE_DENIED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
    "provide a valid key for an active subscription and use a correct regional API endpoint "
    "for your resource."
)


def error_reply(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> Reply:
    """An error in OpenAI's shape."""
    body = _enc({"error": {"message": message, "type": type_, "param": param, "code": code}})
    return Reply(status, [("content-type", JSON)], body)


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def _chunk_base(request_id: str, model: str, created: int) -> bytes:
    """A chunk event up to its ``"choices":`` value, the same for every chunk of a stream."""
    return b"".join(
        (
            b'data: {"id":',
            _enc(f"chatcmpl-{request_id or 'stub'}"),
            b',"object":"chat.completion.chunk","created":',
            str(created).encode(),
            b',"model":',
            _enc(model),
            b',"system_fingerprint":null,"choices":',
        )
    )


class _Rendering:
    __slots__ = ("_answer", "_base", "_head", "_tail", "_usage_null", "content_type")

    def __init__(self, req: StubRequest, ans: Answer, created: int) -> None:
        self.content_type = SSE
        self._answer = ans
        self._base = _chunk_base(req.request_id, req.model, created)
        self._head = self._base + b'[{"index":0,"delta":'
        self._usage_null = b',"usage":null' if req.include_usage else b""
        self._tail = b',"logprobs":null,"finish_reason":null}]' + self._usage_null + b"}\n\n"

    def opening(self) -> bytes:
        call = self._answer.tool_call
        if call is None:
            return self._head + b'{"role":"assistant","content":""}' + self._tail
        start = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "index": 0,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
            ],
        }
        return self._head + _enc(start) + self._tail

    def steps(self) -> Iterator[bytes]:
        head, tail, ans = self._head, self._tail, self._answer
        if ans.tool_call is not None:
            head += b'{"tool_calls":[{"index":0,"function":{"arguments":'
            tail = b"}}]}" + tail
            for fragment in ans.tool_call.fragments():
                yield head + _enc(fragment) + tail
            return
        head += b'{"content":'
        tail = b"}" + tail
        for delta in ans.deltas:
            yield head + _enc(delta) + tail

    def closing(self) -> bytes:
        ans = self._answer
        reason = _FINISH[ans.finish].encode()
        out = [
            self._head,
            b'{},"logprobs":null,"finish_reason":"',
            reason,
            b'"',
            b',"stop_reason":' + _enc(ans.stop_sequence) if ans.stop_sequence else b"",
            b"}]",
            self._usage_null,
            b"}\n\n",
        ]
        if self._usage_null:
            out += [self._base, b'[],"usage":', _enc(_usage(ans.usage)), b"}\n\n"]
        out.append(_DONE)
        return b"".join(out)

    def error(self) -> bytes:
        err = {
            "message": "The server had an error while processing your request. (stub fault: error)",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        return b"data: " + _enc({"error": err}) + b"\n\n"


def _completion(req: StubRequest, ans: Answer, created: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": ans.text, "refusal": None}
    call = ans.tool_call
    if call is not None:
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        ]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": _FINISH[ans.finish],
    }
    if ans.stop_sequence:
        choice["stop_reason"] = ans.stop_sequence  # as vLLM names it
    return {
        "id": f"chatcmpl-{req.request_id or 'stub'}",
        "object": "chat.completion",
        "created": created,
        "model": req.model,
        "system_fingerprint": None,
        "choices": [choice],
        "usage": _usage(ans.usage),
    }


class OpenAIWire:
    """The OpenAI side of the stub (see the module docstring)."""

    path = "/v1/chat/completions"
    request_id_header = "x-request-id"
    tool_id_prefix = "call_"
    always_streams = False
    posts = NO_POSTS
    # The field a request too long is blamed on (the ``reject`` fault).
    prompt_param = "messages"

    def render(self, req: StubRequest, ans: Answer, created: int) -> Rendering:
        """The streamed answer, made at ``created``."""
        return _Rendering(req, ans, created)

    def whole(self, req: StubRequest, ans: Answer, created: int) -> dict[str, Any]:
        """The non-streamed answer's document, made at ``created``."""
        return _completion(req, ans, created)

    def route(self, method: str, path: str) -> Reply:
        if path == "/v1/models" and method == "GET":
            model = {"id": LISTED_MODEL, "object": "model", "created": 0, "owned_by": "flatgate"}
            return Reply(200, [("content-type", JSON)], _enc({"object": "list", "data": [model]}))
        if path in (self.path, "/v1/models"):
            return error_reply(405, f"Method {method} is not allowed for {path}.")
        return error_reply(
            404,
            f"Unknown request URL: {method} {path}. Please check the URL for typos.",
            code="unknown_url",
        )

    def own_path(self, path: str) -> str:
        """Azure OpenAI's paths as this API's own (``azure.openai_path``)."""
        return openai_path(path)

    def authorize(self, header: HeaderFn, api_key: str) -> Reply | None:
        azure_key = header("api-key")
        if azure_key is not None:  # Azure OpenAI's header
            if hmac.compare_digest(azure_key.encode(), api_key.encode()):
                return None
            return error_reply(401, _AZURE_DENIED, code="401")
        given = header("authorization") or ""
        scheme, _, key = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(key.strip(), api_key):
            return None
        if not given:
            message = (
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
        else:
            message = "Incorrect API key provided."
        return error_reply(401, message, code=_BAD_KEY)

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        try:
            return self.read(body, header("x-request-id") or "")
        except Invalid as exc:
            reply = error_reply(exc.status, exc.message, param=exc.param, code=exc.vendor_code)
            raise Rejected(reply) from None

    def read(self, body: bytes, request_id: str) -> StubRequest:
        """The request, validated; raises ``Invalid``."""
        return to_stub_request(decode_chat_request(body), request_id)

    def fault(self, fault: str, req: StubRequest) -> Reply:
        if fault == "rate_limit":
            reply = error_reply(
                429,
                "Rate limit reached for requests (stub fault: rate_limit). Please try again in 1s.",
                "rate_limit_error",
                code="rate_limit_exceeded",
            )
            reply.headers.extend(_RETRY)
            return reply
        if fault == "auth":
            return error_reply(401, "Incorrect API key provided. (stub fault: auth)", code=_BAD_KEY)
        if fault == "reject":
            return error_reply(
                400,
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in more tokens. Please reduce the length of the messages. "
                "(stub fault: reject)",
                param=self.prompt_param,
                code="context_length_exceeded",
            )
        if fault == "overloaded":
            return error_reply(
                503,
                "The server is overloaded, please try again later. (stub fault: overloaded)",
                "server_error",
            )
        return error_reply(503, "The server is not available. (stub fault: fail)", "server_error")

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        body = _enc(self.whole(req, ans, int(time.time())))
        return Reply(
            200, [("content-type", JSON), *id_header(self.request_id_header, req.request_id)], body
        )

    def failed(self, req: StubRequest, header: HeaderFn) -> Reply:
        return error_reply(
            500,
            "The server had an error while processing your request. (stub fault: error)",
            "server_error",
        )

    def stream(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Rendering:
        return self.render(req, ans, int(time.time()))

    def canned(self, count: int) -> Canned:
        req = StubRequest("canned", "stub-canned", (), 0, "", True)
        ans = Answer(tuple(deltas_of("tok " * count)), FinishReason.STOP, Usage(0, count))
        r = self.render(req, ans, 0)
        streamed = Reply(
            200, [("content-type", SSE)], r.opening() + b"".join(r.steps()) + r.closing()
        )
        whole = Reply(200, [("content-type", JSON)], _enc(self.whole(req, ans, 0)))

        def pick(body: bytes, header: HeaderFn) -> Reply:
            return streamed if is_streamed(body) else whole

        return pick
