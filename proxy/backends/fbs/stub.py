"""The stub's ``.fbs`` protocol: a ``CompletionRequest`` in, chunk frames out.

``POST /v1/completions`` with a ``CompletionRequest`` FlatBuffer. Framing by
``Accept``: ``application/x-flatbuffers-stream`` gives size-prefixed frames,
anything else SSE (``data: <base64>``). Frames are written with
``wire.chunk.writer.ChunkWriter``, one per stream: a token delta is its cached head
plus the delta's string.

A message with content parts (images, documents, audio, files) echoes as
``dialect.described`` shows its parts (kind, media type, byte count, digest,
pixel size), read with ``wire.request.decode``, so a test sees what bytes
arrived. A tool call is one chunk carrying the call, the finish reason and the usage.
A non-streamed answer is one chunk. Errors before the first byte are flatgate's
own ``{"error": {"code", "message"}}`` (codes from ``errors.codes``); the
``error`` fault mid-stream is an error chunk with code ``backend_stream_error``
(what the openai and anthropic adapters make of their servers' mid-stream
errors).

Faults: the metadata keys ``stub.fault`` / ``stub.fault_after``, else the
model name's suffix (``echo@die:2``). No I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

from flatgate.generated.LLMGateway import CompletionRequest as _fb_req
from flatgate.proxy.backends.dialect import (
    FAULTS,
    NO_POSTS,
    STUB_MAX_BODY,
    Answer,
    Canned,
    HeaderFn,
    OfferedTool,
    Rejected,
    Reply,
    StubRequest,
    described,
    id_header,
    split_model,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.codes import ErrorCode, error_body
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.chunk.frames import ChunkError, ToolCallDelta, Usage, sse_event
from flatgate.proxy.wire.chunk.writer import ChunkWriter, write_chunk
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import (
    COMPLETIONS_PATH,
    FRAMES,
    JSON,
    SSE,
    FinishReason,
    ToolChoiceMode,
)

__all__ = ["FbsWire", "parse_request"]

# fault -> (code, status, message) before the first byte.
_FAULTS: dict[str, tuple[ErrorCode, int, str]] = {
    "fail": (codes.BACKEND_UNAVAILABLE, 503, "stub fault: fail"),
    "rate_limit": (codes.BACKEND_RATE_LIMITED, 429, "stub fault: rate_limit"),
    "overloaded": (codes.BACKENDS_BUSY, 503, "stub fault: overloaded"),
    "auth": (codes.INVALID_API_KEY, 401, "stub fault: auth"),
    "reject": (codes.INVALID_REQUEST, 400, "stub fault: reject: the prompt is too long"),
}
_MID_STREAM_ERROR = ChunkError(codes.BACKEND_STREAM_ERROR.code, "stub fault: error")
_RETRY = [("retry-after", "1"), ("retry-after-ms", "1000")]


def _s(value: bytes | None) -> str:
    return value.decode("utf-8", "replace") if value else ""


def _after(value: str) -> int:
    return int(value) if value.isdigit() else 0


def parse_request(body: bytes) -> StubRequest:
    """Verify and decode what the stub needs; raises ``MalformedBuffer``."""
    verify_request(body, max_bytes=STUB_MAX_BODY)
    req = _fb_req.CompletionRequest.GetRootAs(body, 0)
    messages = []
    decoded = None  # the whole request, read once if a message has parts
    for i in range(req.MessagesLength()):
        m = req.Messages(i)
        if m.PartsLength():
            decoded = decoded or read_request(body)
            parts = decoded.messages[i].parts or []
            messages.append((m.Role(), described(parts)))
        else:
            messages.append((m.Role(), _s(m.Content())))
    metadata = {}
    for i in range(req.MetadataLength()):
        kv = req.Metadata(i)
        metadata[_s(kv.Key())] = _s(kv.Value())
    forced = _s(req.ToolChoiceName()) if req.ToolChoice() == ToolChoiceMode.Function else ""
    offered: tuple[OfferedTool, ...] = ()
    if req.ToolChoice() != ToolChoiceMode.None_:
        tools = (req.Tools(i) for i in range(req.ToolsLength()))
        offered = tuple(OfferedTool(_s(t.Name()), _s(t.Parameters())) for t in tools)
    stop = tuple(_s(req.Stop(i)) for i in range(req.StopLength()))
    model, fault, after = split_model(_s(req.ModelName()))
    named = metadata.get("stub.fault", "")
    if named in FAULTS:
        fault, after = named, _after(metadata.get("stub.fault_after", ""))
    return StubRequest(
        request_id=_s(req.RequestId()),
        model=model,
        messages=tuple(messages),
        max_tokens=req.MaxTokens(),
        forced_tool=forced,
        stream=bool(req.Stream()),
        metadata=metadata,
        fault=fault,
        fault_after=after,
        stop=stop,
        offered=offered,
    )


def _error(code: ErrorCode, message: str, status: int = 0) -> Reply:
    return Reply(status or code.status, [("content-type", JSON)], error_body(code, message))


def _binary(header: HeaderFn) -> bool:
    return FRAMES in (header("accept") or "")


def _framed(frame: bytes, binary: bool) -> bytes:
    return frame if binary else sse_event(memoryview(frame)[4:])


def _tool_chunk(writer: ChunkWriter, ans: Answer) -> bytes:
    call = ans.tool_call
    assert call is not None
    delta = ToolCallDelta(index=0, id=call.id, name=call.name, arguments=call.arguments)
    return writer.chunk(tool_calls=(delta,), finish_reason=ans.finish, usage=ans.usage)


class _Rendering:
    __slots__ = ("_answer", "_binary", "_writer", "content_type")

    def __init__(self, req: StubRequest, ans: Answer, binary: bool) -> None:
        self._answer = ans
        self._binary = binary
        self._writer = ChunkWriter(req.request_id, req.model)
        self.content_type = FRAMES if binary else SSE

    def opening(self) -> bytes:
        return b""

    def steps(self) -> Iterator[bytes]:
        ans, writer = self._answer, self._writer
        if ans.tool_call is not None:
            yield _framed(_tool_chunk(writer, ans), self._binary)
            return
        if self._binary:
            for delta in ans.deltas:
                yield writer.content(delta)
        else:
            for delta in ans.deltas:
                yield sse_event(memoryview(writer.content(delta))[4:])

    def closing(self) -> bytes:
        ans = self._answer
        if ans.tool_call is not None:
            return b""  # the tool-call chunk was final
        frame = self._writer.chunk(
            finish_reason=ans.finish, usage=ans.usage, stop_sequence=ans.stop_sequence
        )
        return _framed(frame, self._binary)

    def error(self) -> bytes:
        frame = self._writer.chunk(error=_MID_STREAM_ERROR, finish_reason=FinishReason.ERROR)
        return _framed(frame, self._binary)


class FbsWire:
    """The ``.fbs`` side of the stub (see the module docstring)."""

    path = COMPLETIONS_PATH
    request_id_header = "x-request-id"
    tool_id_prefix = "call_"
    always_streams = True
    posts = NO_POSTS

    def route(self, method: str, path: str) -> Reply:
        if path == self.path:
            return _error(codes.METHOD_NOT_ALLOWED, "use POST")
        return _error(codes.NOT_FOUND, f"no such path {path}")

    def authorize(self, header: HeaderFn, api_key: str) -> Reply | None:
        return None  # an internal protocol: the proxy's callers are checked by the proxy

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        try:
            return parse_request(body)
        except MalformedBuffer as exc:
            raise Rejected(_error(codes.MALFORMED_REQUEST, str(exc))) from None

    def fault(self, fault: str, req: StubRequest) -> Reply:
        code, status, message = _FAULTS[fault]
        reply = _error(code, message, status)
        if fault == "rate_limit":
            reply.headers.extend(_RETRY)
        return reply

    def _headers(self, req: StubRequest, binary: bool) -> list[tuple[str, str]]:
        return [
            ("content-type", FRAMES if binary else SSE),
            *id_header(self.request_id_header, req.request_id),
        ]

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        writer = ChunkWriter(req.request_id, req.model)
        if ans.tool_call is not None:
            frame = _tool_chunk(writer, ans)
        else:
            frame = writer.chunk(
                content=ans.text,
                finish_reason=ans.finish,
                usage=ans.usage,
                stop_sequence=ans.stop_sequence,
            )
        binary = _binary(header)
        return Reply(200, self._headers(req, binary), _framed(frame, binary))

    def failed(self, req: StubRequest, header: HeaderFn) -> Reply:
        frame = ChunkWriter(req.request_id, req.model).chunk(
            error=_MID_STREAM_ERROR, finish_reason=FinishReason.ERROR
        )
        binary = _binary(header)
        return Reply(200, self._headers(req, binary), _framed(frame, binary))

    def stream(self, req: StubRequest, ans: Answer, header: HeaderFn) -> _Rendering:
        return _Rendering(req, ans, _binary(header))

    def canned(self, count: int) -> Canned:
        frames = [write_chunk(content="tok ") for _ in range(count)]
        frames.append(write_chunk(finish_reason=FinishReason.STOP, usage=Usage(0, count)))
        binary = Reply(200, [("content-type", FRAMES)], b"".join(frames))
        sse = Reply(
            200, [("content-type", SSE)], b"".join(sse_event(memoryview(f)[4:]) for f in frames)
        )

        def pick(body: bytes, header: HeaderFn) -> Reply:
            return binary if _binary(header) else sse

        return pick
