"""The soak test's traffic: the request mix, each request's outcome, the tally.

Owns what the soak sends to the edge's ``POST /v1/chat/completions`` and how
every answer is classified:

- ``MIX``: the kinds of request and their weights (streams and non-streams to
  an fbs and an openai backend, faults the stub injects through a model-name
  suffix before the first byte and mid-stream, client disconnects after the
  first event, bad JSON and an unknown model); ``plan`` draws the seeded
  sequence of kinds;
- ``Outcome``: the closed set of buckets an answer falls in, plus
  ``http_<status>`` for an error status; ``UNDEFINED`` are the buckets that
  fail the run (a stream that ended without ``[DONE]`` or an error event, a
  wrong answer, a transport failure, a client-side timeout, a 500, a request
  cut by the time limit);
- ``exchange``: one request, classified; ``Traffic``: a closed loop of
  ``concurrency`` callers over the plan, with a hook at one request count (the
  backend restart) and a hard deadline.

Loopback only. Measures nothing; asserts nothing.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import msgspec

from flatgate.proxy.transport.base import (
    Response,
    Timeouts,
    Upstream,
    UpstreamError,
    UpstreamTimeout,
)
from flatgate.proxy.transport.fast import PoolTransport

__all__ = [
    "ECHO_MODEL",
    "FAULT_MODELS",
    "MIX",
    "OPENAI_MODEL",
    "UNDEFINED",
    "Kind",
    "Outcome",
    "Traffic",
    "exchange",
    "http_bucket",
    "is_defined",
    "plan",
    "prompt",
]

# The edge's models: one per backend, and one per fault the stub injects when
# the model name carries it (``backends.dialect.split_model``).
ECHO_MODEL = "soak-echo"
OPENAI_MODEL = "soak-echo-openai"
FAIL, RATE_LIMIT = f"{ECHO_MODEL}@fail", f"{ECHO_MODEL}@rate_limit"
ERROR_MID, DIE_MID = f"{ECHO_MODEL}@error:2", f"{ECHO_MODEL}@die:2"
FAULT_MODELS = (FAIL, RATE_LIMIT, ERROR_MID, DIE_MID)
UNKNOWN_MODEL = "soak-no-such-model"


class Outcome(StrEnum):
    """Every fixed bucket; an error status is ``http_bucket(status)``."""

    OK_STREAM = "ok_stream"  # 200, the echo streamed in full, then [DONE]
    OK_JSON = "ok_json"  # 200, a chat.completion carrying the echo
    STREAM_ERROR_EVENT = "stream_error_event"  # 200, then an SSE error event ends it
    CLIENT_DISCONNECT = "client_disconnect"  # the client closed after the first event
    # Undefined: each fails the run.
    STREAM_TRUNCATED = "stream_truncated"  # ended without [DONE] and without an error event
    BAD_ANSWER = "bad_answer"  # a 200 whose body does not parse or carries the wrong text
    TRANSPORT_ERROR = "transport_error"  # refused, reset or cut, not by the client's choice
    TIMEOUT = "timeout"  # nothing within the client's own read or total timeout
    UNFINISHED = "unfinished"  # still running at the run's hard time limit
    CLIENT_ERROR = "client_error"  # an exception in the soak's own client (a harness bug)
    HTTP_500 = "http_500"  # internal_error: a bug in flatgate (docs/api/errors.md)


UNDEFINED = frozenset(
    {
        Outcome.STREAM_TRUNCATED,
        Outcome.BAD_ANSWER,
        Outcome.TRANSPORT_ERROR,
        Outcome.TIMEOUT,
        Outcome.UNFINISHED,
        Outcome.HTTP_500,
        Outcome.CLIENT_ERROR,
    }
)


def http_bucket(status: int) -> str:
    """``http_<status>``: a status other than 200 (a 200 is classified by its body)."""
    return f"http_{status}"


def is_defined(bucket: str) -> bool:
    """Whether ``bucket`` is an outcome the gateway promises: a full answer, an
    error status (4xx, or 5xx other than 500), an error event, the client's own
    disconnect."""
    if bucket in UNDEFINED:
        return False
    if bucket in Outcome.__members__.values():
        return True
    status = bucket.removeprefix("http_")
    return bucket.startswith("http_") and status.isdigit() and 400 <= int(status) <= 599


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of request in the mix, and the outcome it gets when all is well."""

    name: str
    weight: int  # per 1,000 requests
    model: str
    stream: bool
    expect: str
    disconnect: bool = False  # close the response after its first event
    bad_json: bool = False  # a body cut short: not JSON


MIX: tuple[Kind, ...] = (
    Kind("stream", 450, ECHO_MODEL, True, Outcome.OK_STREAM),
    Kind("stream-openai", 100, OPENAI_MODEL, True, Outcome.OK_STREAM),
    Kind("json", 200, ECHO_MODEL, False, Outcome.OK_JSON),
    Kind("json-openai", 50, OPENAI_MODEL, False, Outcome.OK_JSON),
    Kind("fail", 30, FAIL, True, http_bucket(502)),
    Kind("rate-limit", 20, RATE_LIMIT, False, http_bucket(429)),
    Kind("error-mid-stream", 30, ERROR_MID, True, Outcome.STREAM_ERROR_EVENT),
    Kind("die-mid-stream", 20, DIE_MID, True, Outcome.STREAM_ERROR_EVENT),
    Kind("disconnect", 50, ECHO_MODEL, True, Outcome.CLIENT_DISCONNECT, disconnect=True),
    Kind("bad-json", 25, ECHO_MODEL, False, http_bucket(400), bad_json=True),
    Kind("unknown-model", 25, UNKNOWN_MODEL, True, http_bucket(404)),
)


def plan(n: int, seed: int) -> list[Kind]:
    """The kinds of ``n`` requests, drawn by weight with a seeded generator."""
    return random.Random(seed).choices(MIX, weights=[k.weight for k in MIX], k=n)


def prompt(index: int) -> str:
    """Request ``index``'s user message: twelve words the echo stub sends back one by one."""
    return f"soak request {index} asks the gateway to echo these few words back"


def _body(kind: Kind, index: int) -> bytes:
    doc = {
        "model": kind.model,
        "stream": kind.stream,
        "messages": [{"role": "user", "content": prompt(index)}],
    }
    body = msgspec.json.encode(doc)
    return body[: len(body) // 2] if kind.bad_json else body


# What the client reads of the edge's answers.
class _Delta(msgspec.Struct):
    content: str | None = None


class _StreamChoice(msgspec.Struct):
    delta: _Delta = msgspec.field(default_factory=_Delta)


class _Event(msgspec.Struct):
    choices: list[_StreamChoice] = []
    error: dict[str, object] | None = None


class _Message(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _Message


class _Completion(msgspec.Struct):
    choices: list[_Choice]


_EVENT = msgspec.json.Decoder(_Event)
_COMPLETION = msgspec.json.Decoder(_Completion)
_HEADERS = (("content-type", "application/json"),)
_DONE = b"[DONE]"


class _Sse:
    """The edge's SSE stream: its text, whether it ended with ``[DONE]`` or an error."""

    def __init__(self) -> None:
        self._buf = b""
        self.text: list[str] = []
        self.events = 0
        self.done = False
        self.error = False
        self.garbled = False

    def feed(self, piece: bytes) -> None:
        self._buf += piece
        while b"\n\n" in self._buf:
            event, _, self._buf = self._buf.partition(b"\n\n")
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):  # comments (": keep-alive") are skipped
                    self._data(line[5:].strip())

    def _data(self, data: bytes) -> None:
        if self.done or self.error:
            self.garbled = True  # nothing may follow the end of a stream
            return
        if data == _DONE:
            self.done = True
            return
        self.events += 1
        try:
            event = _EVENT.decode(data)
        except msgspec.DecodeError:
            self.garbled = True
            return
        if event.error is not None:
            self.error = True
        for choice in event.choices:
            self.text.append(choice.delta.content or "")

    def finish(self) -> None:
        """The stream has ended: bytes after its last event are garbage once it
        was complete (before, they are a truncated event)."""
        if self._buf.strip() and (self.done or self.error):
            self.garbled = True


async def _stream(resp: Response, kind: Kind, expect: str) -> str:
    sse = _Sse()
    async for piece in resp.iter_bytes():
        sse.feed(piece)
        if kind.disconnect and sse.events and not (sse.done or sse.error):
            return Outcome.CLIENT_DISCONNECT  # the caller's aclose cuts the connection
    sse.finish()
    if sse.garbled:
        return Outcome.BAD_ANSWER
    if sse.error:
        return Outcome.STREAM_ERROR_EVENT
    if not sse.done:
        return Outcome.STREAM_TRUNCATED
    return Outcome.OK_STREAM if "".join(sse.text) == expect else Outcome.BAD_ANSWER


def _json(body: bytes, expect: str) -> str:
    try:
        completion = _COMPLETION.decode(body)
    except msgspec.DecodeError:
        return Outcome.BAD_ANSWER
    if len(completion.choices) == 1 and completion.choices[0].message.content == expect:
        return Outcome.OK_JSON
    return Outcome.BAD_ANSWER


_TIMEOUTS = Timeouts(connect=5.0, read=30.0, total=60.0)


async def exchange(transport: PoolTransport, url: str, kind: Kind, index: int) -> tuple[str, str]:
    """Send request ``index`` of ``kind``: its outcome's bucket, and what went
    wrong when the transport failed (else ``""``)."""
    expect = prompt(index)
    try:
        resp = await transport.request(
            Upstream("POST", url, body=_body(kind, index), headers=_HEADERS, timeouts=_TIMEOUTS)
        )
    except UpstreamTimeout as exc:
        return Outcome.TIMEOUT, str(exc)
    except UpstreamError as exc:
        return Outcome.TRANSPORT_ERROR, str(exc)
    try:
        if resp.status != 200:
            await resp.read()
            return http_bucket(resp.status), ""
        if kind.stream:
            return await _stream(resp, kind, expect), ""
        return _json(await resp.read(), expect), ""
    except UpstreamTimeout as exc:
        return Outcome.TIMEOUT, str(exc)
    except UpstreamError as exc:
        return Outcome.TRANSPORT_ERROR, str(exc)
    finally:
        await resp.aclose()


# Undefined outcomes kept as examples for the report, per bucket.
_EXAMPLES = 3


class Traffic:
    """``concurrency`` callers, each sending the next request of ``kinds`` as
    soon as its previous one is classified, until every request was sent or
    ``deadline`` (``time.monotonic``) passed; requests still running ``grace``
    seconds after the deadline are cancelled and counted ``unfinished``.

    ``on_milestone`` starts (in the background) when request ``milestone`` is
    sent; ``run`` waits for it. ``sent`` and ``finished`` may be read from
    another thread (the sampler's)."""

    def __init__(
        self,
        url: str,
        kinds: Sequence[Kind],
        concurrency: int,
        *,
        deadline: float,
        grace: float = 70.0,
        milestone: int | None = None,
        on_milestone: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.url = url
        self.kinds = kinds
        self.concurrency = concurrency
        self.deadline = deadline
        self.grace = grace
        self.milestone = milestone
        self.on_milestone = on_milestone
        self.sent = 0
        self.finished = 0
        self.buckets: Counter[str] = Counter()
        self.by_kind: dict[str, Counter[str]] = {k.name: Counter() for k in MIX}
        self.examples: dict[str, list[str]] = {}
        self.hook_error = ""
        self._hook: asyncio.Future[None] | None = None

    def _record(self, kind: Kind, index: int, bucket: str, detail: str = "") -> None:
        self.buckets[bucket] += 1
        self.by_kind[kind.name][bucket] += 1
        self.finished += 1
        if not is_defined(bucket):
            seen = self.examples.setdefault(bucket, [])
            if len(seen) < _EXAMPLES:
                seen.append(f"request {index} ({kind.name}): {detail or bucket}")

    async def _caller(self, transport: PoolTransport) -> None:
        while self.sent < len(self.kinds) and time.monotonic() < self.deadline:
            index = self.sent
            self.sent += 1
            if index == self.milestone and self.on_milestone is not None:
                self._hook = asyncio.ensure_future(self.on_milestone())
            kind = self.kinds[index]
            try:
                bucket, detail = await exchange(transport, self.url, kind, index)
            except asyncio.CancelledError:
                self._record(kind, index, Outcome.UNFINISHED, "cut at the time limit")
                raise
            except Exception as exc:  # a bug in this client: never lost, always counted
                bucket, detail = Outcome.CLIENT_ERROR, repr(exc)
            self._record(kind, index, bucket, detail)

    async def run(self) -> None:
        transport = PoolTransport(limit=self.concurrency)
        callers = [asyncio.ensure_future(self._caller(transport)) for _ in range(self.concurrency)]
        try:
            wait = max(0.0, self.deadline + self.grace - time.monotonic())
            _, late = await asyncio.wait(callers, timeout=wait)
            for task in late:
                task.cancel()
            await asyncio.gather(*callers, return_exceptions=True)
            if self._hook is not None:
                try:
                    await self._hook
                except Exception as exc:
                    self.hook_error = repr(exc)
        finally:
            await transport.aclose()
