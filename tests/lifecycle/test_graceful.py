"""Graceful restarts in real processes: a signal drains a server, in-flight
streams finish (or are ended at the deadline), and the process exits 0.

The drain's timeline is checked end to end on a small app with the whole drain
wired in (``drain_app``), under both interfaces; then on the real ``flatgate
proxy`` and on ``flatgate up``. Short drain settings keep each run to seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flatgate.proxy.wire.chunk.frames import Chunk, FrameSplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FRAMES, FinishReason
from tests.servers import Server, free_port, running, spawn
from tests.stacks import QUIET, loopback, write_stack

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def refused(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.ConnectError:
        return True
    return False


def wait_exit(proc: subprocess.Popen[bytes], seconds: float) -> tuple[int | None, float]:
    """The exit status (``None``: still running after ``seconds``) and when."""
    started = time.monotonic()
    try:
        code = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None, seconds
    return code, time.monotonic() - started


class Reader(threading.Thread):
    """Reads one streamed response in the background."""

    def __init__(self, open_stream: Any) -> None:
        super().__init__(daemon=True)
        self._open = open_stream
        self.first = threading.Event()
        self.status = 0
        self.pieces: list[bytes] = []
        self.error: Exception | None = None
        self.ended_at = 0.0

    def run(self) -> None:
        try:
            with self._open() as r:
                self.status = r.status_code
                for piece in r.iter_raw():
                    self.pieces.append(piece)
                    self.first.set()
        except httpx.HTTPError as exc:
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.first.set()

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


# -- the drain's timeline, on an app with all of it wired in ---------------------


@contextlib.contextmanager
def drain_app(tmp_path: Path, grace: float, seconds: float, iface: str) -> Iterator[Server]:
    port = free_port()
    log = tmp_path / f"drain-app-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.lifecycle.drain_app",
                str(port),
                str(grace),
                str(seconds),
                iface,
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server("drain-app", proc, port, log)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def stream(url: str, chunks: int, interval_ms: int) -> Reader:
    headers = {"x-chunks": str(chunks), "x-interval-ms": str(interval_ms)}
    reader = Reader(lambda: httpx.stream("GET", f"{url}/stream", headers=headers, timeout=10))
    reader.start()
    assert reader.first.wait(5)
    return reader


@pytest.mark.parametrize("iface", ["asgi", "rsgi"])
def test_the_drain_timeline(tmp_path: Path, iface: str) -> None:
    grace, seconds = 0.6, 2.5
    with drain_app(tmp_path, grace, seconds, iface) as app:
        assert httpx.get(f"{app.url}/readyz").status_code == 200
        short = stream(app.url, chunks=12, interval_ms=100)  # ~1.2 s: finishes
        long = stream(app.url, chunks=200, interval_ms=100)  # ~20 s: ended at the deadline
        signalled = time.monotonic()
        os.kill(app.proc.pid, signal.SIGTERM)
        time.sleep(0.15)

        # At once: not ready, new work refused with draining, the listener still open.
        for path in ("/readyz", "/stream"):
            r = httpx.get(f"{app.url}{path}")
            assert r.status_code == 503, path
            assert r.json()["error"]["code"] == "draining"
            assert r.headers["connection"] == "close"
            assert r.headers["retry-after"] == "1"
        assert httpx.get(f"{app.url}/healthz").status_code == 200  # alive, though

        # After the grace: the listener is closed.
        time.sleep(max(0.0, signalled + grace + 0.4 - time.monotonic()))
        assert refused(f"{app.url}/readyz")

        short.join(5)
        assert short.body.endswith(b"chunk 11\ndone\n"), short.body[-60:]
        long.join(5)
        assert long.error is None
        assert long.body.endswith(b"\nerror: draining\n"), long.body[-60:]
        # The long stream outlived the grace (streams in flight go on once the
        # listener closes), and the drain ended it: it ends with the draining
        # error event (above), which granian's kill at `seconds` would not
        # have sent. When within that window it ended is the machine's pace,
        # not a contract, so it is not asserted.
        assert long.ended_at - signalled > grace
        code, _ = wait_exit(app.proc, seconds + 2)
        assert code == 0
        assert time.monotonic() - signalled <= seconds + 1.5


def test_ctrl_c_in_a_terminal_closes_the_listener_at_once(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the workers too: they stop listening at
    once (granian's own stop), the running stream still finishes, and an idle
    server does not sit out the grace."""
    with drain_app(tmp_path, 5, 8, "asgi") as app:
        running_stream = stream(app.url, chunks=8, interval_ms=100)
        signalled = time.monotonic()
        os.killpg(app.proc.pid, signal.SIGINT)
        time.sleep(0.3)
        assert refused(f"{app.url}/healthz")
        running_stream.join(5)
        assert running_stream.body.endswith(b"done\n")
        code, _ = wait_exit(app.proc, 5)
        assert code == 0
        assert time.monotonic() - signalled < 3  # not the 5 s grace


# -- the real proxy --------------------------------------------------------------


# ``slow_stub`` (conftest): 250 ms between tokens.


def proxy_config(path: Path, stub: Server, grace: float, seconds: float) -> str:
    return write_stack(
        path,
        proxy={"drain_grace_seconds": grace, "drain_seconds": seconds},
        backends={"stub": {"url": stub.url, "read_timeout": 5.0}},
        routes={"*": "stub"},
    )


FB_FRAMES = {"content-type": "application/x-flatbuffers", "accept": FRAMES}


def request(words: int) -> bytes:
    return build_request("echo", [("user", " ".join(f"w{i}" for i in range(words)))])


def completion(url: str, words: int) -> Reader:
    body = request(words)
    reader = Reader(
        lambda: httpx.stream(
            "POST", f"{url}/v1/completions", content=body, headers=FB_FRAMES, timeout=30
        )
    )
    reader.start()
    assert reader.first.wait(5)
    assert reader.status == 200
    return reader


def chunks(body: bytes) -> list[Chunk]:
    return [decode_chunk(unprefix(f)) for f in FrameSplitter().feed(body)]


def test_a_stream_running_at_sigterm_finishes_and_the_proxy_exits_0(
    tmp_path: Path, slow_stub: Server
) -> None:
    # A drain deadline far past the stream's end (about 5 s on a quiet
    # machine): the proxy must leave when the stream is done, well before it.
    grace, seconds = 0.5, 30.0
    cfg = proxy_config(tmp_path / "p.toml", slow_stub, grace, seconds)
    proxy = spawn("proxy", ["--config", cfg], tmp_path)
    try:
        proxy.wait_healthy()
        reader = completion(proxy.url, words=21)
        signalled = time.monotonic()
        os.kill(proxy.proc.pid, signal.SIGTERM)

        # Within the grace: /readyz and new requests answer 503 draining, and
        # the connection is not kept.
        time.sleep(0.15)
        for r in (
            httpx.get(f"{proxy.url}/readyz"),
            httpx.post(f"{proxy.url}/v1/completions", content=request(2), headers=FB_FRAMES),
        ):
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "draining"
            assert r.headers["connection"] == "close" and r.headers["retry-after"] == "1"
        assert httpx.get(f"{proxy.url}/healthz").status_code == 200  # alive

        # Once the grace is over the proxy takes nothing new: /readyz and new
        # requests are refused.
        time.sleep(grace + 0.25)
        assert refused(f"{proxy.url}/readyz")
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"{proxy.url}/v1/completions", content=request(2), headers=FB_FRAMES)

        reader.join(10)
        assert reader.error is None
        got = chunks(reader.body)
        assert "".join(c.content for c in got) == " ".join(f"w{i}" for i in range(21))
        assert got[-1].finish_reason == FinishReason.STOP and got[-1].error is None

        code, _ = wait_exit(proxy.proc, 5)
        assert code == 0
        # It left when the stream was done, not at its drain deadline.
        assert time.monotonic() - signalled < seconds - 1
    finally:
        proxy.stop()


def test_a_stream_longer_than_drain_seconds_is_ended_in_time(
    tmp_path: Path, slow_stub: Server
) -> None:
    grace, seconds = 0.3, 2.0
    cfg = proxy_config(tmp_path / "p.toml", slow_stub, grace, seconds)
    proxy = spawn("proxy", ["--config", cfg], tmp_path)
    try:
        proxy.wait_healthy()
        reader = completion(proxy.url, words=60)  # 15 s
        signalled = time.monotonic()
        os.kill(proxy.proc.pid, signal.SIGTERM)
        code, _ = wait_exit(proxy.proc, seconds + 3)
        assert code == 0
        assert time.monotonic() - signalled <= seconds + 1.5
        reader.join(5)
        assert not reader.is_alive()  # the caller is not left hanging
        assert reader.ended_at - signalled <= seconds + 1.5
        # The stream was ended, not cut: its last chunk says why.
        assert reader.error is None
        last = chunks(reader.body)[-1]
        assert last.error is not None and last.error.code == "draining"
        assert last.finish_reason == FinishReason.ERROR
    finally:
        proxy.stop()


def test_the_edge_drains_503_then_ends_a_long_stream_with_an_error_event(
    tmp_path: Path, slow_stub: Server
) -> None:
    """Through the openai SDK: a stream that outlives the edge's drain ends with
    an error event (code draining), new requests get 503 draining at once."""
    import openai

    proxy_cfg = proxy_config(tmp_path / "p.toml", slow_stub, 5.0, 30.0)
    with running("proxy", ["--config", proxy_cfg], tmp_path) as proxy:
        edge_cfg = write_stack(
            tmp_path / "e.toml",
            edge={
                "proxy_url": proxy.url,
                "drain_grace_seconds": 1.0,
                "drain_seconds": 3.0,
                **QUIET,
            },
            models={"echo": "SelfHosted"},
        )
        edge = spawn("edge", ["--config", edge_cfg], tmp_path)
        try:
            edge.wait_healthy()
            client = openai.OpenAI(base_url=f"{edge.url}/v1", api_key="k", max_retries=0)
            words = " ".join(f"w{i}" for i in range(60))  # 15 s of tokens
            got: list[str] = []
            failure: list[BaseException] = []

            def read() -> None:
                try:
                    for event in client.chat.completions.create(
                        model="echo", messages=[{"role": "user", "content": words}], stream=True
                    ):
                        got.append(event.choices[0].delta.content or "" if event.choices else "")
                except openai.APIError as exc:
                    failure.append(exc)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            deadline = time.monotonic() + 5
            while not got and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(edge.proc.pid, signal.SIGTERM)
            time.sleep(0.2)
            with pytest.raises(openai.InternalServerError) as info:
                client.chat.completions.create(
                    model="echo", messages=[{"role": "user", "content": "hi"}]
                )
            assert info.value.status_code == 503 and info.value.code == "draining"
            assert info.value.response.headers["connection"] == "close"
            reader.join(10)
            assert not reader.is_alive()
            (err,) = failure
            assert isinstance(err, openai.APIError) and not isinstance(err, openai.APIStatusError)
            assert getattr(err, "code", None) == "draining" or "draining" in str(err.body)
            assert 0 < len([t for t in got if t]) < 60
            code, _ = wait_exit(edge.proc, 5)
            assert code == 0
        finally:
            edge.stop()


# -- flatgate up -----------------------------------------------------------------


@pytest.mark.parametrize("layout", [[], ["--split"]], ids=["gateway", "split"])
def test_flatgate_up_drains_every_service_and_exits_0(tmp_path: Path, layout: list[str]) -> None:
    """Both layouts: the one-process gateway (the default) and edge + proxy apart."""
    stub, proxy, edge = free_port(), free_port(), free_port()
    drain = {"drain_grace_seconds": 0.5, "drain_seconds": 6}
    cfg = write_stack(
        tmp_path / "up.toml",
        proxy={"port": proxy, **drain},
        stub={"port": stub, "itl_ms": 100, "up": ["fbs"], **drain},
        backends={"stub": loopback(stub)},
        routes={"flatgate-echo": "stub"},
        edge={"port": edge, "proxy_url": loopback(proxy), **drain},
        models={"flatgate-echo": "SelfHosted"},
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLATGATE_")}
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "flatgate.proxy.gateway.cli", "up", "--config", cfg, *layout],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        Server("edge", up, edge, log).wait_healthy()
        text = " ".join(f"w{i}" for i in range(15))  # 1.5 s at 100 ms a token
        payload = {
            "model": "flatgate-echo",
            "stream": True,
            "messages": [{"role": "user", "content": text}],
        }
        reader = Reader(
            lambda: httpx.stream(
                "POST", f"http://127.0.0.1:{edge}/v1/chat/completions", json=payload, timeout=20
            )
        )
        reader.start()
        assert reader.first.wait(5)
        # The one-process gateway runs no proxy service; --split does.
        assert refused(f"http://127.0.0.1:{proxy}/healthz") == (not layout)
        signalled = time.monotonic()
        up.send_signal(signal.SIGTERM)
        code, _ = wait_exit(up, 6 + 2 + 3)
        output = log.read_text()
        assert code == 0, output
        assert "killing" not in output
        assert time.monotonic() - signalled < 6  # when the stream was done, not the deadline
        reader.join(5)
        assert reader.error is None and reader.status == 200
        assert reader.body.rstrip().endswith(b"data: [DONE]")
        assert text.split()[-1].encode() in reader.body
        for port in (stub, proxy, edge):
            assert refused(f"http://127.0.0.1:{port}/healthz")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGKILL)
        up.wait()
