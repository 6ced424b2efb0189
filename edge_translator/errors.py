"""The edge's one error tree, rendered in OpenAI's error shape.

Every failure the edge reports to a client is an ``EdgeError`` (or a subclass)
carrying its HTTP status, OpenAI ``type``, ``param`` and ``code``; ``body()``
renders ``{"error": {"message", "type", "param", "code"}}``. The app turns
these into responses in exactly one place. No I/O.

::

    EdgeError
    ├── InvalidRequest      400 invalid_request_error
    ├── AuthenticationFailed 401 invalid_request_error / invalid_api_key
    ├── ModelNotFound       404 invalid_request_error / model_not_found
    ├── NotFound            404 invalid_request_error / not_found
    ├── MethodNotAllowed    405 invalid_request_error / method_not_allowed
    ├── PayloadTooLarge     413 invalid_request_error / request_too_large
    ├── UpstreamFailed      502 api_error / bad_gateway (and other proxy statuses)
    └── UpstreamTimeout     504 api_error / timeout
"""

from __future__ import annotations

import msgspec

__all__ = [
    "AuthenticationFailed",
    "EdgeError",
    "InvalidRequest",
    "MethodNotAllowed",
    "ModelNotFound",
    "NotFound",
    "PayloadTooLarge",
    "UpstreamFailed",
    "UpstreamTimeout",
]


class _Detail(msgspec.Struct, omit_defaults=False):
    message: str
    type: str
    param: str | None
    code: str | None


class _Body(msgspec.Struct):
    error: _Detail


_encode = msgspec.json.Encoder().encode


class EdgeError(Exception):
    """Root of the edge's errors; subclasses fix ``status``, ``type`` and ``code``."""

    status: int = 500
    type: str = "api_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type

    def detail(self) -> dict[str, str | None]:
        """The inner ``error`` object (also what a mid-stream error event carries)."""
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def body(self) -> bytes:
        """The JSON response body ``{"error": {...}}``."""
        return _encode(_Body(_Detail(self.message, self.type, self.param, self.code)))


class InvalidRequest(EdgeError):
    status = 400
    type = "invalid_request_error"


class AuthenticationFailed(EdgeError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class ModelNotFound(EdgeError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotFound(EdgeError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(EdgeError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(EdgeError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UpstreamFailed(EdgeError):
    status = 502
    type = "api_error"
    code = "bad_gateway"


class UpstreamTimeout(EdgeError):
    status = 504
    type = "api_error"
    code = "timeout"
