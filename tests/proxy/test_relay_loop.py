"""The one relay (``service.relay.Relay``) on its own: an open answer from an
in-memory backend, read through the fbs translator, as both shapes use it."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Sequence

from benchmarks.inmemory import FakeAnswer, make_server
from flatgate.proxy.backends.fbs.adapter import FbsAdapter
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.service.balancer import Backend
from flatgate.proxy.service.dispatch import Opened
from flatgate.proxy.service.inprocess import InProcessRouter
from flatgate.proxy.service.relay import Relay, sse_frames
from flatgate.proxy.transport.base import Timeouts, UpstreamProtocolError, UpstreamTimeout
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.frames import FrameSplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FinishReason

HELLO = write_chunk(content="hello ")
WORLD = write_chunk(content="world")
STOP = write_chunk(finish_reason=FinishReason.STOP)


class Pieces(FakeAnswer):
    """Sends ``pieces`` one read each, then raises ``error`` (if any)."""

    def __init__(self, pieces: Sequence[bytes], error: Exception | None = None) -> None:
        super().__init__(b"")
        self.pieces = list(pieces)
        self.error = error
        self.began = False
        self.waiting = True

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.error is not None:
            raise self.error

    def ready(self) -> bool:
        return not self.waiting

    def begun(self) -> None:
        self.began = True


class Watch:
    started = 0

    def start(self) -> None:
        self.started += 1


def relay_of(answer: Pieces, binary: bool = True) -> tuple[Relay, Metrics, Backend]:
    cfg = BackendConfig(name="b", url="http://127.0.0.1:9")
    backend = Backend("b", cfg.url, FbsAdapter(cfg), 1, 0, Timeouts(), outstanding=1)
    metrics = Metrics("t", BuilderPool())
    opened = Opened(backend, answer, backend.adapter.translator("r1", ""), 0.0, metrics)
    return Relay(opened, "r1", binary, metrics), metrics, backend


def chunks(data: bytes) -> list[object]:
    return [decode_chunk(unprefix(f)) for f in FrameSplitter().feed(data)]


async def test_a_whole_answer_comes_in_one_first_read() -> None:
    answer = Pieces([HELLO + STOP])
    relay, metrics, backend = relay_of(answer)
    watch = Watch()
    assert metrics.active_streams.value == 1
    first = await relay.first(watch)  # type: ignore[arg-type]
    assert first is answer.pieces[0]  # the backend's bytes, not a copy
    assert relay.whole and answer.began and watch.started == 1
    await relay.close()
    await relay.close()  # once
    assert (relay.relayed, relay.last, relay.error) == (len(first), first, None)
    assert metrics.active_streams.value == 0
    assert metrics.registry.get_sample_value("t_relayed_bytes_total") == len(first)
    assert answer.closed and backend.outstanding == 0


async def test_a_stream_relays_each_frame_as_it_is_ready() -> None:
    answer = Pieces([HELLO, WORLD[:3], WORLD[3:], STOP])
    answer.waiting = False
    relay, _, _ = relay_of(answer)
    watch = Watch()
    first = await relay.first(watch)  # type: ignore[arg-type]
    assert first == HELLO and not relay.whole and watch.started == 0
    rest = [out async for out in relay.frames()]
    assert rest == [WORLD, STOP]
    assert relay.relayed == len(HELLO + WORLD + STOP) and relay.last == STOP
    await relay.close()


async def test_sse_frames_each_chunk_as_an_event() -> None:
    relay, _, _ = relay_of(Pieces([HELLO + WORLD + STOP]), binary=False)
    out = await relay.first()
    assert out == sse_frames(HELLO + WORLD + STOP)
    events = [line for line in out.split(b"\n\n") if line]
    assert [base64.b64decode(e.removeprefix(b"data: ")) for e in events] == [
        bytes(unprefix(f)) for f in (HELLO, WORLD, STOP)
    ]
    assert relay.last == HELLO + WORLD + STOP  # the frames, not the events
    await relay.close()


async def test_a_failure_mid_stream_is_one_error_chunk() -> None:
    for error, code in (
        (UpstreamProtocolError("reset"), codes.BACKEND_DISCONNECTED),
        (UpstreamTimeout("slow"), codes.BACKEND_TIMEOUT),
    ):
        relay, _, _ = relay_of(Pieces([HELLO], error))
        out = [out async for out in relay.frames()]
        got = chunks(b"".join(out))
        assert [c.content for c in got] == ["hello ", ""]  # type: ignore[attr-defined]
        last = got[-1]
        assert last.finish_reason == FinishReason.ERROR  # type: ignore[attr-defined]
        assert last.error.code == code.code  # type: ignore[attr-defined]
        assert relay.error is code and relay.last == b""
        assert relay.relayed == len(HELLO)  # the error chunk is the relay's own
        await relay.close()


async def test_a_malformed_frame_mid_stream_is_a_protocol_error() -> None:
    relay, _, _ = relay_of(Pieces([HELLO, b"\xff\xff\xff\x7f" + b"x" * 8]))
    out = [out async for out in relay.frames()]
    assert out[0] == HELLO
    assert relay.error is codes.BACKEND_PROTOCOL_ERROR
    await relay.close()


async def test_nothing_is_read_past_the_final_chunk() -> None:
    relay, _, _ = relay_of(Pieces([HELLO + STOP], UpstreamProtocolError("closed")))
    out = [out async for out in relay.frames()]
    assert out == [HELLO + STOP] and relay.error is None
    await relay.close()


async def test_a_stream_ended_early_gets_the_translators_tail() -> None:
    relay, _, _ = relay_of(Pieces([HELLO]))
    out = [out async for out in relay.frames()]
    got = chunks(b"".join(out))
    assert got[-1].error.code == codes.BACKEND_STREAM_TRUNCATED.code  # type: ignore[attr-defined]
    assert relay.relayed == len(b"".join(out))  # the tail is counted as relayed
    assert relay.last == out[-1]
    await relay.close()


async def test_fail_ends_a_stream_with_the_given_code() -> None:
    relay, _, _ = relay_of(Pieces([HELLO]))
    await relay.first()
    frame = relay.fail(codes.DRAINING, "shutting down")
    got = chunks(frame)
    assert got[0].error.code == "draining"  # type: ignore[attr-defined]
    assert relay.error is codes.DRAINING and relay.last == b""
    await relay.close()


async def test_closing_before_reading_releases_everything() -> None:
    answer = Pieces([HELLO, STOP])
    relay, metrics, backend = relay_of(answer)
    frames = relay.frames()
    assert await anext(frames) == HELLO
    await relay.close()  # the caller left mid-stream
    assert answer.closed and backend.outstanding == 0
    assert metrics.active_streams.value == 0


async def test_the_in_process_answer_closed_unread_releases_everything() -> None:
    server, transport = make_server(HELLO + STOP)
    router = InProcessRouter(server)
    body = build_request("m", [("user", "hi")])
    resp = await router.complete(body, "", admitted=True)
    assert resp.status == 200 and server.metrics.active_streams.value == 1
    await resp.aclose()  # the edge gave up before reading a frame
    assert server.metrics.active_streams.value == 0
    assert server.backends["stub"].outstanding == 0
    assert transport.last_answer is not None and transport.last_answer.closed
