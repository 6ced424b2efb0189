"""The stub's cadence mode: prebuilt frames paced by one clock (no timing asserted).

The clock is driven with in-memory sinks (ordinary writes, writes that wait,
writes that fail, streams dropped); then real stubs in cadence mode answer
``fbs`` (binary and SSE framing) and ``openai`` streams with exactly N deltas
and a final frame with the usage, many at once, and count a caller that goes
away as cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from flatgate.proxy.backends.registry import PROTOCOLS
from flatgate.proxy.gateway.document import side_problems
from flatgate.proxy.stub.cadence import TOKEN, Clock, Prebuilt, prebuilt
from flatgate.proxy.wire.chunk.frames import Chunk
from flatgate.proxy.wire.schema import FRAMES, SSE, FinishReason
from tests.servers import Server, running
from tests.stacks import write_stub
from tests.stub.helpers import sse_events, stream_raw
from tests.stub.test_wires import fbs_chunks

TOKENS = 5
NO_HEADERS: dict[str, str] = {}


# what a stream must look like ---------------------------------------------------


def _fbs_ok(chunks: list[Chunk], tokens: int) -> None:
    assert [c.content for c in chunks] == [TOKEN] * tokens + [""]
    assert [c.finish_reason for c in chunks] == [FinishReason.NONE] * tokens + [FinishReason.STOP]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == tokens
    assert all(c.usage is None for c in chunks[:-1])


def _openai_ok(data: bytes, tokens: int) -> None:
    events = [d for _, d in sse_events(data.decode())]
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"] for c in chunks[1 : tokens + 1]]
    assert deltas == [{"content": TOKEN}] * tokens
    assert chunks[tokens + 1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == tokens
    assert len(chunks) == tokens + 3


def _joined(p: Prebuilt, tokens: int) -> bytes:
    return p.first + p.delta * (tokens - 1) + p.final


@pytest.mark.parametrize("binary", [True, False])
def test_prebuilt_fbs_frames(binary: bool) -> None:
    headers = {"accept": FRAMES} if binary else {}
    p = prebuilt(PROTOCOLS["fbs"].stub(), TOKENS, headers.get)
    assert p.content_type == (FRAMES if binary else SSE)
    _fbs_ok(fbs_chunks(_joined(p, TOKENS), binary), TOKENS)


def test_prebuilt_openai_and_anthropic_frames() -> None:
    _openai_ok(
        _joined(prebuilt(PROTOCOLS["openai"].stub(), TOKENS, NO_HEADERS.get), TOKENS), TOKENS
    )
    anthropic = prebuilt(PROTOCOLS["anthropic"].stub(), TOKENS, NO_HEADERS.get)
    events = sse_events(_joined(anthropic, TOKENS).decode())
    texts = [d["delta"]["text"] for n, d in events if n == "content_block_delta"]
    assert texts == [TOKEN] * TOKENS
    assert [n for n, _ in events][-2:] == ["message_delta", "message_stop"]
    with pytest.raises(ValueError):
        prebuilt(PROTOCOLS["openai"].stub(), 0, NO_HEADERS.get)


def test_config_checks_cadence() -> None:
    doc = {
        "backends": [{"name": "s", "url": "http://127.0.0.1:9"}],
        "routes": [{"model": "*", "backends": ["s"]}],
    }
    assert side_problems({**doc, "stub": {"cadence": True}}, scope="stub") == ([], [])
    stub = {"cadence": True, "canned": 3, "cadence_tokens": 0}
    problems, _ = side_problems({**doc, "stub": stub}, scope="stub")
    assert any("stub.cadence_tokens" in p for p in problems)
    assert any("stub.cadence: not with stub.canned" in p for p in problems)


# the clock, in memory ------------------------------------------------------------


@dataclass
class _Counts:
    started: int = 0
    completed: int = 0
    cancelled: int = 0
    active: int = 0
    frames: int = 0


@dataclass
class _Sink:
    """Records writes; ``wait``: each write awaits a future set a loop turn
    later; ``fail_at``: the write of that index raises."""

    wait: bool = False
    fail_at: int = -1
    writes: list[bytes] = field(default_factory=list)

    async def send(self, data: bytes) -> None:
        if len(self.writes) == self.fail_at:
            raise ConnectionResetError("gone")
        if self.wait:
            fut = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(fut.set_result, None)
            await fut
            await asyncio.sleep(0)  # a bare yield too
        self.writes.append(data)

    async def close(self) -> None:
        pass


P = Prebuilt("x", b"first", b"delta", b"final")
EXPECTED = [b"first"] + [b"delta"] * (TOKENS - 1) + [b"final"]


async def test_clock_writes_every_frame_of_every_stream_in_order() -> None:
    counts = _Counts()
    clock = Clock(0.002, 0.001, TOKENS, counts)
    sinks = [_Sink(wait=i % 3 == 0) for i in range(30)]
    streams = []
    for sink in sinks:
        streams.append(clock.add(sink, P))
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*(s.done for s in streams)), 10)
    assert all(sink.writes == EXPECTED for sink in sinks)
    assert counts.frames == len(sinks) * (TOKENS + 1)
    assert clock.streams == 0 and clock.stats()["ticks"] > 0
    # The clock stops when idle and starts again for the next stream.
    sink = _Sink()
    await asyncio.wait_for(clock.add(sink, P).done, 10)
    assert sink.writes == EXPECTED


async def test_clock_zero_delays() -> None:
    clock = Clock(0.0, 0.0, 1, _Counts())
    sinks = [_Sink(), _Sink(wait=True)]
    await asyncio.wait_for(asyncio.gather(*(clock.add(s, P).done for s in sinks)), 10)
    assert all(s.writes == [b"first", b"final"] for s in sinks)


async def test_clock_failed_write_and_drop() -> None:
    clock = Clock(0.0, 0.001, TOKENS, _Counts())
    failing, dropped, fine = _Sink(fail_at=2), _Sink(), _Sink(wait=True)
    bad = clock.add(failing, P)
    gone = clock.add(dropped, P)
    ok = clock.add(fine, P)
    while len(dropped.writes) < 2:
        await asyncio.sleep(0.001)
    clock.drop(gone)
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(bad.done, 10)
    await asyncio.wait_for(ok.done, 10)
    assert gone.done.cancelled()
    assert failing.writes == EXPECTED[:2]
    assert 2 <= len(dropped.writes) < len(EXPECTED)
    assert fine.writes == EXPECTED
    assert clock.streams == 0


def test_clock_refuses_bad_settings() -> None:
    with pytest.raises(ValueError):
        Clock(0.0, 0.001, 0, _Counts())
    with pytest.raises(ValueError):
        Clock(-1.0, 0.001, 1, _Counts())


# real stubs ------------------------------------------------------------------------


StartStub = Callable[..., Server]


@pytest.fixture
def stubs(tmp_path: Path) -> Iterator[StartStub]:
    """Starts stubs in cadence mode (``protocol``, ``interface``, ``tokens``)
    until the test ends."""
    with contextlib.ExitStack() as stack:

        def start(protocol: str, interface: str = "rsgi", tokens: int = TOKENS) -> Server:
            cfg = write_stub(
                tmp_path / f"cadence-{protocol}-{interface}.toml",
                cadence=True,
                cadence_tokens=tokens,
                ttft_ms=5,
                itl_ms=2,
            )
            args = ["--config", cfg, "--protocol", protocol, "--interface", interface]
            return stack.enter_context(running("stub", args, tmp_path))

        yield start


def _stats(s: Server) -> dict[str, object]:
    doc: dict[str, object] = httpx.get(f"{s.url}/stats").json()
    return doc


FBS_BODY = b"not read in cadence mode"


@pytest.mark.integration
@pytest.mark.parametrize("interface", ["rsgi", "asgi"])
@pytest.mark.parametrize("binary", [True, False])
def test_fbs_stream(stubs: StartStub, binary: bool, interface: str) -> None:
    s = stubs("fbs", interface)
    headers = {"accept": FRAMES} if binary else {}
    status, data, ended = stream_raw(s.url + "/v1/completions", FBS_BODY, headers)
    assert (status, ended) == (200, "end")
    _fbs_ok(fbs_chunks(data, binary), TOKENS)
    stats = _stats(s)
    assert (stats["started"], stats["completed"], stats["cancelled"]) == (1, 1, 0)
    assert stats["frames"] == TOKENS + 1
    assert isinstance(stats["cadence"], dict) and stats["cadence"]["ticks"] > 0


@pytest.mark.integration
@pytest.mark.parametrize("interface", ["rsgi", "asgi"])
def test_openai_stream_and_whole_answer(stubs: StartStub, interface: str) -> None:
    s = stubs("openai", interface)
    url = s.url + "/v1/chat/completions"
    status, data, ended = stream_raw(url, b'{"stream": true}', {})
    assert (status, ended) == (200, "end")
    _openai_ok(data, TOKENS)
    whole = httpx.post(url, content=b'{"model": "m"}').json()
    assert whole["choices"][0]["message"]["content"] == TOKEN * TOKENS
    assert whole["usage"]["completion_tokens"] == TOKENS
    assert _stats(s)["completed"] == 2


@pytest.mark.integration
@pytest.mark.parametrize("interface", ["rsgi", "asgi"])
def test_concurrent_streams_all_complete(stubs: StartStub, interface: str) -> None:
    s = stubs("fbs", interface)
    n = 40

    async def one(client: httpx.AsyncClient) -> bytes:
        async with client.stream(
            "POST", "/v1/completions", content=FBS_BODY, headers={"accept": FRAMES}
        ) as r:
            return await r.aread()

    async def many() -> list[bytes]:
        limits = httpx.Limits(max_connections=n)
        async with httpx.AsyncClient(base_url=s.url, limits=limits, timeout=30) as client:
            return await asyncio.gather(*(one(client) for _ in range(n)))

    for data in asyncio.run(many()):
        _fbs_ok(fbs_chunks(data, True), TOKENS)
    stats = _stats(s)
    assert (stats["started"], stats["completed"], stats["active"]) == (n, n, 0)
    assert stats["frames"] == n * (TOKENS + 1)


@pytest.mark.integration
@pytest.mark.parametrize("interface", ["rsgi", "asgi"])
def test_disconnect_is_counted_cancelled(stubs: StartStub, interface: str) -> None:
    s = stubs("openai", interface, tokens=100_000)
    got = threading.Event()

    def read_a_little() -> None:
        with httpx.stream(
            "POST", s.url + "/v1/chat/completions", content=b'{"stream": true}', timeout=10
        ) as r:
            for _ in r.iter_raw():
                got.set()
                break  # and close the connection

    read_a_little()
    assert got.is_set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = _stats(s)
        if stats["cancelled"] == 1:
            break
        time.sleep(0.05)
    assert (stats["started"], stats["completed"], stats["cancelled"], stats["active"]) == (
        1,
        0,
        1,
        0,
    )
    # The clock let go of the stream: its frame count stops growing.
    frames = _stats(s)["frames"]
    time.sleep(0.1)
    assert _stats(s)["frames"] == frames
    assert json.loads(json.dumps(stats))  # plain JSON
