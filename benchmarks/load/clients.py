"""The load bench's clients: wrk at saturation, asyncio for rate, latency and streams.

Owns how load is offered and what is recorded:

- ``run_wrk``: Debian's ``wrk`` (one thread, fixed connections, closed loop)
  with a generated Lua script that POSTs the body file and prints one
  ``WRKJSON {...}`` line from its ``done`` hook (``parse_wrk`` reads it);
- ``fixed_rate``: an open-loop client on ``transport.fast.PoolTransport``:
  request *i* is started at ``t0 + i / rate`` whether or not earlier answers
  came back, each latency timed from its own start to the last body byte;
- ``post``: one request on a keep-alive pool, its answer read whole;
  ``timed``: the same, its latency (or its failure) kept in a ``LatencyRun``;
- ``one_connection``: one keep-alive connection, one request after the other
  (the unloaded latency, and the time to each answer's first body byte: a
  stream's first event);
- ``streams``: streamed completions on a few connections, timing the first
  content token, the gaps between tokens and the whole stream, and checking
  the text.

Loopback only. Figures are reported, never asserted here.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flatgate.proxy.backends.bedrock.eventstream import EventStreamParser
from flatgate.proxy.transport.base import Timeouts, Upstream, UpstreamError
from flatgate.proxy.transport.fast import PoolTransport
from flatgate.proxy.wire.chunk.frames import FrameSplitter
from flatgate.proxy.wire.chunk.stock import decode_chunk

__all__ = [
    "LatencyRun",
    "StreamRun",
    "WrkResult",
    "answer_text",
    "converse_text",
    "fixed_rate",
    "gemini_text",
    "one_connection",
    "parse_wrk",
    "post",
    "run_wrk",
    "sse_text",
    "streams",
    "timed",
    "wrk_script",
]

Headers = Sequence[tuple[str, str]]
_TIMEOUTS = Timeouts(connect=5.0, read=30.0, total=60.0)


# wrk ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WrkResult:
    requests: int
    seconds: float
    errors: int
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def _lua_string(text: str) -> str:
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{out}"'


def wrk_script(body_path: Path, headers: Headers) -> str:
    """A wrk Lua script: POST the file's bytes with ``headers``; report as JSON."""
    lines = [
        'wrk.method = "POST"',
        f"local f = assert(io.open({_lua_string(str(body_path))}, 'rb'))",
        'wrk.body = f:read("*a")',
        "f:close()",
    ]
    lines += [f"wrk.headers[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers]
    lines.append(
        """function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %.0f, "duration_us": %.0f, "errors": %.0f, '
    .. '"p50_us": %.1f, "p99_us": %.1f}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end"""
    )
    return "\n".join(lines) + "\n"


def parse_wrk(stdout: str) -> WrkResult:
    """The ``WRKJSON`` line of a run; ``ValueError`` when there is none."""
    for line in stdout.splitlines():
        if line.startswith("WRKJSON "):
            d = json.loads(line[len("WRKJSON ") :])
            return WrkResult(
                requests=int(d["requests"]),
                seconds=float(d["duration_us"]) / 1e6,
                errors=int(d["errors"]),
                p50_ms=float(d["p50_us"]) / 1e3,
                p99_ms=float(d["p99_us"]) / 1e3,
            )
    raise ValueError(f"no WRKJSON line in wrk's output: {stdout[-500:]!r}")


def run_wrk(
    binary: str, url: str, script: Path, *, connections: int, seconds: int, threads: int = 1
) -> WrkResult:
    """One bounded wrk run (closed loop, ``connections`` keep-alive connections)."""
    cmd = [binary, f"-t{threads}", f"-c{connections}", f"-d{max(1, seconds)}s", "--timeout", "10s"]
    cmd += ["-s", str(script), url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr[-500:]}")
    return parse_wrk(done.stdout)


# asyncio clients ------------------------------------------------------------


@dataclass(slots=True)
class LatencyRun:
    latencies: list[float] = field(default_factory=list)  # seconds
    errors: int = 0
    sent: int = 0
    seconds: float = 0.0
    max_lag: float = 0.0  # how late the client started a request, at worst
    first_bytes: list[float] = field(default_factory=list)  # seconds to the first body byte


async def post(
    transport: PoolTransport,
    url: str,
    body: bytes,
    headers: Headers,
    *,
    timeouts: Timeouts = _TIMEOUTS,
) -> bytes | None:
    """One POST, its answer read whole: the body when the status is 200, else
    ``None``. A failure to connect or to read raises ``UpstreamError``."""
    resp = await transport.request(
        Upstream("POST", url, body=body, headers=headers, timeouts=timeouts)
    )
    try:
        data = await resp.read()
    finally:
        await resp.aclose()
    return data if resp.status == 200 else None


async def timed(
    run: LatencyRun,
    transport: PoolTransport,
    url: str,
    body: bytes,
    headers: Headers,
    *,
    timeouts: Timeouts = _TIMEOUTS,
) -> None:
    """One request, timed to its answer's last byte: its latency into
    ``run``, or an error counted there."""
    start = time.perf_counter()
    try:
        ok = await post(transport, url, body, headers, timeouts=timeouts) is not None
    except UpstreamError:
        ok = False
    if ok:
        run.latencies.append(time.perf_counter() - start)
    else:
        run.errors += 1


async def _warm(transport: PoolTransport, url: str, body: bytes, headers: Headers, n: int) -> None:
    for _ in range(2):
        await asyncio.gather(
            *(post(transport, url, body, headers) for _ in range(n)), return_exceptions=True
        )


async def fixed_rate(
    url: str,
    body: bytes,
    headers: Headers,
    *,
    rate: float,
    seconds: float,
    limit: int = 256,
) -> LatencyRun:
    """Open loop: start ``rate`` requests a second for ``seconds``, wait for the answers."""
    if rate <= 0 or seconds <= 0:
        raise ValueError("rate and seconds must be > 0")
    loop = asyncio.get_running_loop()
    transport = PoolTransport(limit=limit)
    run = LatencyRun()
    try:
        await _warm(transport, url, body, headers, 8)
        n = max(1, round(rate * seconds))
        pending: set[asyncio.Future[None]] = set()
        t0 = loop.time() + 0.01
        began = time.perf_counter()
        for i in range(n):
            due = t0 + i / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                run.max_lag = max(run.max_lag, -delay)
            task = asyncio.ensure_future(timed(run, transport, url, body, headers))
            pending.add(task)
            task.add_done_callback(pending.discard)
            run.sent += 1
        if pending:
            _, late = await asyncio.wait(pending, timeout=30)
            for left in late:
                left.cancel()
                run.errors += 1
        run.seconds = time.perf_counter() - began
    finally:
        await transport.aclose()
    return run


async def _timed_first(
    run: LatencyRun, transport: PoolTransport, url: str, body: bytes, headers: Headers
) -> None:
    """One request, timed to its first body byte and to its last."""
    start = time.perf_counter()
    first = 0.0
    try:
        resp = await transport.request(
            Upstream("POST", url, body=body, headers=headers, timeouts=_TIMEOUTS)
        )
        try:
            async for piece in resp.iter_bytes():
                if piece and not first:
                    first = time.perf_counter()
        finally:
            await resp.aclose()
        ok = resp.status == 200
    except UpstreamError:
        ok = False
    if ok:
        end = time.perf_counter()
        run.latencies.append(end - start)
        run.first_bytes.append((first or end) - start)
    else:
        run.errors += 1


async def one_connection(url: str, body: bytes, headers: Headers, *, seconds: float) -> LatencyRun:
    """Closed loop on one keep-alive connection for ``seconds``: the unloaded
    latency, to the last byte and to the first byte of each answer."""
    transport = PoolTransport(limit=1)
    run = LatencyRun()
    try:
        await _warm(transport, url, body, headers, 1)
        began = time.perf_counter()
        end = began + seconds
        while time.perf_counter() < end:
            await _timed_first(run, transport, url, body, headers)
            run.sent += 1
        run.seconds = time.perf_counter() - began
    finally:
        await transport.aclose()
    return run


@dataclass(slots=True)
class StreamRun:
    ttft: list[float] = field(default_factory=list)  # seconds to the first content token
    tpot: list[float] = field(default_factory=list)  # mean gap between tokens, per stream
    whole: list[float] = field(default_factory=list)  # seconds from the request to the end
    streams: int = 0
    tokens: int = 0
    errors: int = 0
    mismatches: int = 0


def _binary_tokens(splitter: FrameSplitter, piece: bytes) -> list[str]:
    return [decode_chunk(memoryview(f)[4:]).content for f in splitter.feed(piece)]


class _OpenAISse:
    """Content deltas out of an OpenAI SSE stream: ``chat.completion.chunk``
    events, or the Responses API's ``response.output_text.delta``; and out of
    an Anthropic Messages stream (``content_block_delta``'s ``text_delta``)."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, piece: bytes) -> list[str]:
        self._buf += piece
        out: list[str] = []
        while b"\n\n" in self._buf:
            event, _, self._buf = self._buf.partition(b"\n\n")
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                event = json.loads(data)
                kind = event.get("type")
                if kind == "response.output_text.delta":
                    out.append(event["delta"])
                elif kind == "content_block_delta" and event["delta"].get("type") == "text_delta":
                    out.append(event["delta"]["text"])
                for choice in event.get("choices") or ():
                    out.append((choice.get("delta") or {}).get("content") or "")
        return out


def sse_text(data: bytes) -> str:
    """The content of a whole OpenAI SSE stream (either API's) or Anthropic's."""
    return "".join(_OpenAISse().feed(data))


def converse_text(data: bytes) -> str:
    """The text of a Bedrock Converse answer: its JSON document, or a
    ConverseStream's event stream (its ``contentBlockDelta`` texts)."""
    if data.startswith(b"{"):
        doc = json.loads(data)
        return "".join(b.get("text", "") for b in doc["output"]["message"]["content"])
    out = []
    for msg in EventStreamParser().feed(data):
        if msg.headers.get(":event-type") == "contentBlockDelta":
            out.append(json.loads(msg.payload)["delta"].get("text", ""))
    return "".join(out)


def gemini_text(data: bytes) -> str:
    """The text of a Gemini API answer: its ``GenerateContentResponse``, or
    a ``streamGenerateContent?alt=sse`` stream's (each event's first
    candidate's text parts, thoughts left out)."""
    if data.startswith(b"{"):
        docs = [json.loads(data)]
    else:
        lines = data.replace(b"\r\n", b"\n").split(b"\n")
        docs = [json.loads(x[5:]) for x in lines if x.startswith(b"data:")]
    out = []
    for doc in docs:
        for candidate in doc.get("candidates", [])[:1]:
            parts = candidate.get("content", {}).get("parts", [])
            out += [p.get("text", "") for p in parts if not p.get("thought")]
    return "".join(out)


def answer_text(kind: str, data: bytes) -> str:
    """The text of one whole answer in client API ``kind`` (``openai``: Chat
    Completions, ``responses``, ``anthropic``: Messages, ``converse``:
    Bedrock's Converse, ``gemini``: the Gemini API), a JSON document or, when
    it starts like SSE (or, for Converse, AWS's event stream), a stream;
    raises ``ValueError`` or ``KeyError`` for a body that is neither."""
    if kind == "converse":
        return converse_text(data)
    if kind == "gemini":
        return gemini_text(data)
    if data.startswith((b"data:", b"event:")):
        return sse_text(data)
    doc = json.loads(data)
    if kind == "openai":
        return str(doc["choices"][0]["message"]["content"])
    if kind == "responses":
        items = [i for i in doc["output"] if i["type"] == "message"]
        return "".join(p["text"] for i in items for p in i["content"])
    if kind == "anthropic":
        return "".join(b["text"] for b in doc["content"] if b["type"] == "text")
    raise ValueError(f"no text reader for {kind!r} answers")


@dataclass(frozen=True, slots=True)
class _StreamCall:
    url: str
    body: bytes
    headers: Headers
    sse: bool
    expect: str


async def _one_stream(run: StreamRun, transport: PoolTransport, call: _StreamCall) -> None:
    start = time.perf_counter()
    stamps: list[float] = []
    text: list[str] = []
    splitter = FrameSplitter()
    parser = _OpenAISse()
    try:
        resp = await transport.request(
            Upstream("POST", call.url, body=call.body, headers=call.headers, timeouts=_TIMEOUTS)
        )
        try:
            if resp.status != 200:
                run.errors += 1
                return
            async for piece in resp.iter_bytes():
                now = time.perf_counter()
                tokens = parser.feed(piece) if call.sse else _binary_tokens(splitter, piece)
                for token in tokens:
                    if token:
                        stamps.append(now)
                        text.append(token)
        finally:
            await resp.aclose()
    except UpstreamError:
        run.errors += 1
        return
    run.whole.append(time.perf_counter() - start)
    run.streams += 1
    run.tokens += len(stamps)
    if "".join(text) != call.expect:
        run.mismatches += 1
    if stamps:
        run.ttft.append(stamps[0] - start)
    if len(stamps) > 1:
        run.tpot.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))


async def streams(
    url: str,
    body: bytes,
    headers: Headers,
    *,
    expect: str,
    sse: bool,
    seconds: float,
    concurrency: int = 4,
) -> StreamRun:
    """``concurrency`` callers each streaming completions back to back for ``seconds``."""
    transport = PoolTransport(limit=concurrency)
    run = StreamRun()
    call = _StreamCall(url, body, headers, sse, expect)
    end = time.perf_counter() + seconds

    async def caller() -> None:
        while time.perf_counter() < end:
            await _one_stream(run, transport, call)

    try:
        await _one_stream(StreamRun(), transport, call)  # warm-up
        await asyncio.gather(*(caller() for _ in range(concurrency)))
    finally:
        await transport.aclose()
    return run
