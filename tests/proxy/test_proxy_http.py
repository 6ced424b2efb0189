"""The proxy and the stub as real granian servers on loopback, spoken to over HTTP."""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from flatgate.proxy.wire.chunk.frames import Chunk, FrameSplitter, SSESplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FRAMES, SSE, FinishReason
from tests.servers import Server, free_port, running, write_config
from tests.stacks import Fields, stack_config, toml

pytestmark = pytest.mark.integration

FB = {"content-type": "application/x-flatbuffers"}


def proxy_config(
    backends: Mapping[str, str | Fields],
    proxy: Fields | None = None,
    routes: Mapping[str, str | list[str] | Fields] | None = None,
) -> str:
    """A proxy in front of ``backends`` (name -> URL or fields; each reads for
    2 s at most), ``proxy`` added to its table; the routes by default:
    ``echo-*`` (SelfHosted) and ``exact-model`` to all the backends."""
    names = list(backends)
    return toml(
        stack_config(
            proxy={"max_body_bytes": 2097152, "cooldown_seconds": 0.5, **(proxy or {})},
            backends={
                name: {"url": b, "read_timeout": 2.0}
                if isinstance(b, str)
                else {"read_timeout": 2.0, **b}
                for name, b in backends.items()
            },
            routes=routes
            or {"echo-*": {"provider": "SelfHosted", "backends": names}, "exact-model": names},
        )
    )


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("stub", [], tmp_path_factory.mktemp("stub")) as s:
        yield s


@pytest.fixture(scope="module", params=["fast-asgi", "httpx-asgi", "fast-rsgi"])
def proxy(
    request: pytest.FixtureRequest, stub: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    transport, iface = request.param.split("-")
    d = tmp_path_factory.mktemp("proxy")
    cfg = write_config(d / "proxy.toml", proxy_config({"stub": stub.url}))
    args = ["--config", cfg, "--transport", transport, "--interface", iface]
    with running("proxy", args, d) as p:
        yield p


def req(
    text: str,
    model: str = "echo-1",
    provider: str = "SelfHosted",
    metadata: dict[str, str] | None = None,
    **kw: Any,
) -> bytes:
    return build_request(
        model,
        [("system", "sys prompt"), ("user", text)],
        provider=provider,
        metadata=metadata,
        **kw,
    )


def read_stream(resp: httpx.Response, binary: bool) -> list[Chunk]:
    if binary:
        fs = FrameSplitter()
        return [decode_chunk(unprefix(f)) for p in resp.iter_raw() for f in fs.feed(p)]
    ss = SSESplitter()
    return [decode_chunk(f) for p in resp.iter_raw() for f in ss.feed(p)]


def post(url: str, body: bytes, accept: str | None = None, **headers: str) -> list[Chunk]:
    h = {**FB, **headers}
    if accept:
        h["accept"] = accept
    with httpx.stream("POST", f"{url}/v1/completions", content=body, headers=h, timeout=10) as r:
        assert r.status_code == 200, r.read()
        return read_stream(r, accept == FRAMES)


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("accept", [FRAMES, SSE, None, "*/*"])
def test_both_framings_carry_the_same_chunks(proxy: Server, accept: str | None) -> None:
    text = "  the quick  brown fox\tjumps "
    chunks = post(proxy.url, req(text, request_id="rid-7"), accept)
    assert "".join(c.content for c in chunks) == text
    assert [c.content for c in chunks[:-1]] == ["  the ", "quick  ", "brown ", "fox\t", "jumps "]
    last = chunks[-1]
    assert last.finish_reason == FinishReason.STOP
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (2 + 5, 5)
    assert {c.request_id for c in chunks} == {"rid-7"}


def test_max_tokens_cuts_with_length(proxy: Server) -> None:
    chunks = post(proxy.url, req("a b c d e f", max_tokens=3), FRAMES)
    assert "".join(c.content for c in chunks) == "a b c "
    assert chunks[-1].finish_reason == FinishReason.LENGTH


def test_non_streaming_is_one_chunk(proxy: Server) -> None:
    chunks = post(proxy.url, req("one two three", stream=False), FRAMES)
    assert len(chunks) == 1
    assert chunks[0].content == "one two three"
    assert chunks[0].finish_reason == FinishReason.STOP


def test_forced_tool_call(proxy: Server) -> None:
    chunks = post(proxy.url, req("weather in Paris", tool_choice_function="get_weather"), FRAMES)
    (chunk,) = chunks
    assert chunk.finish_reason == FinishReason.TOOL_CALLS
    (call,) = chunk.tool_calls
    assert call.name == "get_weather"
    assert call.arguments == '{"input": "weather in Paris"}'


def test_request_id_header_round_trips(proxy: Server) -> None:
    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/completions",
        content=req("hi"),
        headers={**FB, "x-request-id": "caller-42"},
    ) as r:
        r.read()
        assert r.headers["x-request-id"] == "caller-42"


async def test_200_concurrent_streams_each_get_their_own_prompt(proxy: Server) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    prompts = [
        " ".join(f"s{i}w{j}-{rng.randrange(10**6)}" for j in range(rng.randrange(1, 30)))
        for i in range(200)
    ]
    limits = httpx.Limits(max_connections=200)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def one(i: int) -> str:
            accept = FRAMES if i % 2 else SSE
            async with client.stream(
                "POST",
                f"{proxy.url}/v1/completions",
                content=req(prompts[i], request_id=f"r{i}"),
                headers={**FB, "accept": accept},
            ) as r:
                assert r.status_code == 200
                splitter: FrameSplitter | SSESplitter = (
                    FrameSplitter() if accept == FRAMES else SSESplitter()
                )
                chunks = [
                    decode_chunk(unprefix(f) if accept == FRAMES else f)
                    async for piece in r.aiter_raw()
                    for f in splitter.feed(piece)
                ]
            assert {c.request_id for c in chunks} == {f"r{i}"}, f"seed={seed}"
            assert chunks[-1].finish_reason == FinishReason.STOP
            return "".join(c.content for c in chunks)

        got = await asyncio.gather(*(one(i) for i in range(200)))
    assert got == prompts, f"seed={seed}"


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (req("x", model="unknown"), FB, 404, "no_route"),
        (req("x", model="echo-1", provider="OpenAI"), FB, 404, "no_route"),
        (b"\x00" * 40, FB, 400, "malformed_request"),
        (req("x"), {"content-type": "application/json"}, 415, "unsupported_media_type"),
        (req("x" * 3_000_000), FB, 413, "body_too_large"),
    ],
)
def test_errors_before_the_first_byte(
    proxy: Server, body: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    r = httpx.post(f"{proxy.url}/v1/completions", content=body, headers=headers)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code


def test_exact_route_for_any_provider(proxy: Server) -> None:
    chunks = post(proxy.url, req("hello", model="exact-model", provider="OpenAI"), FRAMES)
    assert chunks[-1].finish_reason == FinishReason.STOP


def test_malformed_message_names_the_check(proxy: Server) -> None:
    good = req("hello")
    r = httpx.post(f"{proxy.url}/v1/completions", content=good[:30], headers=FB)
    assert r.status_code == 400
    assert re.search(r"offset \d+", r.json()["error"]["message"])


def test_method_and_length_errors(proxy: Server) -> None:
    assert httpx.get(f"{proxy.url}/v1/completions").status_code == 405

    def chunked() -> Iterator[bytes]:
        yield req("hi")

    r = httpx.post(f"{proxy.url}/v1/completions", content=chunked(), headers=FB)
    assert r.status_code == 411
    assert r.json()["error"]["code"] == "length_required"
    assert httpx.get(f"{proxy.url}/nope").status_code == 404


def test_health_ready_and_metrics_move(proxy: Server) -> None:
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200
    ready = httpx.get(f"{proxy.url}/readyz")
    assert ready.status_code == 200
    assert ready.json()["routes"] == {"echo-*": True, "exact-model": True}
    before = metric(proxy.url, 'flatgate_requests_total{route="echo-*",status="200"}')
    relayed = metric(proxy.url, "flatgate_relayed_bytes_total")
    post(proxy.url, req("count me"), FRAMES)
    after = metric(proxy.url, 'flatgate_requests_total{route="echo-*",status="200"}')
    assert after == before + 1
    assert metric(proxy.url, "flatgate_relayed_bytes_total") > relayed
    assert metric(proxy.url, "flatgate_upstream_ttfb_seconds_count") >= 1
    text = httpx.get(f"{proxy.url}/metrics").text
    for name in (
        "flatgate_active_streams",
        "flatgate_gc_collections_total",
        "flatgate_gc_pause_seconds_total",
        "flatgate_builder_pool_hits_total",
        "flatgate_builder_pool_misses_total",
        "flatgate_upstream_duration_seconds_bucket",
    ):
        assert name in text


# Faults, failover, timeouts, disconnects: their own stubs and proxies.


@pytest.fixture(scope="module")
def failing_stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("stub", ["--fault", "fail"], tmp_path_factory.mktemp("failstub")) as s:
        yield s


@pytest.fixture(scope="module")
def slow_stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("stub", ["--itl-ms", "100"], tmp_path_factory.mktemp("slowstub")) as s:
        yield s


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_failover_to_next_backend_and_to_fallbacks(
    stub: Server, failing_stub: Server, tmp_path: Path
) -> None:
    urls = {"dead": dead_url(), "failing": failing_stub.url, "good": stub.url}
    routes: dict[str, list[str] | Fields] = {
        "echo-pool": ["dead", "good"],
        "echo-fallback": {"backends": ["failing"], "fallbacks": ["good"]},
        "echo-doomed": ["dead", "failing"],
    }
    cfg = write_config(tmp_path / "p.toml", proxy_config(urls, routes=routes))
    with running("proxy", ["--config", cfg], tmp_path) as p:
        for _ in range(4):
            chunks = post(p.url, req("still here", model="echo-pool"), FRAMES)
            assert "".join(c.content for c in chunks) == "still here"
        chunks = post(p.url, req("saved", model="echo-fallback"), FRAMES)
        assert "".join(c.content for c in chunks) == "saved"
        r = httpx.post(f"{p.url}/v1/completions", content=req("x", model="echo-doomed"), headers=FB)
        # One backend unreachable, one answering 503: the 503 is what is reported.
        assert r.status_code == 502
        assert r.json()["error"]["code"] == "backend_error"
        assert metric(p.url, 'flatgate_upstream_failures_total{backend="dead"') >= 1
        assert metric(p.url, 'flatgate_upstream_failures_total{backend="failing"') >= 1
        ready = httpx.get(f"{p.url}/readyz").json()
        assert ready["backends"]["dead"] is False
        assert ready["routes"]["echo-pool"] is True


def test_not_ready_when_a_route_has_no_live_backend(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "p.toml", proxy_config({"dead": dead_url()}))
    with running("proxy", ["--config", cfg], tmp_path) as p:
        r = httpx.get(f"{p.url}/readyz")
        assert r.status_code == 503
        assert r.json()["ready"] is False
        r = httpx.post(f"{p.url}/v1/completions", content=req("x"), headers=FB)
        assert r.status_code == 502


@pytest.mark.parametrize("accept", [FRAMES, SSE])
def test_backend_dying_mid_stream_gives_an_error_chunk(proxy: Server, accept: str) -> None:
    body = req("one two three four", metadata={"stub.fault": "die", "stub.fault_after": "2"})
    chunks = post(proxy.url, body, accept)
    assert [c.content for c in chunks[:2]] == ["one ", "two "]
    last = chunks[-1]
    assert last.finish_reason == FinishReason.ERROR
    assert last.error is not None
    assert last.error.code in ("backend_disconnected", "backend_stream_truncated")


def test_backend_stalling_before_its_head_gives_504(proxy: Server) -> None:
    r = httpx.post(
        f"{proxy.url}/v1/completions",
        content=req("x", metadata={"stub.fault": "stall"}),
        headers=FB,
        timeout=10,
    )
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "backend_timeout"


def test_backend_hanging_mid_stream_gives_a_timeout_chunk(proxy: Server) -> None:
    body = req("one two three", metadata={"stub.fault": "hang", "stub.fault_after": "1"})
    chunks = post(proxy.url, body, FRAMES)
    assert chunks[0].content == "one "
    assert chunks[-1].finish_reason == FinishReason.ERROR
    assert chunks[-1].error is not None
    assert chunks[-1].error.code == "backend_timeout"


@pytest.mark.parametrize("iface", ["asgi", "rsgi"])
def test_caller_disconnect_cancels_upstream(slow_stub: Server, tmp_path: Path, iface: str) -> None:
    cfg = write_config(tmp_path / "p.toml", proxy_config({"slow": slow_stub.url}))
    with running("proxy", ["--config", cfg, "--interface", iface], tmp_path) as p:
        cancelled = httpx.get(f"{slow_stub.url}/stats").json()["cancelled"]
        words = " ".join(f"w{i}" for i in range(200))  # 20 s of tokens at 100 ms each
        with httpx.stream(
            "POST", f"{p.url}/v1/completions", content=req(words), headers={**FB, "accept": FRAMES}
        ) as r:
            pieces = r.iter_raw()  # held: dropping the generator would close the stream
            assert next(pieces)
            assert metric(p.url, "flatgate_active_streams") == 1
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            stats = httpx.get(f"{slow_stub.url}/stats").json()
            if stats["cancelled"] > cancelled and metric(p.url, "flatgate_active_streams") == 0:
                break
            time.sleep(0.05)
        assert stats["cancelled"] == cancelled + 1
        assert stats["pool_leased"] == 0
        assert metric(p.url, "flatgate_active_streams") == 0
        assert metric(p.url, "flatgate_builder_pool_leased") == 0


def test_slow_reader_holds_back_the_backend(stub: Server, tmp_path: Path) -> None:
    """ASGI: a caller that stops reading stops the proxy reading, and so the stub."""
    cfg = write_config(
        tmp_path / "p.toml",
        proxy_config({"stub": stub.url}, {"max_body_bytes": 80000000}),
    )
    n = 4000
    words = " ".join(f"{i:06d}" + "x" * 16384 for i in range(n))  # 64 MiB of deltas
    with running("proxy", ["--config", cfg, "--interface", "asgi"], tmp_path) as p:
        frames_before = httpx.get(f"{stub.url}/stats").json()["frames"]
        with httpx.stream(
            "POST",
            f"{p.url}/v1/completions",
            content=req(words),
            headers={**FB, "accept": FRAMES},
            timeout=30,
        ) as r:
            assert r.status_code == 200
            pieces = r.iter_raw()
            splitter = FrameSplitter()
            frames = splitter.feed(next(pieces))
            time.sleep(1.5)  # the caller pauses
            sent = httpx.get(f"{stub.url}/stats").json()["frames"] - frames_before
            # Socket buffers and granian's channels hold some MiB; not 64.
            assert sent < n * 3 // 4, f"the stub was not held back: {sent} of {n} frames sent"
            frames += [f for piece in pieces for f in splitter.feed(piece)]
        chunks = [decode_chunk(unprefix(f)) for f in frames]
        assert len(chunks) == n + 1
        assert chunks[-1].finish_reason == FinishReason.STOP
        assert "".join(c.content for c in chunks) == words


def test_canned_stub_answers_without_reading_the_body(tmp_path: Path) -> None:
    with running("stub", ["--canned", "3"], tmp_path) as s:
        chunks = post(s.url, b"any body at all, not even a FlatBuffer", FRAMES)
        assert [c.content for c in chunks] == ["tok "] * 3 + [""]
        assert chunks[-1].finish_reason == FinishReason.STOP
        sse = post(s.url, b"{}", SSE)
        assert sse == chunks


def test_bad_config_fails_at_start_up_naming_the_key(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "bad.toml",
        '[[backends]]\nname = "a"\nurl = "http://x:1"\n[[routes]]\nmodel = "*"\nbackends = ["b"]\n',
    )
    done = subprocess.run(
        [sys.executable, "-m", "flatgate.proxy.gateway.cli", "proxy", "--config", cfg],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "routes[0].backends: unknown backend 'b'" in done.stderr


def test_forwards_the_bytes_and_only_the_headers_it_should(stub: Server, tmp_path: Path) -> None:
    backends: dict[str, str | Fields] = {
        "plain": stub.url,
        "trusted": {"url": stub.url, "forward_credentials": True},
    }
    routes = {"echo-plain": "plain", "echo-trusted": "trusted"}
    cfg = write_config(tmp_path / "p.toml", proxy_config(backends, routes=routes))
    caller = {
        **FB,
        "x-request-id": "trace-1",
        "authorization": "Bearer caller-secret",
        "proxy-authorization": "Basic hop",
        "cookie": "session=1",
        "te": "trailers",
    }
    with running("proxy", ["--config", cfg], tmp_path) as p:
        trusted = "sha256:" + hashlib.sha256(b"Bearer caller-secret").hexdigest()
        for model, auth in (("echo-plain", None), ("echo-trusted", trusted)):
            body = req("forward me " * 100, model=model)
            r = httpx.post(f"{p.url}/v1/completions", content=body, headers=caller)
            assert r.status_code == 200
            seen = httpx.get(f"{stub.url}/stats").json()
            assert seen["last_body_sha256"] == hashlib.sha256(body).hexdigest()
            assert seen["last_headers"] == {
                "x-request-id": "trace-1",
                "authorization": auth,
                "x-api-key": None,
                "api-key": None,
                "proxy-authorization": None,
                "cookie": None,
                "te": None,
                "upgrade": None,
            }
