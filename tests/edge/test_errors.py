from __future__ import annotations

import json

import pytest

from flatgate.edge_translator.errors import (
    AuthenticationFailed,
    EdgeError,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    UpstreamFailed,
    UpstreamTimeout,
)
from flatgate.proxy.wire import codes


@pytest.mark.parametrize(
    ("cls", "status", "type_", "code"),
    [
        (InvalidRequest, 400, "invalid_request_error", "invalid_request"),
        (EdgeError, 500, "api_error", "internal_error"),
        (AuthenticationFailed, 401, "invalid_request_error", "invalid_api_key"),
        (ModelNotFound, 404, "invalid_request_error", "model_not_found"),
        (NotFound, 404, "invalid_request_error", "not_found"),
        (MethodNotAllowed, 405, "invalid_request_error", "method_not_allowed"),
        (PayloadTooLarge, 413, "invalid_request_error", "body_too_large"),
        (UpstreamFailed, 502, "api_error", "proxy_unavailable"),
        (UpstreamTimeout, 504, "api_error", "proxy_timeout"),
    ],
)
def test_each_error_renders_openai_shape(cls, status, type_, code):
    err = cls("went wrong", param="temperature")
    assert isinstance(err, EdgeError)
    assert err.status == status
    assert json.loads(err.body()) == {
        "error": {"message": "went wrong", "type": type_, "param": "temperature", "code": code}
    }
    assert err.detail() == json.loads(err.body())["error"]


def test_code_and_status_can_be_overridden_per_instance():
    err = UpstreamFailed("x", code=codes.BACKENDS_BUSY, status=502)
    assert (err.status, err.code, err.type) == (502, "backends_busy", "api_error")
    assert UpstreamFailed("y").code == "proxy_unavailable"


def test_a_code_from_a_newer_peer_is_kept_with_the_status_given():
    err = UpstreamFailed("z", code=codes.peer_code("brand_new", 502))
    assert (err.status, err.code, err.type) == (502, "brand_new", "api_error")
