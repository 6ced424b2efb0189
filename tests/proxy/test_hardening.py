"""The proxy against callers that push its limits: hostile model names, more
requests or bytes than it admits, more streams than its pool, callers that
leave early; and its access log. Real granian servers on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FRAMES
from tests.proxy.test_proxy_http import FB, metric, proxy_config, req
from tests.servers import Server, running, tree_rss, write_config
from tests.stacks import QUIET, Fields

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("stub", [], tmp_path_factory.mktemp("stub")) as s:
        yield s


@pytest.fixture(scope="module")
def slow_stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """3 s to the first token, then 50 ms per token."""
    d = tmp_path_factory.mktemp("slow")
    with running("stub", ["--ttft-ms", "3000", "--itl-ms", "50"], d) as s:
        yield s


def slow_config(stub_url: str, proxy: Fields | None = None) -> str:
    """A proxy config for ``slow_stub``: its first token comes after the read timeout."""
    return proxy_config({"slow": {"url": stub_url, "first_byte_timeout": 10.0}}, proxy)


def _post(url: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", content=body, headers={**FB, **headers}, timeout=30)


async def _flood(port: int, bodies: list[bytes], concurrency: int = 16) -> list[int]:
    """POST every body to the proxy's ``/v1/completions`` over ``concurrency``
    keep-alive connections (a new one where the proxy closes one); the statuses,
    in order. Plain HTTP/1.1 on asyncio streams: a fraction of httpx's client
    CPU per request, so the proxy, not the client, sets the pace."""
    head = "".join(f"{k}: {v}\r\n" for k, v in FB.items())
    statuses = [0] * len(bodies)
    todo = iter(range(len(bodies)))

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for i in todo:
                body = bodies[i]
                writer.write(
                    f"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                    f"content-length: {len(body)}\r\n{head}\r\n".encode()
                )
                writer.write(body)
                await writer.drain()
                status = await reader.readline()
                assert status.startswith(b"HTTP/1.1 "), f"request {i}: {status!r}"
                statuses[i] = int(status.split()[1])
                fields: dict[str, str] = {}
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    fields[name.strip().lower()] = value.strip().lower()
                assert "content-length" in fields, fields  # the proxy's errors are sized
                await reader.readexactly(int(fields["content-length"]))
                if fields.get("connection") == "close":
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
        finally:
            writer.close()

    await asyncio.wait_for(asyncio.gather(*(connection() for _ in range(concurrency))), 300)
    return statuses


def test_memory_stays_bounded_under_hostile_model_names(stub: Server, tmp_path: Path) -> None:
    """10,000 distinct unknown models and 100 names of 1 MiB each: the proxy's
    resident memory ends within a few MiB of where it started."""
    cfg = write_config(tmp_path / "p.toml", proxy_config({"stub": stub.url}, QUIET))
    with running("proxy", ["--config", cfg], tmp_path) as p:

        def flood(bodies: list[bytes], concurrency: int = 16) -> list[int]:
            return asyncio.run(_flood(p.port, bodies, concurrency))

        # Warm up: the first requests grow pools, caches and metric children.
        assert set(flood([req("hi", model=f"warm-{i}") for i in range(2000)])) == {404}
        before = tree_rss(p.proc.pid)
        unknown = flood([req("hi", model=f"unknown-{i:05d}") for i in range(10_000)])
        assert set(unknown) == {404}
        # Two at a time: what is measured is what the names leave behind, not
        # the bodies in flight (admission control bounds those).
        huge = [req("hi", model=f"{i:03d}" + "m" * (1 << 20)) for i in range(100)]
        assert set(flood(huge, 2)) == {400}
        del huge
        after = tree_rss(p.proc.pid)
        assert after - before < 8 << 20, f"RSS grew by {(after - before) >> 10} KiB"


def test_an_overlong_model_name_is_a_400_naming_the_limit(stub: Server, tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "p.toml", proxy_config({"stub": stub.url}, {"max_model_bytes": 32})
    )
    with running("proxy", ["--config", cfg], tmp_path) as p:
        r = _post(p.url, req("hi", model="echo-" + "x" * 27))
        assert r.status_code == 200  # 32 bytes: at the limit
        r = _post(p.url, req("hi", model="echo-" + "x" * 28))
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["code"] == "model_name_too_long"
        assert "33 bytes" in error["message"] and "limit is 32" in error["message"]


def test_admission_refuses_past_max_in_flight_with_retry_after(
    slow_stub: Server, tmp_path: Path
) -> None:
    extra = {"max_in_flight": 2, "max_buffered_bytes": 4096}
    cfg = write_config(tmp_path / "p.toml", slow_config(slow_stub.url, extra))
    with running("proxy", ["--config", cfg], tmp_path) as p:

        async def scenario() -> tuple[list[int], httpx.Response, httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as client:
                held = [
                    asyncio.ensure_future(
                        client.post(f"{p.url}/v1/completions", content=req("a b"), headers=FB)
                    )
                    for _ in range(2)
                ]
                await asyncio.sleep(1.0)  # both are waiting on the stub's first token
                busy = await client.post(f"{p.url}/v1/completions", content=req("c"), headers=FB)
                statuses = [r.status_code for r in await asyncio.gather(*held)]
                # A body over max_buffered_bytes is refused before it is read.
                big = await client.post(
                    f"{p.url}/v1/completions", content=req("x" * 8000), headers=FB
                )
                return statuses, busy, big

        statuses, busy, big = asyncio.run(scenario())
        assert statuses == [200, 200]
        for r in (busy, big):
            assert r.status_code == 503
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "server_busy"
        assert metric(p.url, "flatgate_admission_refused_total") == 2
        assert metric(p.url, "flatgate_in_flight") == 0
        assert metric(p.url, "flatgate_buffered_body_bytes") == 0


def test_a_full_pool_is_a_503_and_not_a_backend_failure(slow_stub: Server, tmp_path: Path) -> None:
    """More concurrent streams than the pool holds: each completes or gets 503
    pool_exhausted with Retry-After; the backend is never cooled down for it."""
    extra = {"pool_limit": 2, "pool_timeout": 0.5}
    cfg = write_config(tmp_path / "p.toml", slow_config(slow_stub.url, extra))
    with running("proxy", ["--config", cfg], tmp_path) as p:

        async def scenario() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as client:
                return await asyncio.gather(
                    *(
                        client.post(f"{p.url}/v1/completions", content=req("a b"), headers=FB)
                        for _ in range(6)
                    )
                )

        answers = asyncio.run(scenario())
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 200, 503, 503, 503, 503]
        for r in answers:
            if r.status_code == 503:
                assert r.headers["retry-after"] == "1"
                assert r.json()["error"]["code"] == "pool_exhausted"
        text = httpx.get(f"{p.url}/metrics").text
        assert 'flatgate_upstream_failures_total{backend="slow",kind="pool_timeout"} 4.0' in text
        assert "UpstreamConnectError" not in text  # not counted as the backend's failure
        assert metric(p.url, "flatgate_upstream_pool_timeouts_total") == 4
        assert metric(p.url, "flatgate_upstream_pool_waits_total") == 4
        assert metric(p.url, "flatgate_upstream_pool_open") <= 2
        # Not cooled down: the next request goes straight to it and succeeds.
        assert _post(p.url, req("again")).status_code == 200


@pytest.mark.parametrize("iface", ["asgi", "rsgi"])
def test_a_caller_leaving_before_the_first_token_cancels_upstream(
    slow_stub: Server, tmp_path: Path, iface: str
) -> None:
    """The caller leaves once its stream has begun at the stub, well inside a
    3 s time to first token: the stub sees the stream cancelled, not
    finished (its first token would have ended it otherwise)."""
    cfg = write_config(tmp_path / "p.toml", slow_config(slow_stub.url))
    with running("proxy", ["--config", cfg, "--interface", iface], tmp_path) as p:
        stats = httpx.get(f"{slow_stub.url}/stats").json()
        before, started = stats["cancelled"], stats["started"]

        async def leave_early() -> float:
            async with httpx.AsyncClient(timeout=30) as client:
                task = asyncio.ensure_future(
                    client.post(
                        f"{p.url}/v1/completions",
                        content=req("never read"),
                        headers={**FB, "accept": FRAMES},
                    )
                )
                # Leave once the stub has the stream (a sleep races a loaded machine).
                deadline = time.monotonic() + 2.0
                while (await client.get(f"{slow_stub.url}/stats")).json()["started"] == started:
                    assert time.monotonic() < deadline, "the stream never reached the stub"
                    await asyncio.sleep(0.02)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                return time.monotonic()

        left = asyncio.run(leave_early())
        cancelled = before
        # Before the stub's first token (3 s after the stream began) could end it.
        while time.monotonic() - left < 2.5:
            cancelled = httpx.get(f"{slow_stub.url}/stats").json()["cancelled"]
            if cancelled > before:
                break
            time.sleep(0.05)
        assert cancelled == before + 1
        assert metric(p.url, "flatgate_active_streams") == 0


def test_hostile_request_ids_are_replaced(stub: Server, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "p.toml", proxy_config({"stub": stub.url}))
    with running("proxy", ["--config", cfg], tmp_path) as p:
        for bad in ("x" * 129, "two words", "tab\there"):
            r = _post(p.url, req("hi"), **{"x-request-id": bad})
            assert r.status_code == 200
            assert r.headers["x-request-id"].startswith("fg-")
        r = _post(p.url, req("hi"), **{"x-request-id": "ok-" + "y" * 125})
        assert r.headers["x-request-id"] == "ok-" + "y" * 125


def test_access_log_lines_carry_the_fields_and_no_secrets(stub: Server, tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "p.toml", proxy_config({"stub": stub.url}, {"log_format": "json"})
    )
    with running("proxy", ["--config", cfg], tmp_path) as p:
        secret_prompt = "the secret prompt text"
        body = build_request(
            "echo-1", [("user", secret_prompt)], provider="SelfHosted", tenant="acme"
        )
        r = _post(p.url, body, **{"x-request-id": "log-1", "authorization": "Bearer sk-secret"})
        assert r.status_code == 200
        assert _post(p.url, req("hi", model="nope"), **{"x-request-id": "log-2"}).status_code == 404
        deadline = time.monotonic() + 5
        lines: list[dict[str, object]] = []
        while time.monotonic() < deadline and len(lines) < 2:
            time.sleep(0.2)
            lines = [
                json.loads(line)
                for line in p.log.read_text().splitlines()
                if line.startswith('{"ts"')
            ]
        text = p.log.read_text()
    ok, missing = lines[0], lines[1]
    assert ok["request_id"] == "log-1" and ok["status"] == 200
    assert (ok["api"], ok["method"], ok["path"]) == ("fbs", "POST", "/v1/completions")
    assert ok["tenant"] == "acme" and ok["model"] == "echo-1"
    assert ok["provider"] == "SelfHosted" and ok["backend"] == "stub"
    assert ok["bytes_in"] == len(body) and isinstance(ok["bytes_out"], int) and ok["bytes_out"] > 0
    assert isinstance(ok["completion_tokens"], int) and ok["completion_tokens"] > 0
    assert ok["ttfb_ms"] is not None and ok["error"] is None
    assert missing["status"] == 404 and missing["error"] == "no_route"
    assert missing["model"] == "nope" and missing["backend"] is None
    assert secret_prompt not in text and "sk-secret" not in text


def test_more_concurrent_streams_than_granians_default_connection_limit(
    tmp_path: Path,
) -> None:
    """granian serves 1,024 connections per worker unless told: 1,100 streams
    held open at once (each a minute long) all get their answer's head while
    every one of them is still running."""
    with running("stub", ["--itl-ms", "2000"], tmp_path) as slow:
        cfg = write_config(tmp_path / "p.toml", proxy_config({"slow": slow.url}, QUIET))
        with running("proxy", ["--config", cfg], tmp_path) as p:
            body = req(" ".join(f"w{i}" for i in range(30)))  # 60 s at 2 s a token
            head = (
                f"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                f"content-type: application/x-flatbuffers\r\naccept: {FRAMES}\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            ).encode()

            async def hold(n: int) -> list[bytes]:
                async def one() -> tuple[bytes, asyncio.StreamWriter]:
                    reader, writer = await asyncio.open_connection("127.0.0.1", p.port)
                    writer.write(head + body)
                    return await reader.readuntil(b"\r\n"), writer

                results = await asyncio.wait_for(
                    asyncio.gather(*(one() for _ in range(n))), timeout=30
                )
                for _, writer in results:
                    writer.close()
                return [status for status, _ in results]

            statuses = asyncio.run(hold(1100))
            assert statuses == [b"HTTP/1.1 200 OK\r\n"] * 1100
