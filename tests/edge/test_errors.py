from __future__ import annotations

import json

import pytest

from flatgate.edge_translator.errors import (
    AuthenticationFailed,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    ProxyFailed,
    ProxyTimedOut,
    error_headers,
    shutting_down,
)
from flatgate.proxy.apis.errors import openai_body, openai_detail
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError


@pytest.mark.parametrize(
    ("cls", "status", "type_", "code"),
    [
        (InvalidRequest, 400, "invalid_request_error", "invalid_request"),
        (FlatgateError, 500, "api_error", "internal_error"),
        (AuthenticationFailed, 401, "invalid_request_error", "invalid_api_key"),
        (ModelNotFound, 404, "invalid_request_error", "model_not_found"),
        (NotFound, 404, "invalid_request_error", "not_found"),
        (MethodNotAllowed, 405, "invalid_request_error", "method_not_allowed"),
        (PayloadTooLarge, 413, "invalid_request_error", "body_too_large"),
        (ProxyFailed, 502, "api_error", "proxy_unavailable"),
        (ProxyTimedOut, 504, "api_error", "proxy_timeout"),
    ],
)
def test_each_error_renders_openai_shape(cls, status, type_, code):
    err = cls("went wrong", param="temperature")
    assert isinstance(err, FlatgateError)
    assert err.status == status
    assert json.loads(openai_body(err)) == {
        "error": {"message": "went wrong", "type": type_, "param": "temperature", "code": code}
    }
    assert openai_detail(err) == json.loads(openai_body(err))["error"]


def test_code_and_status_can_be_overridden_per_instance():
    err = ProxyFailed("x", code=codes.BACKENDS_BUSY, status=502)
    assert (err.status, err.code.code, err.type) == (502, "backends_busy", "api_error")
    assert ProxyFailed("y").code.code == "proxy_unavailable"


def test_a_code_from_a_newer_peer_is_kept_with_the_status_given():
    err = ProxyFailed("z", code=codes.peer_code("brand_new", 502))
    assert (err.status, err.code.code, err.type) == (502, "brand_new", "api_error")


def test_error_headers_in_their_order() -> None:
    err = FlatgateError(
        "busy",
        code=codes.SERVER_BUSY,
        retry_after=0.2,
        headers=[("x-ratelimit-limit-requests", "5")],
    )
    assert error_headers(err, "req-1") == [
        ("content-type", "application/json"),
        ("x-request-id", "req-1"),
        ("request-id", "req-1"),
        ("x-ratelimit-limit-requests", "5"),
        ("retry-after", "1"),
    ]


@pytest.mark.parametrize(("wait", "said"), [(0.0, "1"), (1.0, "1"), (1.01, "2"), (59.5, "60")])
def test_retry_after_is_whole_seconds_rounded_up(wait: float, said: str) -> None:
    headers = dict(error_headers(FlatgateError("x", retry_after=wait), None))
    assert headers["retry-after"] == said


def test_error_headers_of_a_405_a_misconfiguration_and_the_drain() -> None:
    assert ("allow", "GET") in error_headers(MethodNotAllowed("no"), None, allow="GET")
    assert all(name != "allow" for name, _ in error_headers(NotFound("no"), None, allow="GET"))
    wrong = ProxyFailed("x", code=codes.PROXY_AUTH_FAILED)
    assert not wrong.should_retry and FlatgateError("x").should_retry
    assert ("x-should-retry", "false") in error_headers(wrong, None)
    drained = dict(error_headers(shutting_down(), None))
    assert (drained["connection"], drained["retry-after"]) == ("close", "1")
    assert "x-request-id" not in dict(error_headers(FlatgateError("x"), None))
