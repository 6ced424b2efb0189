"""The stub's cadence mode: many paced streams for little CPU (``[stub] cadence``).

A load benchmark of thousands of concurrent token streams must measure the
gateway, not the stub. In cadence mode the stub answers every completion
request with ``cadence_tokens`` deltas of ``"tok "`` and a final frame with
the usage, without reading the body, and:

- every byte it sends is built once per worker (``Prebuilt``, by the wire's
  own renderer, so the frames are exactly what the echo would send): the
  opening with the first delta, one delta reused for every later token, and
  the closing (finish, usage, end-of-stream marker). ``fbs`` keeps one set
  per framing (binary ``application/x-flatbuffers-stream`` or SSE, by
  ``Accept``); ``openai`` streams carry the usage chunk (as with
  ``stream_options.include_usage``);
- one timer per worker (``Clock``) paces every stream: a stream's first delta
  goes out at the first tick after ``ttft_ms``; from then on, each tick
  (every ``itl_ms``) writes the next frame of every stream at once, the way a
  batching model server emits a token for every sequence at each step. No
  task, future or timer per token: a write is the sink's send, driven by the
  tick, and only a write that must wait (a slow reader under ASGI) is
  finished by a callback of its own, its stream skipping ticks meanwhile.
  A tick that comes more than a period late is counted (``late_ticks``,
  ``max_lag_ms`` in ``/stats``), and the grid starts again from it;
- a request whose body does not ask for a stream (``openai``, ``anthropic``:
  ``"stream": false`` or none) gets the whole answer after ``ttft_ms``; an
  ``fbs`` request always gets a stream.

The caller going away is noticed as in echo mode (the stream is dropped from
the clock and counted ``cancelled``), and so is a write that fails. Faults do
not apply.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from flatgate.proxy.backends.dialect import Answer, HeaderFn, Reply, StubRequest, Wire, is_streamed
from flatgate.proxy.plumbing.serve import Exchange, Sink
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.schema import FRAMES, FinishReason

__all__ = ["TOKEN", "CadenceMode", "Clock", "Counts", "Prebuilt", "prebuilt"]

# The text of every delta a cadence stream carries.
TOKEN = "tok "


class Counts(Protocol):
    """The stub's stream counters (``server._Stats``)."""

    started: int
    completed: int
    cancelled: int
    active: int
    frames: int


@dataclass(frozen=True, slots=True)
class Prebuilt:
    """The bytes of every cadence stream in one framing: ``first`` (the
    opening and the first delta), ``delta`` (each later one), ``final``."""

    content_type: str
    first: bytes
    delta: bytes
    final: bytes


def _request(tokens: int) -> tuple[StubRequest, Answer]:
    req = StubRequest("cadence", "stub-cadence", (), tokens, "", True, include_usage=True)
    ans = Answer((TOKEN,) * tokens, FinishReason.STOP, Usage(0, tokens))
    return req, ans


def prebuilt(wire: Wire, tokens: int, header: HeaderFn) -> Prebuilt:
    """The frames of a ``tokens``-delta stream, rendered once by ``wire`` for
    a request with these headers (``Accept`` picks the ``fbs`` framing)."""
    if tokens < 1:
        raise ValueError("a cadence stream needs at least one token")
    req, ans = _request(tokens)
    r = wire.stream(req, ans, header)
    delta = next(iter(r.steps()))
    return Prebuilt(r.content_type, r.opening() + delta, delta, r.closing())


class _Stream:
    """One stream on the clock: what it sends and how far it got."""

    __slots__ = ("blocked", "done", "due", "frames", "left", "sink")

    def __init__(
        self, sink: Sink, frames: Prebuilt, tokens: int, due: float, done: asyncio.Future[None]
    ) -> None:
        self.sink: Sink | None = sink
        self.frames = frames
        # Frames still to send after the first: the later deltas, then the final.
        self.left = tokens
        self.due = due
        self.done = done
        self.blocked = False


_Send = Coroutine[Any, Any, None]


class Clock:
    """One timer for every stream of a worker (see the module docstring).

    ``add`` puts a stream on the clock once its head is sent; its ``done``
    future ends when the final frame is written, or with the error a write
    raised. ``drop`` takes a stream off (its caller went away).
    """

    def __init__(self, ttft: float, itl: float, tokens: int, counts: Counts) -> None:
        if ttft < 0 or itl < 0 or tokens < 1:
            raise ValueError("cadence: need ttft >= 0, itl >= 0 and tokens >= 1")
        self.ttft = ttft
        self.itl = itl
        self.tokens = tokens
        self.counts = counts
        self.ticks = 0
        self.late_ticks = 0
        self.max_lag = 0.0
        self._waiting: collections.deque[_Stream] = collections.deque()
        self._active: list[_Stream] = []
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._at = 0.0  # when the pending tick is due
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def streams(self) -> int:
        """Streams on the clock: waiting for their first token, or sending."""
        return sum(s.left >= 0 for s in (*self._waiting, *self._active))

    def add(self, sink: Sink, frames: Prebuilt) -> _Stream:
        loop = self._loop = asyncio.get_running_loop()
        s = _Stream(sink, frames, self.tokens, loop.time() + self.ttft, loop.create_future())
        self._waiting.append(s)
        if self._handle is None:
            self._schedule(s.due)
        return s

    def drop(self, s: _Stream) -> None:
        """Off the clock: nothing more is written to ``s``."""
        s.sink = None
        s.left = -1
        if not s.done.done():
            s.done.cancel()

    def stats(self) -> dict[str, float]:
        return {
            "ticks": self.ticks,
            "late_ticks": self.late_ticks,
            "max_lag_ms": round(self.max_lag * 1e3, 3),
        }

    # the timer -------------------------------------------------------------

    def _schedule(self, at: float) -> None:
        loop = self._loop
        assert loop is not None
        self._at = at
        if at <= loop.time():
            self._handle = loop.call_soon(self._tick)
        else:
            self._handle = loop.call_at(at, self._tick)

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        lag = now - self._at
        self.ticks += 1
        self.max_lag = max(self.max_lag, lag)
        sent = 0
        # Every stream already sending gets its next frame...
        keep: list[_Stream] = []
        for s in self._active:
            if s.left < 0:
                continue  # dropped
            if not s.blocked:
                s.left -= 1
                frame = s.frames.delta if s.left > 0 else s.frames.final
                sent += 1
                if not self._write(s, frame):
                    continue
            if s.left > 0 or s.blocked:
                keep.append(s)
        # ... and every stream whose first token is due starts.
        waiting = self._waiting
        while waiting and waiting[0].due <= now:
            s = waiting.popleft()
            if s.left < 0:
                continue
            sent += 1
            if self._write(s, s.frames.first) and (s.left > 0 or s.blocked):
                keep.append(s)
        self._active = keep
        self.counts.frames += sent
        self._handle = None
        if keep:
            at = self._at + self.itl
            if at < now:  # a whole period late: count it, start the grid again
                self.late_ticks += 1
                at = now + self.itl
            self._schedule(at)
        elif waiting:
            self._schedule(waiting[0].due)

    # writes ----------------------------------------------------------------

    def _write(self, s: _Stream, frame: bytes) -> bool:
        """Send ``frame``; whether the stream goes on (a write that waits
        finishes later, the stream ``blocked`` until then)."""
        sink = s.sink
        if sink is None:
            return False
        self._step(s, sink.send(frame))
        return s.left >= 0

    def _step(self, s: _Stream, send: _Send) -> None:
        try:
            waits = send.send(None)
        except StopIteration:
            s.blocked = False
            if s.left == 0:
                self._finish(s)
            return
        except Exception as exc:
            self._fail(s, exc)
            return
        s.blocked = True
        self._park(s, send, waits)

    def _park(self, s: _Stream, send: _Send, waits: Any) -> None:
        """The write waits on ``waits`` (a future, or ``None``: the next loop
        iteration): go on with it when that is done, as a task would."""
        loop = self._loop
        assert loop is not None

        def resume(*_: object) -> None:
            self._resume(s, send)

        if waits is None:
            loop.call_soon(resume)
            return
        add: Callable[[Callable[..., None]], None] | None = getattr(
            waits, "add_done_callback", None
        )
        if add is None:
            send.close()
            self._fail(s, RuntimeError(f"cadence: a send yielded {waits!r}"))
            return
        if hasattr(waits, "_asyncio_future_blocking"):
            waits._asyncio_future_blocking = False
        add(resume)

    def _resume(self, s: _Stream, send: _Send) -> None:
        if s.left < 0:  # dropped while it waited
            send.close()
            return
        self._step(s, send)

    def _finish(self, s: _Stream) -> None:
        s.left = -1
        s.sink = None
        if not s.done.done():
            s.done.set_result(None)

    def _fail(self, s: _Stream, exc: Exception) -> None:
        s.left = -1
        s.sink = None
        if not s.done.done():
            s.done.set_exception(exc)


def _no_header(name: str) -> str | None:
    return None


class CadenceMode:
    """The request handler of cadence mode (``StubServer`` hands it every
    completion request, its body read)."""

    def __init__(
        self,
        wire: Wire,
        counts: Counts,
        *,
        ttft_ms: float,
        itl_ms: float,
        tokens: int,
        always_stream: bool,
    ) -> None:
        self.wire = wire
        self.tokens = tokens
        self.counts = counts
        # fbs: every request streams (its body is not read for the flag).
        self.always_stream = always_stream
        self.ttft = ttft_ms / 1000
        self.clock = Clock(self.ttft, itl_ms / 1000, tokens, counts)
        self._built: dict[bool, Prebuilt] = {}
        req, ans = _request(tokens)
        # A non-streamed answer, the same for every request (its headers ignored).
        self._whole = wire.complete(req, ans, _no_header)

    def frames(self, header: HeaderFn) -> Prebuilt:
        binary = FRAMES in (header("accept") or "")
        built = self._built.get(binary)
        if built is None:
            built = self._built[binary] = prebuilt(self.wire, self.tokens, header)
        return built

    async def __call__(self, ex: Exchange, body: bytes) -> None:
        counts = self.counts
        counts.started += 1
        if not self.always_stream and not is_streamed(body):
            await self._whole_answer(ex)
            return
        frames = self.frames(ex.header)
        counts.active += 1
        stream: _Stream | None = None
        try:
            sink = await ex.stream(200, [("content-type", frames.content_type)])
            stream = self.clock.add(sink, frames)
            gone = asyncio.ensure_future(ex.disconnected())
            try:
                await asyncio.wait((stream.done, gone), return_when=asyncio.FIRST_COMPLETED)
            finally:
                gone.cancel()
            done = stream.done
            if done.done() and not done.cancelled() and done.exception() is None:
                stream = None
                await sink.close()
                counts.completed += 1
            else:
                counts.cancelled += 1
        finally:
            counts.active -= 1
            if stream is not None:
                self.clock.drop(stream)
                if not stream.done.cancelled():
                    stream.done.exception()  # retrieved: a failed write is a cancel

    async def _whole_answer(self, ex: Exchange) -> None:
        if self.ttft:
            await asyncio.sleep(self.ttft)
        reply: Reply = self._whole
        await ex.respond(reply.status, reply.headers, reply.body)
        self.counts.frames += 1
        self.counts.completed += 1
