"""The relay: a backend's open answer, read through its translator, as chunk frames.

Owns ``Relay``, the one loop both shapes of the proxy run: the HTTP surface
(``service.app``, which sends what it yields to its caller) and the in-process
router (``service.inprocess``, which hands it to the edge as a response body).

- ``first`` waits for the first frames: the caller is watched for leaving
  while the backend's answer is not ready, and the transport's first-byte
  timeout holds until they come (``Response.begun``). A failure here raises
  (nothing was sent, so the caller can be told with a status); ``whole`` says
  whether the frames already end the answer (a non-streamed answer, a fast
  backend), which the HTTP surface sends as one plain response.
- ``frames`` yields the rest (or, for the in-process router, all of it) as it
  is ready: size-prefixed frames passed through whole, or re-framed as SSE
  events. A failure mid-stream is one error chunk, which ends it
  (``fail``; the drain's deadline ends a stream the same way).
- ``close``, once whatever happened (the answer's end, the caller leaving, a
  cancel), closes the backend's answer, which aborts its connection if it is
  not read to its end, and counts the stream's bytes.

What it ends with (``relayed`` bytes, the ``last`` frames relayed, from which
the final chunk's tokens are read, and the ``error`` code of an error chunk)
is the caller's to read once it closes. Knows nothing of HTTP servers.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.errors.codes import ErrorCode
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import CallerWatch
from flatgate.proxy.service.dispatch import Opened
from flatgate.proxy.service.errors import proxy_error
from flatgate.proxy.transport.base import UpstreamError
from flatgate.proxy.wire.buffer import U32
from flatgate.proxy.wire.chunk.frames import ChunkError, MalformedFrame, sse_event, sse_frames
from flatgate.proxy.wire.chunk.reader import last_outcome, read_outcome
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["Relay", "sse_frames"]


class Relay:
    """One backend answer relayed (see the module docstring); ``binary``:
    size-prefixed frames, else SSE."""

    __slots__ = (
        "_closed",
        "_frames",
        "_metrics",
        "_pieces",
        "_rid",
        "binary",
        "error",
        "last",
        "opened",
        "relayed",
        "whole",
    )

    def __init__(self, opened: Opened, rid: str, binary: bool, metrics: Metrics) -> None:
        self.opened = opened
        self._pieces = opened.response.iter_bytes()
        self._rid = rid
        self._metrics = metrics
        self._closed = False
        self._frames: AsyncGenerator[bytes, None] | None = None
        self.binary = binary
        self.whole = False
        self.relayed = 0
        self.last = b""
        self.error: ErrorCode | None = None
        metrics.active_streams.inc()

    async def first(self, watch: CallerWatch | None = None) -> bytes:
        """The first frames, framed (``b""`` when the answer ended without
        any); ``UpstreamError`` or ``TranslatorError`` when the backend fails
        before them. ``watch`` is started whenever the answer is not ready."""
        opened = self.opened
        resp = opened.response
        translator = opened.translator
        pieces = self._pieces
        ready = b""
        while not ready:
            if watch is not None and not resp.ready():
                watch.start()
            piece = await anext(pieces, None)
            if piece is None:
                ready = translator.end()
                self.whole = True
                break
            ready = translator.feed(piece)
        resp.begun()
        if translator.done:
            self.whole = True
        self.last = ready
        out = ready if self.binary else sse_frames(ready)
        self.relayed += len(out)
        return out

    def frames(self) -> AsyncIterator[bytes]:
        """The answer's frames (after ``first``'s, when it was called), framed,
        as they are ready; a backend's failure is one error chunk, the last."""
        if self._frames is None:
            self._frames = self._rest()
        return self._frames

    async def _rest(self) -> AsyncGenerator[bytes, None]:
        translator = self.opened.translator
        binary = self.binary
        try:
            async for piece in self._pieces:
                ready = translator.feed(piece)
                if ready:
                    self.last = ready
                    out = ready if binary else sse_frames(ready)
                    self.relayed += len(out)
                    yield out
                if translator.done:
                    return
            tail = translator.end()
            if tail:
                self.last = tail
                out = tail if binary else sse_frames(tail)
                self.relayed += len(out)
                yield out
        except (UpstreamError, TranslatorError) as exc:
            if isinstance(exc, UpstreamError) and translator.done:
                return  # the answer was whole: a connection broken after it is no failure
            yield self._failed(exc)

    def _failed(self, exc: UpstreamError | TranslatorError) -> bytes:
        err = proxy_error(exc, begun=True)
        return self.fail(err.code, err.message)

    def outcome(self) -> tuple[int | None, str]:
        """The completion tokens and error code of the last frames relayed (the
        final chunk's, when they end the answer): read where the translator
        says the last frame starts (an fbs backend's: ``last_frame_at``),
        else found by walking them; ``(None, "")`` when there are none."""
        last = self.last
        if not last:
            return None, ""
        at = getattr(self.opened.translator, "last_frame_at", None)
        if at is None:
            return last_outcome(last)
        try:
            return read_outcome(last, at + 4, at + 4 + U32(last, at)[0])
        except MalformedFrame:
            return None, ""

    def fail(self, code: ErrorCode, message: str) -> bytes:
        """The error chunk that ends the stream with ``code``, framed."""
        self.error = code
        self.last = b""
        frame = write_chunk(
            request_id=self._rid,
            error=ChunkError(code.code, message),
            finish_reason=FinishReason.ERROR,
        )
        return frame if self.binary else sse_event(memoryview(frame)[4:])

    async def close(self) -> None:
        """Close the backend's answer and count the stream (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._frames is not None:
                await self._frames.aclose()
            await self._pieces.aclose()  # type: ignore[attr-defined]
            await self.opened.close()
        finally:
            self._metrics.relayed_bytes.inc(self.relayed)
            self._metrics.active_streams.dec()
