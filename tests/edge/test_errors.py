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


@pytest.mark.parametrize(
    ("cls", "status", "type_", "code"),
    [
        (InvalidRequest, 400, "invalid_request_error", None),
        (AuthenticationFailed, 401, "invalid_request_error", "invalid_api_key"),
        (ModelNotFound, 404, "invalid_request_error", "model_not_found"),
        (NotFound, 404, "invalid_request_error", "not_found"),
        (MethodNotAllowed, 405, "invalid_request_error", "method_not_allowed"),
        (PayloadTooLarge, 413, "invalid_request_error", "request_too_large"),
        (UpstreamFailed, 502, "api_error", "bad_gateway"),
        (UpstreamTimeout, 504, "api_error", "timeout"),
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
    err = UpstreamFailed("x", code="backend_down", status=503)
    assert (err.status, err.code) == (503, "backend_down")
    assert UpstreamFailed("y").code == "bad_gateway"
