"""``POST /v1/embeddings`` through the proxy's own code, in process, over
scripted backends (``benchmarks.inmemory``): the tenant's limits (one request,
the prompt tokens estimated from the inputs, settled to the answer's), the
caller token for tenants, ``max_response_bytes``, answers that are no
embeddings, backends given back their outstanding count whatever happened,
``serves`` on both paths, the access log and metrics."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from benchmarks.inmemory import FakeAnswer, FakeExchange, FakeTransport, drive
from flatgate.proxy.plumbing.accesslog import AccessLog
from flatgate.proxy.plumbing.auth import hash_key
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.quota import embedding_estimate
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import Upstream, UpstreamProtocolError
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.embeddings import (
    is_embedding_request,
    read_embedding_request,
    read_embedding_response,
    write_embedding_request,
    write_embedding_response,
)
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import ADMITTED_HEADER, BACKEND_HEADER, FinishReason

TOKEN = "proxy-caller-token"
VALUES = bytes(range(32))  # 2 vectors of 4 float32
ANSWER = write_embedding_response(
    model="m", count=2, dimensions=4, values=VALUES, prompt_tokens=45, total_tokens=45
)
# 2 texts of 60 bytes: each estimated at 15 tokens, 30 in all.
TEXTS = ["x" * 60, "y" * 60]
CHUNK = write_chunk(content="done", finish_reason=FinishReason.STOP)


def config(*, limits: list[dict[str, Any]] | None = None, **proxy: Any) -> dict[str, Any]:
    return {
        "proxy": {"access_log": False, **proxy},
        "backends": [
            {"name": "a", "url": "http://127.0.0.1:9"},
            {"name": "b", "url": "http://127.0.0.1:10"},
            {"name": "chat", "url": "http://127.0.0.1:11", "serves": ["completions"]},
            {"name": "vec", "url": "http://127.0.0.1:12", "serves": ["embeddings"]},
            {"name": "claude", "url": "http://127.0.0.1:13/v1", "protocol": "anthropic"},
        ],
        "routes": [
            {"model": "m", "backends": ["a"]},
            {"model": "pair", "backends": ["a"], "fallbacks": ["b"]},
            {"model": "chat-or-vec", "backends": ["chat", "vec"]},
            {"model": "vec-only", "backends": ["vec"]},
            {"model": "claude", "backends": ["claude"]},
        ],
        "limits": limits or [],
    }


class Answer(FakeAnswer):
    """A scripted answer: its headers, and a body that may break off."""

    def __init__(
        self, data: bytes, headers: Mapping[str, str] | None = None, broken: bool = False
    ) -> None:
        super().__init__(data)
        self.headers = headers or {}
        self.broken = broken
        self.read_any = False

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        self.read_any = True
        yield self.data[: len(self.data) // 2]
        if self.broken:
            raise UpstreamProtocolError("connection reset mid-response")
        yield self.data[len(self.data) // 2 :]


class Backends(FakeTransport):
    """Answers each backend (by URL) as scripted (a completion with one final
    chunk); counts what each was sent."""

    def __init__(self, **answers: Answer) -> None:
        super().__init__()
        self.answers = answers
        self.sent: list[str] = []

    async def request(self, req: Upstream) -> Any:
        port = req.url.split(":")[2].split("/", maxsplit=1)[0]
        name = {"9": "a", "10": "b", "11": "chat", "12": "vec", "13": "claude"}[port]
        self.sent.append(name)
        self.last_body = req.body
        default = Answer(ANSWER) if is_embedding_request(req.body) else FakeAnswer(CHUNK)
        self.last_answer = self.answers.get(name) or default
        return self.last_answer


def server_for(cfg: dict[str, Any], **answers: Answer) -> tuple[ProxyServer, Backends]:
    server = ProxyServer(parse_config(cfg, environ={}), worker="t")
    backends = Backends(**answers)
    server._transport = backends
    return server, backends


def embed(server: ProxyServer, body: bytes, **headers: str) -> FakeExchange:
    ex = FakeExchange(body)
    ex.path = "/v1/embeddings"
    ex._headers.update(headers)
    drive(server(ex))
    return ex


def error(ex: FakeExchange) -> tuple[int, str, str]:
    err = json.loads(ex.body_out)["error"]
    return ex.status, err["code"], err["message"]


def request(model: str = "m", **kw: Any) -> bytes:
    return write_embedding_request(model, texts=TEXTS, **kw)


def idle(server: ProxyServer) -> bool:
    """Every backend was given back its outstanding requests."""
    return all(b.outstanding == 0 for b in server.backends.values())


def test_the_fbs_answer_is_the_backends_bytes_and_the_request_its_own() -> None:
    server, backends = server_for(config())
    body = request()
    ex = embed(server, body)
    assert ex.status == 200
    assert ex.body_out == ANSWER
    assert dict(ex.headers_out)[BACKEND_HEADER] == "a"
    assert backends.last_body is body  # forwarded untouched
    assert idle(server)


def test_the_estimate_counts_bytes_of_text_and_token_ids() -> None:
    texts = read_embedding_request(request())
    assert embedding_estimate(texts) == 30
    ids = read_embedding_request(write_embedding_request("m", tokens=[[1, 2, 3], [4, 5]]))
    assert embedding_estimate(ids) == 5


def test_an_embeddings_request_counts_one_request_of_the_tenants_limit() -> None:
    server, backends = server_for(config(limits=[{"tenant": "acme", "requests_per_minute": 2}]))
    statuses = [embed(server, request(tenant="acme")).status for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert backends.sent == ["a", "a"]  # the third never reached a backend
    assert embed(server, request(tenant="globex")).status == 200


def test_the_estimate_is_reserved_against_tokens_per_minute_before_any_backend() -> None:
    # The answers report no prompt tokens: each request's 30 stand, and the
    # second is over 50 before a backend is asked.
    answer = write_embedding_response(model="m", count=2, dimensions=4, values=VALUES)
    server, backends = server_for(
        config(limits=[{"tenant": "acme", "tokens_per_minute": 50}]), a=Answer(answer)
    )
    assert embed(server, request(tenant="acme")).status == 200
    status, code, message = error(embed(server, request(tenant="acme")))
    assert (status, code) == (429, "tenant_rate_limited")
    assert "tokens_per_minute" in message
    assert backends.sent == ["a"]


def test_tokens_per_minute_settle_to_the_answers_prompt_tokens() -> None:
    # Each request reserves its estimate (30) and settles to the 45 prompt
    # tokens the answer reports: 45 + 30 fits in 100, 90 + 30 does not. Had
    # the reservation stood (30 each), the third would fit.
    server, _ = server_for(config(limits=[{"tenant": "acme", "tokens_per_minute": 100}]))
    statuses = [embed(server, request(tenant="acme")).status for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_an_answer_without_prompt_tokens_keeps_the_reservation() -> None:
    answer = write_embedding_response(model="m", count=2, dimensions=4, values=VALUES)
    server, _ = server_for(
        config(limits=[{"tenant": "acme", "tokens_per_minute": 100}]), a=Answer(answer)
    )
    statuses = [embed(server, request(tenant="acme")).status for _ in range(4)]
    assert statuses == [200, 200, 200, 429]  # 30 a request: the fourth is over


def test_a_request_the_edge_admitted_is_not_counted_again() -> None:
    server, _ = server_for(config(limits=[{"tenant": "acme", "requests_per_minute": 1}]))
    admitted = [embed(server, request(tenant="acme"), **{ADMITTED_HEADER: "1"}) for _ in range(3)]
    assert [ex.status for ex in admitted] == [200] * 3
    assert [embed(server, request(tenant="acme")).status for _ in range(2)] == [200, 429]


def test_setting_a_tenant_needs_the_proxys_token() -> None:
    server, backends = server_for(config(auth_token_sha256=hash_key(TOKEN)))
    assert error(embed(server, request(tenant="acme")))[:2] == (403, "tenant_forbidden")
    assert backends.sent == []
    ok = embed(server, request(tenant="acme"), authorization=f"Bearer {TOKEN}")
    assert ok.status == 200
    assert embed(server, request()).status == 200


def test_an_answer_declared_over_max_response_bytes_is_refused_unread() -> None:
    answer = Answer(ANSWER, {"content-length": str(len(ANSWER))})
    server, _ = server_for(config(max_response_bytes=len(ANSWER) - 1), a=answer)
    status, code, message = error(embed(server, request()))
    assert (status, code) == (502, "backend_response_too_large")
    assert f"max_response_bytes ({len(ANSWER) - 1})" in message
    assert not answer.read_any
    assert answer.closed
    assert idle(server)


def test_an_answer_that_grows_past_max_response_bytes_is_refused() -> None:
    answer = Answer(ANSWER)  # no Content-Length: counted as it comes
    server, backends = server_for(config(max_response_bytes=len(ANSWER) - 1), a=answer)
    assert error(embed(server, request("pair")))[:2] == (502, "backend_response_too_large")
    assert backends.sent == ["a"]  # not failed over: the backend did answer
    assert answer.closed
    assert idle(server)
    server, _ = server_for(config(max_response_bytes=len(ANSWER)), a=Answer(ANSWER))
    assert embed(server, request()).status == 200


def test_an_answer_that_is_no_embeddings_is_a_protocol_error() -> None:
    server, _ = server_for(config(), a=Answer(b"\x00" * 64))
    status, code, message = error(embed(server, request()))
    assert (status, code) == (502, "backend_protocol_error")
    assert "backend a" in message
    assert idle(server)


def test_a_body_that_breaks_off_fails_over_and_cools_the_backend_down() -> None:
    server, backends = server_for(config(), a=Answer(ANSWER, broken=True))
    ex = embed(server, request("pair"))
    assert ex.status == 200
    assert dict(ex.headers_out)[BACKEND_HEADER] == "b"
    assert backends.sent == ["a", "b"]
    assert server.backends["a"].cooldown_until > 0
    assert idle(server)
    # With nothing to fail over to, the caller is told the backend broke off.
    server, _ = server_for(config(), a=Answer(ANSWER, broken=True))
    assert error(embed(server, request()))[:2] == (502, "backend_unavailable")
    assert idle(server)


def test_backends_that_serve_no_embeddings_are_skipped_or_the_route_refused() -> None:
    server, backends = server_for(config())
    for _ in range(3):  # whatever the balancer's turn
        ex = embed(server, request("chat-or-vec"))
        assert dict(ex.headers_out)[BACKEND_HEADER] == "vec"
    status, code, message = error(embed(server, request("claude")))
    assert (status, code, message) == (
        400,
        "embeddings_unsupported",
        "no backend of route 'claude' serves embeddings",
    )
    assert "claude" not in backends.sent


def test_completions_skip_the_backends_that_serve_only_embeddings() -> None:
    server, backends = server_for(config())
    for _ in range(3):
        ex = FakeExchange(build_request("chat-or-vec", [("user", "hi")]))
        drive(server(ex))
        assert ex.status == 200
    assert set(backends.sent) == {"chat"}
    ex = FakeExchange(build_request("vec-only", [("user", "hi")]))
    drive(server(ex))
    status, code, message = error(ex)
    assert (status, code) == (400, "untranslatable_request")
    assert "'vec-only' serves completions" in message
    assert backends.sent.count("vec") == 0


def test_a_completion_request_is_not_an_embeddings_request() -> None:
    server, backends = server_for(config())
    status, code, message = error(embed(server, build_request("m", [("user", "hi")])))
    assert (status, code) == (400, "malformed_request")
    assert "FGEQ" in message
    assert backends.sent == []


def test_only_post_is_allowed() -> None:
    server, _ = server_for(config())
    ex = FakeExchange(request())
    ex.path = "/v1/embeddings"
    ex.method = "GET"
    drive(server(ex))
    status, code, message = error(ex)
    assert (status, code, message) == (
        405,
        "method_not_allowed",
        "POST an EmbeddingRequest here",
    )


def test_each_answer_is_counted_and_logged_with_its_prompt_tokens() -> None:
    server, _ = server_for(config())
    lines: list[bytes] = []
    server.access = AccessLog("proxy", "json", write=lines.append)
    embed(server, request(tenant="acme"), **{"x-request-id": "e-1"})
    embed(server, request("claude"), **{"x-request-id": "e-2"})
    server.access.flush()
    logged = [json.loads(line) for chunk in lines for line in chunk.splitlines()]
    first, second = logged
    assert (first["api"], first["method"], first["path"], first["request_id"]) == (
        "embeddings",
        "POST",
        "/v1/embeddings",
        "e-1",
    )
    assert (first["status"], first["backend"], first["tenant"]) == (200, "a", "acme")
    assert first["completion_tokens"] == 45  # the answer's prompt tokens
    assert (first["bytes_in"], first["bytes_out"]) == (len(request(tenant="acme")), len(ANSWER))
    assert (second["status"], second["error"], second["model"]) == (
        400,
        "embeddings_unsupported",
        "claude",
    )
    text = server.metrics.render().decode()
    assert 'flatgate_embeddings_requests_total{route="m",status="200"} 1.0' in text
    assert 'flatgate_embeddings_requests_total{route="claude",status="400"} 1.0' in text
    assert 'flatgate_requests_total{route="m",status="200"} 1.0' in text


def test_the_answer_is_the_vectors_the_backend_sent() -> None:
    server, _ = server_for(config())
    got = read_embedding_response(embed(server, request()).body_out)
    assert (got.count, got.dimensions, bytes(got.values)) == (2, 4, VALUES)


async def test_while_draining_an_embeddings_request_is_refused_and_logged() -> None:
    server, backends = server_for(config())
    lines: list[bytes] = []
    server.access = AccessLog("proxy", "json", write=lines.append)
    server.drain.begin()
    ex = FakeExchange(request())
    ex.path = "/v1/embeddings"
    await server(ex)
    assert error(ex)[:2] == (503, "draining")
    assert backends.sent == []
    server.access.flush()
    (line,) = [json.loads(x) for chunk in lines for x in chunk.splitlines()]
    assert (line["api"], line["status"], line["error"]) == ("embeddings", 503, "draining")
    assert line["method"] == "POST"


def test_an_embeddings_request_is_not_a_completion_request() -> None:
    server, backends = server_for(config())
    ex = FakeExchange(request())  # on /v1/completions
    drive(server(ex))
    status, code, message = error(ex)
    assert (status, code) == (400, "malformed_request")
    assert "/v1/embeddings" in message
    assert backends.sent == []
