"""The streams bench's client: N keep-alive connections, each streaming back to back.

Owns the load and what is recorded of it. One process, one event loop
(uvloop), no coroutine per token: each connection is an ``asyncio.Protocol``
whose bytes go to llhttp (``httptools``) and from its body callback to a
checker that counts the stream's tokens as they arrive:

- ``fbs``: size-prefixed chunk frames (``application/x-flatbuffers-stream``),
  each read with ``wire.chunk.reader.read_chunk``;
- ``openai``: SSE ``chat.completion.chunk`` events, read with msgspec.

A frame or event is decoded once and remembered by its bytes (``_Memo``): a
cadence stream repeats the same delta, so the check costs a dict lookup per
token. A stream is right when it carries exactly ``tokens`` deltas of
``token`` and then its end: the final frame with the usage (``fbs``), or the
finish, the usage chunk and ``[DONE]`` (``openai``). Anything else is an
error of one kind (``ERROR_KINDS``), and the connection is replaced.

Closed loop: a connection starts its next stream as soon as the last one
ended, until ``measure_to``; the streams that *start* in ``[measure_from,
measure_to)`` are the measured ones (``Record.measured``). Loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import httptools
import msgspec

from flatgate.proxy.wire.chunk.frames import MalformedFrame
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["ERROR_KINDS", "Call", "Client", "Record"]

Kind = Literal["fbs", "openai"]
# How a stream can go wrong (besides an HTTP status, ``http_<status>``).
ERROR_KINDS = (
    "connect",  # the connection could not be made
    "closed",  # the connection ended mid-stream
    "truncated",  # the answer ended without its end (final frame / [DONE])
    "bad_content",  # wrong token count or text, bad usage, an error chunk, garbage
    "timeout",  # no byte for the stream timeout
    "unfinished",  # still running when the run's drain time was over
)
_U32 = struct.Struct("<I").unpack_from
_MEMO_LIMIT = 50_000
_RAMP_STEP = 0.01

# What one frame or event is, for the checker: (kind, value).
TOKEN, SKIP, FINAL, USAGE, DONE, BAD = range(6)


@dataclass(frozen=True, slots=True)
class Call:
    """What every stream of a row sends, and what it must get back."""

    host: str
    port: int
    request: bytes  # the whole HTTP request: head and body
    kind: Kind
    tokens: int
    token: str


@dataclass(slots=True)
class Record:
    """One stream: times in seconds on the client's clock (``perf_counter``)."""

    start: float
    ttft: float  # to the first token; NaN when none came
    duration: float  # to the end of the answer (or the error)
    error: str  # "" when the stream was right
    measured: bool


class _Memo:
    """Frame or event bytes -> what they are, bounded."""

    def __init__(self, token: str, classify: Callable[[bytes, str], tuple[int, int]]) -> None:
        self.token = token
        self.classify = classify
        self.seen: dict[bytes, tuple[int, int]] = {}

    def __call__(self, data: bytes) -> tuple[int, int]:
        got = self.seen.get(data)
        if got is None:
            got = self.classify(data, self.token)
            if len(self.seen) >= _MEMO_LIMIT:
                self.seen.clear()
            self.seen[data] = got
        return got


def _classify_frame(frame: bytes, token: str) -> tuple[int, int]:
    try:
        c = read_chunk(frame)
    except MalformedFrame:
        return BAD, 0
    if c.error is not None or c.tool_calls:
        return BAD, 0
    if c.finish_reason != FinishReason.NONE:
        if c.content or c.usage is None:
            return BAD, 0
        return FINAL, c.usage.completion_tokens
    return _tokens(c.content, token)


class _Event(msgspec.Struct):
    choices: list[dict[str, Any]] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


_EVENT = msgspec.json.Decoder(_Event)


def _classify_event(event: bytes, token: str) -> tuple[int, int]:
    if event.startswith(b":"):
        return SKIP, 0  # an SSE comment (keep-alive)
    if not event.startswith(b"data: "):
        return BAD, 0
    data = event[6:]
    if data == b"[DONE]":
        return DONE, 0
    try:
        e = _EVENT.decode(data)
    except msgspec.DecodeError:
        return BAD, 0
    if e.error is not None:
        return BAD, 0
    if not e.choices:
        if e.usage is None:
            return BAD, 0
        return USAGE, int(e.usage.get("completion_tokens") or -1)
    choice = e.choices[0]
    content = (choice.get("delta") or {}).get("content")
    if choice.get("finish_reason"):
        return (FINAL, 0) if not content else (BAD, 0)
    return _tokens(content, token)


def _tokens(content: str | None, token: str) -> tuple[int, int]:
    """A delta's text as tokens: ``k`` tokens when it is the token ``k``
    times (a gateway sends the tokens of one read as one delta), nothing
    when it is empty, else wrong."""
    if not content:
        return SKIP, 0
    if content == token:
        return TOKEN, 1
    k, rest = divmod(len(content), len(token))
    return (TOKEN, k) if not rest and content == token * k else (BAD, 0)


class _Check:
    """One stream's bytes so far: its tokens, its end, and whether it went wrong."""

    __slots__ = ("bad", "carry", "ended", "final", "memo", "tokens", "usage", "want")

    def __init__(self, memo: _Memo, want: int) -> None:
        self.memo = memo
        self.want = want
        self.carry = b""
        self.tokens = 0
        self.final = False  # fbs: the final frame; openai: the finish chunk
        self.usage = -1
        self.ended = False  # fbs: the final frame; openai: [DONE]
        self.bad = False

    def see(self, what: tuple[int, int]) -> None:
        kind, value = what
        if self.ended:
            self.bad = True  # anything after the end
        elif kind == TOKEN:
            self.tokens += value
            if self.final:
                self.bad = True
        elif kind == FINAL:
            if self.final:
                self.bad = True
            self.final = True
            if value:
                self.usage = value
        elif kind == USAGE:
            self.usage = value
        elif kind == DONE:
            self.ended = True
        elif kind == BAD:
            self.bad = True

    def feed_frames(self, data: bytes) -> None:
        if self.carry:
            data = self.carry + data
            self.carry = b""
        n = len(data)
        pos = 0
        memo = self.memo
        while n - pos >= 4:
            end = pos + 4 + _U32(data, pos)[0]
            if end > n:
                break
            self.see(memo(data if pos == 0 and end == n else data[pos:end]))
            if self.final:
                self.ended = True
            pos = end
        if pos < n:
            self.carry = data[pos:]

    def feed_events(self, data: bytes) -> None:
        if self.carry:
            data = self.carry + data
            self.carry = b""
        memo = self.memo
        pos = 0
        while True:
            cut = data.find(b"\n\n", pos)
            if cut < 0:
                break
            self.see(memo(data[pos:cut]))
            pos = cut + 2
        if pos < len(data):
            self.carry = data[pos:]

    def verdict(self) -> str:
        if self.bad or self.carry:
            return "bad_content"
        if not self.ended:
            return "truncated"
        if self.tokens != self.want or self.usage != self.want:
            return "bad_content"
        return ""


class _Conn(asyncio.Protocol):
    """One keep-alive connection, one stream after the other."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.busy = False
        self.start = 0.0
        self.first = 0.0
        self.status = 0
        self.check: _Check | None = None
        self.received = 0  # bytes, for the stall check
        self.seen = 0  # ... as of the last check
        self.stalled = 0  # seconds without a byte while busy
        self.gone = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.client.opened(self)
        self.begin()

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.fail("bad_content")

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        if self.busy:
            self.end("closed")
        self.client.closed(self)

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        check = self.check
        if check is None or self.status != 200:
            return
        before = check.tokens
        if self.client.call.kind == "fbs":
            check.feed_frames(body)
        else:
            check.feed_events(body)
        got = check.tokens - before
        if got:
            self.client.tokens += got
            if not before:
                self.first = time.perf_counter()

    def on_message_complete(self) -> None:
        if not self.busy:
            return
        check = self.check
        if self.status != 200:
            self.end(f"http_{self.status}")
        else:
            self.end(check.verdict() if check is not None else "bad_content")
        if self.gone or not self.parser.should_keep_alive():
            self.close()
        else:
            self.begin()

    # the streams
    def begin(self) -> None:
        client = self.client
        if self.gone or self.transport is None:
            return
        now = time.perf_counter()
        if now >= client.measure_to or client.stopping:
            return
        self.busy = True
        self.start = now
        self.first = 0.0
        self.status = 0
        self.stalled = 0
        self.check = _Check(client.memo, client.call.tokens)
        self.transport.write(client.call.request)

    def end(self, error: str) -> None:
        self.busy = False
        self.check = None
        now = time.perf_counter()
        ttft = self.first - self.start if self.first else float("nan")
        client = self.client
        client.record(Record(self.start, ttft, now - self.start, error, False))
        if now >= client.measure_to:
            client.check_idle()

    def fail(self, error: str) -> None:
        """End the stream with ``error`` and drop the connection."""
        if self.busy:
            self.end(error)
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.gone:
            self.gone = True
            self.transport.abort()


class Client:
    """Keeps ``connections`` connections streaming until ``measure_to``
    (``run``); ``records`` has every stream (``measured`` or not), ``tokens``
    and ``finished`` are running counts of every token and stream."""

    def __init__(
        self,
        call: Call,
        connections: int,
        *,
        warmup: float,
        seconds: float,
        drain: float,
        stream_timeout: float,
        ramp_seconds: float = 0.0,
    ) -> None:
        self.call = call
        self.connections = connections
        self.warmup = warmup
        self.seconds = seconds
        self.drain = drain
        self.stream_timeout = stream_timeout
        # Connections are opened evenly over this long (one stream's nominal
        # length: the streams' starts spread evenly over it, and stay so).
        self.ramp = ramp_seconds
        self.memo = _Memo(call.token, _classify_frame if call.kind == "fbs" else _classify_event)
        self.t0 = 0.0
        self.measure_from = 0.0
        self.measure_to = float("inf")
        self.stopping = False
        self.tokens = 0
        self.finished = 0
        self.records: list[Record] = []  # every stream, measured or not
        self.live: set[_Conn] = set()
        self.connecting = 0
        self._idle: asyncio.Event | None = None
        self._tasks: set[asyncio.Future[None]] = set()

    # bookkeeping, called by the connections
    def record(self, r: Record) -> None:
        self.finished += 1
        r.measured = self.measure_from <= r.start < self.measure_to
        self.records.append(r)

    def opened(self, conn: _Conn) -> None:
        self.live.add(conn)

    def closed(self, conn: _Conn) -> None:
        self.live.discard(conn)
        if not self.stopping and time.perf_counter() < self.measure_to:
            self._connect_soon()
        self.check_idle()

    def check_idle(self) -> None:
        if self._idle is not None and not any(c.busy for c in self.live) and not self.connecting:
            self._idle.set()

    # connections
    def _connect_soon(self, delay: float = 0.0) -> None:
        asyncio.get_running_loop().call_later(delay, self._spawn_connect)

    def _spawn_connect(self) -> None:
        self.connecting += 1
        task = asyncio.ensure_future(self._connect())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: _Conn(self), self.call.host, self.call.port)
        except OSError:
            now = time.perf_counter()
            self.record(Record(now, float("nan"), 0.0, "connect", False))
            if not self.stopping and now < self.measure_to:
                self._connect_soon(0.1)
        finally:
            self.connecting -= 1
            self.check_idle()

    def _watch(self) -> None:
        """Once a second: a busy connection without a byte for the stream
        timeout is a ``timeout``."""
        for conn in list(self.live):
            if not conn.busy:
                continue
            if conn.received == conn.seen:
                conn.stalled += 1
                if conn.stalled >= self.stream_timeout:
                    conn.fail("timeout")
            else:
                conn.stalled = 0
            conn.seen = conn.received
        if not self.stopping:
            asyncio.get_running_loop().call_later(1.0, self._watch)

    async def run(self, on_start: Callable[[float], None] | None = None) -> None:
        """Open the connections (evenly over ``ramp_seconds``), stream until
        the window ends, wait for the streams in flight (up to ``drain``
        seconds), close everything."""
        self.t0 = time.perf_counter()
        self.measure_from = self.t0 + self.warmup
        self.measure_to = self.measure_from + self.seconds
        if on_start is not None:
            on_start(self.t0)
        self._idle = asyncio.Event()
        self._watch()
        steps = max(1, math.ceil(self.ramp / _RAMP_STEP))
        loop = asyncio.get_running_loop()
        began = loop.time()
        opened = 0
        for i in range(1, steps + 1):
            due = math.ceil(self.connections * i / steps)
            for _ in range(due - opened):
                self._spawn_connect()
            opened = due
            if i < steps:
                await asyncio.sleep(max(0.0, began + i * _RAMP_STEP - loop.time()))
        await asyncio.sleep(max(0.0, self.measure_to - time.perf_counter()))
        self._idle.clear()
        self.check_idle()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), self.drain)
        self.stopping = True
        for conn in list(self.live):
            if conn.busy:
                conn.fail("unfinished")
            else:
                conn.close()
        await asyncio.sleep(0.05)
