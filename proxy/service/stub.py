"""The built-in ``.fbs`` model server: deterministic tokens, for runs and tests.

What it answers to a ``CompletionRequest`` (so anyone can check what comes back):

- the completion is the text of the last ``user`` message; each delta is one
  whitespace-delimited word with the whitespace after it (leading whitespace
  rides on the first delta), so joining the deltas gives the text back exactly;
- at most ``max_tokens`` deltas: finish reason ``length`` when it cuts, else
  ``stop``; a last chunk carries ``finish_reason`` and ``usage``
  (``prompt_tokens`` = whitespace-separated words over all messages,
  ``completion_tokens`` = deltas sent);
- when ``tool_choice`` names a function: one tool call to it (id
  ``call_<request id>``, arguments ``{"input": "<last user message>"}``) and
  finish reason ``tool_calls``;
- ``stream`` false: the whole completion as one chunk.

Frames: token deltas, final chunks and canned answers are laid out by
``proxy.frames.write_chunk``; tool-call chunks are built with a builder leased
from the stub's ``BuilderPool``.

Framing by ``Accept``: ``application/x-flatbuffers-stream`` gives size-prefixed
frames, anything else SSE (``data: <base64>``).

Faults, for tests, from the ``--fault`` flag (every request) or the request's
metadata key ``stub.fault`` (that request), with ``stub.fault_after`` = N
deltas sent first (default 0):

- ``fail``: HTTP 503 before the first byte;
- ``stall``: no response head at all (the caller's read timeout fires);
- ``die``: N deltas, then the connection is cut without a final chunk;
- ``hang``: N deltas, then silence with the connection open.

Canned mode (``--canned N``): every request, whatever its body, gets N fixed
deltas (``"tok "``) and a final chunk, built once at start-up and sent in one
write: a backend of fixed, minimal cost for load benchmarks.

``GET /stats`` reports streams started, completed, cancelled (the caller went
away) and active, frames sent, and the SHA-256 and a few headers of the last
request (what a proxy forwarded), as JSON; ``GET /healthz`` says ok.

The ``die`` fault needs the ASGI interface (the default): granian's RSGI
leaves a stream open when its handler fails, so no cut reaches the caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field

from flatgate.generated.LLMGateway import CompletionRequest as _fb_req
from flatgate.proxy.plumbing.serve import Exchange, ServerApp
from flatgate.proxy.service.settings import FAULTS, StubSection, load_config
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.codes import ErrorCode, error_body
from flatgate.proxy.wire.frames import ToolCallDelta, Usage, build_chunk, sse_event, write_chunk
from flatgate.proxy.wire.pool import BuilderPool
from flatgate.proxy.wire.schema import FRAMES, JSON, SSE, FinishReason, Role, ToolChoiceMode
from flatgate.proxy.wire.verify import MalformedBuffer, verify_request

__all__ = ["FAULTS", "StubRequest", "StubServer", "create_app", "deltas_of", "parse_request"]

_WORD = re.compile(r"\S+\s*")
# Longest a stalled or hanging stub waits before giving up on its own.
_STALL_SECONDS = 3600.0
_SEEN_HEADERS = ("x-request-id", "authorization", "proxy-authorization", "cookie", "te", "upgrade")


@dataclass(frozen=True, slots=True)
class StubRequest:
    request_id: str
    model: str
    messages: tuple[tuple[int, str], ...]
    max_tokens: int
    forced_tool: str
    stream: bool
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def last_user(self) -> str:
        for role, content in reversed(self.messages):
            if role == Role.User:
                return content
        return ""

    @property
    def prompt_tokens(self) -> int:
        return sum(len(content.split()) for _, content in self.messages)


def _s(value: bytes | None) -> str:
    return value.decode("utf-8", "replace") if value else ""


def parse_request(body: bytes) -> StubRequest:
    """Verify and decode what the stub needs; raises ``MalformedBuffer``."""
    verify_request(body)
    req = _fb_req.CompletionRequest.GetRootAs(body, 0)
    messages = []
    for i in range(req.MessagesLength()):
        m = req.Messages(i)
        messages.append((m.Role(), _s(m.Content())))
    metadata = {}
    for i in range(req.MetadataLength()):
        kv = req.Metadata(i)
        metadata[_s(kv.Key())] = _s(kv.Value())
    forced = _s(req.ToolChoiceName()) if req.ToolChoice() == ToolChoiceMode.Function else ""
    return StubRequest(
        request_id=_s(req.RequestId()),
        model=_s(req.ModelName()),
        messages=tuple(messages),
        max_tokens=req.MaxTokens(),
        forced_tool=forced,
        stream=bool(req.Stream()),
        metadata=metadata,
    )


def deltas_of(text: str, limit: int = 0) -> list[str]:
    """Split ``text`` into word deltas that join back to it exactly.

    With ``limit`` > 0, at most ``limit + 1`` deltas (enough to know it cut).
    """
    if limit > 0:
        words = [m.group() for m in itertools.islice(_WORD.finditer(text), limit + 1)]
    else:
        words = _WORD.findall(text)
    lead = text[: len(text) - len(text.lstrip())]
    if not words:
        return [text] if text else []
    words[0] = lead + words[0]
    return words


class _Stats:
    def __init__(self) -> None:
        self.started = 0
        self.completed = 0
        self.cancelled = 0
        self.active = 0
        self.frames = 0
        # What the last request looked like, for tests of what proxies forward.
        self.last_body_sha256 = ""
        self.last_headers: dict[str, str | None] = {}


class StubServer:
    """The stub's request handler (see the module docstring for its behaviour)."""

    def __init__(self, settings: StubSection, fault: str | None = None) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}: expected one of {', '.join(FAULTS)}")
        self.settings = settings
        self.fault = fault
        self.pool = BuilderPool()
        self.stats = _Stats()
        self._canned: dict[bool, bytes] = {}
        if settings.canned > 0:
            frames = [write_chunk(content="tok ") for _ in range(settings.canned)]
            frames.append(
                write_chunk(finish_reason=FinishReason.STOP, usage=Usage(0, settings.canned))
            )
            self._canned[True] = b"".join(frames)
            self._canned[False] = b"".join(sse_event(memoryview(f)[4:]) for f in frames)

    async def __call__(self, ex: Exchange) -> None:
        if ex.path == "/healthz":
            await ex.respond(200, [("content-type", "text/plain")], b"ok\n")
            return
        if ex.path == "/stats":
            s = self.stats
            body = json.dumps(
                {
                    "started": s.started,
                    "completed": s.completed,
                    "cancelled": s.cancelled,
                    "active": s.active,
                    "frames": s.frames,
                    "last_body_sha256": s.last_body_sha256,
                    "last_headers": s.last_headers,
                    "pool_leased": self.pool.leased,
                }
            ).encode()
            await ex.respond(200, [("content-type", JSON)], body)
            return
        if ex.path != "/v1/completions":
            await _error(ex, codes.NOT_FOUND, f"no such path {ex.path}")
            return
        if ex.method != "POST":
            await _error(ex, codes.METHOD_NOT_ALLOWED, "use POST")
            return
        body = await ex.body()
        if self._canned:
            binary = FRAMES in (ex.header("accept") or "")
            self.stats.started += 1
            self.stats.completed += 1
            ctype = FRAMES if binary else SSE
            await ex.respond(200, [("content-type", ctype)], self._canned[binary])
            return
        self.stats.last_body_sha256 = hashlib.sha256(body).hexdigest()
        self.stats.last_headers = {name: ex.header(name) for name in _SEEN_HEADERS}
        try:
            req = parse_request(body)
        except MalformedBuffer as exc:
            await _error(ex, codes.MALFORMED_REQUEST, str(exc))
            return
        fault = req.metadata.get("stub.fault") or self.fault
        if fault == "fail":
            await _error(ex, codes.BACKEND_UNAVAILABLE, "stub fault: fail", status=503)
            return
        binary = FRAMES in (ex.header("accept") or "")
        self.stats.started += 1
        self.stats.active += 1
        work = asyncio.ensure_future(self._generate(ex, req, fault, binary))
        gone = asyncio.ensure_future(ex.disconnected())
        try:
            done, _ = await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                work.result()
                self.stats.completed += 1
            else:
                work.cancel()
                self.stats.cancelled += 1
                await asyncio.gather(work, return_exceptions=True)
        finally:
            gone.cancel()
            self.stats.active -= 1

    async def _generate(
        self, ex: Exchange, req: StubRequest, fault: str | None, binary: bool
    ) -> None:
        if fault == "stall":
            await asyncio.sleep(_STALL_SECONDS)
            return
        fault_after = int(req.metadata.get("stub.fault_after", "0") or 0)
        content_type = FRAMES if binary else SSE
        sink = await ex.stream(
            200, [("content-type", content_type), ("x-request-id", req.request_id)]
        )
        pool, rid, model = self.pool, req.request_id, req.model

        stats = self.stats

        async def send(frame: bytes) -> None:
            await sink.send(frame if binary else sse_event(memoryview(frame)[4:]))
            stats.frames += 1

        if self.settings.ttft_ms:
            await asyncio.sleep(self.settings.ttft_ms / 1000)
        if req.forced_tool:
            call = ToolCallDelta(
                index=0,
                id=f"call_{rid or 'stub'}",
                name=req.forced_tool,
                arguments=json.dumps({"input": req.last_user}),
            )
            frame = build_chunk(
                pool,
                request_id=rid,
                model=model,
                tool_calls=(call,),
                finish_reason=FinishReason.TOOL_CALLS,
                usage=Usage(req.prompt_tokens, 1),
            )
            await send(frame)
            await sink.close()
            return
        deltas = deltas_of(req.last_user, req.max_tokens)
        finish = FinishReason.STOP
        if req.max_tokens > 0 and len(deltas) > req.max_tokens:
            deltas = deltas[: req.max_tokens]
            finish = FinishReason.LENGTH
        usage = Usage(req.prompt_tokens, len(deltas))
        if not req.stream:
            frame = write_chunk(
                request_id=rid,
                model=model,
                content="".join(deltas),
                finish_reason=finish,
                usage=usage,
            )
            await send(frame)
            await sink.close()
            return
        itl = self.settings.itl_ms / 1000
        for i, delta in enumerate(deltas):
            if fault in ("die", "hang") and i == fault_after:
                break
            await send(write_chunk(request_id=rid, model=model, content=delta))
            if itl:
                await asyncio.sleep(itl)
        else:
            await send(write_chunk(request_id=rid, model=model, finish_reason=finish, usage=usage))
            await sink.close()
            return
        if fault == "hang":
            await asyncio.sleep(_STALL_SECONDS)
        # "die": end the handler with an error so the server cuts the connection.
        raise ConnectionAbortedError("stub fault: die")


async def _error(ex: Exchange, code: ErrorCode, message: str, *, status: int = 0) -> None:
    await ex.respond(status or code.status, [("content-type", JSON)], error_body(code, message))


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_STUB_*``."""
    config = load_config()
    return ServerApp(StubServer(config.stub, config.stub.fault or None))
