"""The proxy's one error root (``service.errors``): the mapping of the layers'
exceptions, the rendering of an answer, and every error answer the proxy gives
(over HTTP and in process) carrying the common headers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from benchmarks.inmemory import FakeAnswer, FakeExchange, FakeTransport, drive
from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.auth import hash_key
from flatgate.proxy.plumbing.body import BodyMalformed, BodyTimeout, BodyTooLarge
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.errors import ANSWERABLE, ProxyError, answer_of, proxy_error
from flatgate.proxy.service.inprocess import InProcessRouter
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import (
    Upstream,
    UpstreamConnectError,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
    UpstreamTimeout,
    retry_after_value,
)
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import JSON
from tests.proxy.routed import answered

TOKEN = "proxy-token-1"
BODY = build_request("m", [("user", "hi")])


# -- the rendering --------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "header"),
    [(0.0, "1"), (0.2, "1"), (1.0, "1"), (1.5, "2"), (2.5, "3"), (59.01, "60")],
)
def test_retry_after_is_whole_seconds_rounded_up(seconds: float, header: str) -> None:
    assert retry_after_value(seconds) == header
    _, headers, _ = answer_of(ProxyError(codes.BACKENDS_BUSY, "busy", retry_after=seconds))
    assert dict(headers)["retry-after"] == header


def test_an_answer_has_the_code_the_message_and_the_common_headers() -> None:
    status, headers, body = answer_of(ProxyError(codes.NO_ROUTE, "no route for x"))
    assert status == 404 and headers == [("content-type", JSON)]
    assert json.loads(body) == {"error": {"code": "no_route", "message": "no route for x"}}
    _, headers, _ = answer_of(ProxyError(codes.UNAUTHORIZED, "token"))
    assert ("www-authenticate", 'Bearer realm="flatgate"') in headers
    err = ProxyError(codes.BACKEND_AUTH_FAILED, "credential")
    assert not err.should_retry
    assert ("x-should-retry", "false") in answer_of(err)[1]
    assert ProxyError(codes.BACKEND_ERROR, "5xx").should_retry
    _, headers, _ = answer_of(ProxyError(codes.DRAINING, "bye", retry_after=1.0))
    assert ("connection", "close") in headers and ("retry-after", "1") in headers


def test_a_backends_own_status_and_body_pass_through() -> None:
    own = b'{"error": {"code": "context_length_exceeded", "message": "too long"}}'
    status, _, body = answer_of(ProxyError(codes.BACKEND_REJECTED, "x", status=422, body=own))
    assert (status, body) == (422, own)


# -- the one boundary -------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "begun", "code", "message"),
    [
        (
            UpstreamTimeout("read"),
            False,
            codes.BACKEND_TIMEOUT,
            "no backend answered in time: read",
        ),
        (UpstreamTimeout("read"), True, codes.BACKEND_TIMEOUT, "read"),
        (
            UpstreamConnectError("refused"),
            False,
            codes.BACKEND_UNAVAILABLE,
            "no backend reachable: refused",
        ),
        (UpstreamProtocolError("reset"), True, codes.BACKEND_DISCONNECTED, "reset"),
        (TranslatorError("bad frame"), False, codes.BACKEND_PROTOCOL_ERROR, "bad frame"),
        (TranslatorError("bad frame"), True, codes.BACKEND_PROTOCOL_ERROR, "bad frame"),
        (MalformedBuffer("root offset"), False, codes.MALFORMED_REQUEST, "root offset"),
        (BodyTooLarge(10), False, codes.BODY_TOO_LARGE, "body over 10 bytes"),
        (
            BodyTimeout(1.0, idle=True),
            False,
            codes.BODY_TIMEOUT,
            "no byte of the request body within 1 s",
        ),
        (BodyMalformed("ended early"), False, codes.MALFORMED_BODY, "ended early"),
    ],
)
def test_foreign_exceptions_map_to_one_code_each(
    exc: Exception, begun: bool, code: codes.ErrorCode, message: str
) -> None:
    assert isinstance(exc, ANSWERABLE)
    err = proxy_error(exc, begun=begun)
    assert (err.code, err.status, err.message) == (code, code.status, message)


def test_a_proxy_error_maps_to_itself_and_nothing_else_is_answerable() -> None:
    err = ProxyError(codes.NOT_FOUND, "x")
    assert proxy_error(err) is err
    with pytest.raises(TypeError):
        proxy_error(ValueError("not ours"))


# -- every answer the proxy gives ------------------------------------------------

# Codes whose answer tells the caller how long to wait.
WAITS = {
    codes.POOL_EXHAUSTED.code,
    codes.BACKENDS_BUSY.code,
    codes.DRAINING.code,
    codes.SERVER_BUSY.code,
    codes.CALLER_BUSY.code,
    codes.BACKEND_RATE_LIMITED.code,
    codes.TENANT_RATE_LIMITED.code,
    codes.LIMITS_UNAVAILABLE.code,
}


def assert_common_headers(status: int, headers: Any, body: bytes) -> str:
    """The error's code, once its answer is checked against the rules."""
    h = dict(headers)
    code: str = json.loads(body)["error"]["code"]
    assert h["content-type"] == JSON
    assert ("www-authenticate" in h) == (status == 401)
    assert (h.get("x-should-retry") == "false") == (code in codes.NOT_RETRYABLE)
    if code in WAITS:
        assert int(h["retry-after"]) >= 1
    else:
        assert "retry-after" not in h
    return code


class Answers(FakeTransport):
    """Every backend answers ``status`` (with ``data`` and ``headers``), or
    raises ``error``."""

    def __init__(
        self,
        status: int = 200,
        data: bytes = b"",
        error: Exception | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(data)
        self.status = status
        self.error = error
        self.headers = headers or {}

    async def request(self, req: Upstream) -> Any:
        if self.error is not None:
            raise self.error
        answer = await super().request(req)
        answer.status = self.status
        answer.headers = self.headers  # type: ignore[misc]
        return answer


class TimesOut(FakeAnswer):
    async def iter_bytes(self) -> AsyncIterator[bytes]:
        raise UpstreamTimeout("no first byte")
        yield b""  # pragma: no cover


class FirstByteTimeout(FakeTransport):
    async def request(self, req: Upstream) -> Any:
        return TimesOut(b"")


def server(transport: FakeTransport, **proxy: Any) -> ProxyServer:
    config = {
        "proxy": {"access_log": False, "max_body_bytes": 4096, **proxy},
        "backends": [{"name": "b", "url": "http://127.0.0.1:9"}],
        "routes": [{"model": "m", "backends": ["b"]}],
    }
    s = ProxyServer(parse_config(config), worker="t")
    s._transport = transport
    return s


def ask(
    s: ProxyServer, body: bytes = BODY, path: str = "/v1/completions", **headers: str
) -> FakeExchange:
    ex = FakeExchange(body)
    ex.path = path
    for name, value in headers.items():
        ex._headers[name.replace("_", "-")] = value
    drive(s(ex))
    return ex


def request_cases() -> list[tuple[str, Any]]:
    """(expected code, a way to get it) for every refusal of a request."""

    def get(s: ProxyServer) -> FakeExchange:
        ex = FakeExchange(BODY)
        ex.method = "GET"
        drive(s(ex))
        return ex

    plain = server(Answers())
    authed = server(Answers(), auth_token_sha256=hash_key(TOKEN))
    return [
        ("method_not_allowed", lambda: get(plain)),
        ("unsupported_media_type", lambda: ask(plain, content_type="text/plain")),
        ("bad_content_length", lambda: ask(plain, content_length="many")),
        ("body_too_large", lambda: ask(plain, content_length="99999")),
        ("not_found", lambda: ask(plain, path="/nowhere")),
        ("no_route", lambda: ask(plain, build_request("other", [("user", "hi")]))),
        ("malformed_request", lambda: ask(plain, b"\x00" * 16)),
        ("unauthorized", lambda: ask(authed, authorization="Bearer wrong")),
        ("unauthorized", lambda: ask(authed, path="/metrics")),
        ("tenant_forbidden", lambda: ask(authed, build_request("m", [("user", "x")], tenant="a"))),
        ("pool_exhausted", lambda: ask(server(Answers(error=UpstreamPoolTimeout("full"))))),
        ("backend_unavailable", lambda: ask(server(Answers(error=UpstreamConnectError("no"))))),
        ("backend_auth_failed", lambda: ask(server(Answers(status=401, data=b"no")))),
        (
            "backend_rate_limited",
            lambda: ask(server(Answers(429, b"slow", headers={"retry-after": "2.5"}))),
        ),
        ("backend_error", lambda: ask(server(Answers(status=500, data=b"oops")))),
        # Before the first frame: the answer that once went out without them.
        ("backend_timeout", lambda: ask(server(FirstByteTimeout()))),
        (
            "backend_protocol_error",
            lambda: ask(server(Answers(data=b"\xff\xff\xff\x7f" + b"x" * 8))),
        ),
    ]


@pytest.mark.parametrize(("code", "case"), request_cases())
def test_every_error_answer_carries_the_common_headers(code: str, case: Any) -> None:
    ex = case()
    assert ex.status >= 400
    assert assert_common_headers(ex.status, ex.headers_out, ex.body_out) == code
    if code == "backend_rate_limited":  # the backend's 2.5 s, rounded up
        assert dict(ex.headers_out)["retry-after"] == "3"


async def test_the_draining_answers_carry_them_and_close_the_connection() -> None:
    s = server(Answers())
    s.drain.begin()
    for path in ("/v1/completions", "/readyz", "/metrics"):
        ex = ask(s, path=path)
        assert ex.status == 503
        assert assert_common_headers(ex.status, ex.headers_out, ex.body_out) == "draining"
        assert ("connection", "close") in ex.headers_out


@pytest.mark.parametrize(
    ("transport", "model", "code"),
    [
        (Answers(), "other", "no_route"),
        (Answers(error=UpstreamPoolTimeout("full")), "m", "pool_exhausted"),
        (Answers(status=401, data=b"no"), "m", "backend_auth_failed"),
    ],
)
async def test_the_in_process_routers_refusals_carry_them_too(
    transport: FakeTransport, model: str, code: str
) -> None:
    router = InProcessRouter(server(transport))
    body = build_request(model, [("user", "hi")])
    status, headers, data = await answered(router.complete(body, "", admitted=True))
    assert assert_common_headers(status, headers, data) == code
