"""``POST /v1/embeddings`` on the proxy, a real granian server on loopback, with
real stubs behind it (``flatgate stub --protocol fbs|openai``, some with a
fault on every request), and the in-process router over the same stubs."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.inprocess import InProcessRouter
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.stub.embeddings import DEFAULT_DIMENSIONS, vector
from flatgate.proxy.wire.embeddings import read_embedding_response, write_embedding_request
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import BACKEND_HEADER, FLATBUFFERS
from tests.proxy.routed import answered
from tests.servers import Server, closed_port, running, write_config
from tests.stacks import stack_config, toml

pytestmark = pytest.mark.integration

FB = {"content-type": FLATBUFFERS}
TEXTS = ["the quick brown fox", "jumps over", "the lazy dog"]


def routes(stubs: dict[str, Server], anthropic_port: int) -> dict[str, Any]:
    """The proxy's config over the stubs: one route per case."""
    fbs, openai = stubs["fbs"].url, stubs["openai"].url
    return stack_config(
        proxy={"cooldown_seconds": 0.5, "max_attempts": 0},
        backends={
            "fbs": fbs,
            "openai": {"url": f"{openai}/v1", "protocol": "openai"},
            "failing": stubs["fail"].url,
            "dying": stubs["die"].url,
            "limited": stubs["rate_limit"].url,
            "chat-only": {"url": fbs, "serves": ["completions"]},
            "claude": {
                "url": f"http://127.0.0.1:{anthropic_port}/v1",
                "protocol": "anthropic",
            },
        },
        routes={
            "emb-fbs": "fbs",
            "emb-openai": "openai",
            "emb-failover": {"backends": ["failing"], "fallbacks": ["fbs"]},
            "emb-cut": {"backends": ["dying"], "fallbacks": ["openai"]},
            "emb-limited": "limited",
            "claude-*": "claude",
            "chat-only": "chat-only",
            "mixed": {"backends": ["claude", "fbs"]},
        },
    )


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    d = tmp_path_factory.mktemp("stubs")
    with (
        running("stub", [], d) as fbs,
        running("stub", ["--protocol", "openai"], d) as openai,
        running("stub", ["--fault", "fail"], d) as fail,
        running("stub", ["--fault", "die"], d) as die,
        running("stub", ["--fault", "rate_limit"], d) as limited,
    ):
        yield {"fbs": fbs, "openai": openai, "fail": fail, "die": die, "rate_limit": limited}


@pytest.fixture(scope="module")
def anthropic_port() -> Iterator[int]:
    with closed_port() as port:  # never contacted: embeddings are not sent there
        yield port


@pytest.fixture(scope="module", params=["fast", "httpx"])
def proxy(
    request: pytest.FixtureRequest,
    stubs: dict[str, Server],
    anthropic_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("proxy")
    cfg = write_config(d / "proxy.toml", toml(routes(stubs, anthropic_port)))
    with running("proxy", ["--config", cfg, "--transport", request.param], d) as p:
        yield p


def embed(
    url: str, model: str, texts: list[str] = TEXTS, rid: str = "", **kw: Any
) -> httpx.Response:
    body = write_embedding_request(model, texts=texts, **kw)
    headers = {**FB, "x-request-id": rid} if rid else FB
    return httpx.post(f"{url}/v1/embeddings", content=body, headers=headers, timeout=10)


def expected(texts: list[str], dimensions: int = DEFAULT_DIMENSIONS) -> bytes:
    """The stub's vectors for ``texts``, row after row."""
    return b"".join(vector(b"t" + t.encode(), dimensions) for t in texts)


def error_of(resp: httpx.Response) -> tuple[int, str, str]:
    err = resp.json()["error"]
    return resp.status_code, err["code"], err["message"]


def sample(url: str, name: str, **labels: str) -> float:
    """The sum of the ``name`` samples of ``/metrics`` with these labels."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize(("model", "backend"), [("emb-fbs", "fbs"), ("emb-openai", "openai")])
def test_the_answer_is_the_stubs_vectors(proxy: Server, model: str, backend: str) -> None:
    resp = embed(proxy.url, model, dimensions=64, request_id="rid-e1")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == FLATBUFFERS
    assert resp.headers[BACKEND_HEADER] == backend
    got = read_embedding_response(resp.content)
    assert (got.count, got.dimensions) == (3, 64)
    assert bytes(got.values) == expected(TEXTS, 64)
    assert got.prompt_tokens == 4 + 2 + 3  # the stub counts words


def test_token_id_inputs_are_answered_too(proxy: Server) -> None:
    body = write_embedding_request("emb-fbs", tokens=[[1, 2, 3], [4]], dimensions=8)
    resp = httpx.post(f"{proxy.url}/v1/embeddings", content=body, headers=FB, timeout=10)
    assert resp.status_code == 200, resp.text
    got = read_embedding_response(resp.content)
    ids = [b"".join(i.to_bytes(4, "little") for i in row) for row in ([1, 2, 3], [4])]
    assert bytes(got.values) == b"".join(vector(b"i" + row, 8) for row in ids)


def test_a_failing_backend_is_failed_over_before_the_answer(proxy: Server) -> None:
    before = sample(proxy.url, "flatgate_upstream_failures_total", backend="failing")
    resp = embed(proxy.url, "emb-failover", dimensions=16)
    assert resp.status_code == 200, resp.text
    assert resp.headers[BACKEND_HEADER] == "fbs"
    assert bytes(read_embedding_response(resp.content).values) == expected(TEXTS, 16)
    assert sample(proxy.url, "flatgate_upstream_failures_total", backend="failing") > before


def test_a_body_that_breaks_off_is_failed_over_too(proxy: Server) -> None:
    """The dying stub sends its 200 head and part of the body, then cuts the
    connection: nothing has reached the caller, so the next backend answers."""
    failures = {"backend": "dying", "kind": "UpstreamProtocolError"}
    before = sample(proxy.url, "flatgate_upstream_failures_total", **failures)
    resp = embed(proxy.url, "emb-cut", dimensions=16)
    assert resp.status_code == 200, resp.text
    assert resp.headers[BACKEND_HEADER] == "openai"
    assert bytes(read_embedding_response(resp.content).values) == expected(TEXTS, 16)
    assert sample(proxy.url, "flatgate_upstream_failures_total", **failures) == before + 1


@pytest.mark.parametrize("model", ["claude-3-haiku", "chat-only"])
def test_a_route_that_serves_no_embeddings_is_refused_naming_it(proxy: Server, model: str) -> None:
    status, code, message = error_of(embed(proxy.url, model))
    route = "claude-*" if model.startswith("claude") else model
    assert (status, code) == (400, "embeddings_unsupported")
    assert repr(route) in message


def test_a_route_skips_its_backends_that_serve_no_embeddings(proxy: Server) -> None:
    for _ in range(3):  # whatever the balancer's turn, claude is never sent one
        resp = embed(proxy.url, "mixed", dimensions=8)
        assert resp.status_code == 200, resp.text
        assert resp.headers[BACKEND_HEADER] == "fbs"


def test_completions_still_go_to_the_chat_only_backend(proxy: Server) -> None:
    body = build_request("chat-only", [("user", "hi there")], stream=False)
    resp = httpx.post(f"{proxy.url}/v1/completions", content=body, headers=FB, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.headers[BACKEND_HEADER] == "chat-only"


def test_an_unknown_model_is_404(proxy: Server) -> None:
    status, code, message = error_of(embed(proxy.url, "no-such-model"))
    assert (status, code) == (404, "no_route")
    assert "no-such-model" in message


def test_a_backend_429_is_passed_on_with_retry_after(proxy: Server) -> None:
    resp = embed(proxy.url, "emb-limited")
    assert error_of(resp)[:2] == (429, "backend_rate_limited")
    assert resp.headers["retry-after"] == "1"


def test_a_completion_request_on_the_embeddings_path_is_refused(proxy: Server) -> None:
    body = build_request("emb-fbs", [("user", "hi")])
    resp = httpx.post(f"{proxy.url}/v1/embeddings", content=body, headers=FB, timeout=10)
    status, code, message = error_of(resp)
    assert (status, code) == (400, "malformed_request")
    assert "FGEQ" in message


def test_embeddings_are_counted_by_route_and_logged(proxy: Server) -> None:
    before = sample(proxy.url, "flatgate_embeddings_requests_total", route="emb-fbs", status="200")
    total = sample(proxy.url, "flatgate_requests_total", route="emb-fbs", status="200")
    resp = embed(proxy.url, "emb-fbs", texts=["one two three four five"], rid="log-me-7")
    assert resp.status_code == 200
    assert (
        sample(proxy.url, "flatgate_embeddings_requests_total", route="emb-fbs", status="200")
        == before + 1
    )
    assert sample(proxy.url, "flatgate_requests_total", route="emb-fbs", status="200") == total + 1
    line = _log_line(proxy.log, "rid=log-me-7")
    assert "api=embeddings" in line
    assert "path=/v1/embeddings" in line
    assert re.search(r"\btokens=5\b", line), line
    assert "backend=fbs" in line
    assert "status=200" in line


def _log_line(log: Path, needle: str) -> str:
    """The access-log line holding ``needle`` (lines are flushed in batches)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if needle in line:
                return line
        time.sleep(0.1)
    raise AssertionError(f"no access-log line with {needle}")


@pytest.fixture(scope="module")
def capped(
    stubs: dict[str, Server], anthropic_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("capped")
    doc = routes(stubs, anthropic_port)
    doc["proxy"]["max_response_bytes"] = 4096
    cfg = write_config(d / "proxy.toml", toml(doc))
    with running("proxy", ["--config", cfg], d) as p:
        yield p


@pytest.mark.parametrize("model", ["emb-fbs", "emb-openai"])
def test_an_answer_over_max_response_bytes_is_refused(capped: Server, model: str) -> None:
    small = embed(capped.url, model, dimensions=8)
    assert small.status_code == 200, small.text
    status, code, message = error_of(embed(capped.url, model, dimensions=1024))
    assert (status, code) == (502, "backend_response_too_large")
    assert "max_response_bytes (4096)" in message


async def test_the_in_process_router_answers_the_same(
    proxy: Server, stubs: dict[str, Server], anthropic_port: int
) -> None:
    doc = routes(stubs, anthropic_port)
    doc["proxy"]["access_log"] = False
    server = ProxyServer(parse_config(doc, environ={}), worker="t")
    router = InProcessRouter(server)
    try:

        async def ask(model: str, **kw: Any) -> tuple[int, Any, bytes]:
            body = write_embedding_request(model, texts=TEXTS, **kw)
            return await answered(router.embed(body, "ip-1", admitted=True))

        for model in ("emb-fbs", "emb-openai"):
            status, headers, data = await ask(model, dimensions=32)
            over_http = embed(proxy.url, model, rid="ip-1", dimensions=32)
            assert status == 200
            assert data == over_http.content
            assert headers[BACKEND_HEADER] == over_http.headers[BACKEND_HEADER]
        status, headers, data = await ask("emb-failover", dimensions=32)
        assert (status, headers[BACKEND_HEADER]) == (200, "fbs")
        assert bytes(read_embedding_response(data).values) == expected(TEXTS, 32)
        status, headers, data = await ask("claude-x")
        assert status == 400
        assert b"embeddings_unsupported" in data
        status, headers, data = await ask("emb-limited")
        assert (status, headers["retry-after"]) == (429, "1")
    finally:
        await router.aclose()
