"""Every error code flatgate emits, once: its HTTP status, the OpenAI error type a
JSON client sees, and what it means.

Every ``FlatgateError`` carries one (``root``). The proxy puts the code
strings in its JSON error bodies (``{"error": {"code", "message"}}``) and in
error chunks (``CompletionChunk.error.code``: the wire carries the string,
never the status or the type, which are this registry's); the edge answers
with them too, and reads the proxy's to decide its own answer. The error
table of ``docs/api/errors.md`` is checked against ``CODES`` by a test. No
I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = [
    "BACKENDS_BUSY",
    "BACKEND_AUTH_FAILED",
    "BACKEND_DISCONNECTED",
    "BACKEND_ERROR",
    "BACKEND_PROTOCOL_ERROR",
    "BACKEND_RATE_LIMITED",
    "BACKEND_REJECTED",
    "BACKEND_RESPONSE_TOO_LARGE",
    "BACKEND_STREAM_ERROR",
    "BACKEND_STREAM_TRUNCATED",
    "BACKEND_TIMEOUT",
    "BACKEND_UNAVAILABLE",
    "BAD_CONTENT_LENGTH",
    "BODY_TIMEOUT",
    "BODY_TOO_LARGE",
    "CALLER_BUSY",
    "CODES",
    "DRAINING",
    "EMBEDDINGS_UNSUPPORTED",
    "INTERNAL_ERROR",
    "INVALID_API_KEY",
    "INVALID_JSON",
    "INVALID_MEDIA",
    "INVALID_REQUEST",
    "INVALID_TOKEN",
    "JWKS_UNAVAILABLE",
    "LENGTH_REQUIRED",
    "LIMITS_UNAVAILABLE",
    "MALFORMED_BODY",
    "MALFORMED_REQUEST",
    "METHOD_NOT_ALLOWED",
    "MISSING_API_KEY",
    "MODEL_NAME_TOO_LONG",
    "MODEL_NOT_FOUND",
    "NOT_FOUND",
    "NOT_RETRYABLE",
    "NO_ROUTE",
    "POOL_EXHAUSTED",
    "PROXY_AUTH_FAILED",
    "PROXY_PROTOCOL_ERROR",
    "PROXY_TIMEOUT",
    "PROXY_UNAVAILABLE",
    "SERVER_BUSY",
    "TENANT_FORBIDDEN",
    "TENANT_RATE_LIMITED",
    "TOO_MANY_WEBSOCKETS",
    "UNAUTHORIZED",
    "UNSUPPORTED_CONTENT_TYPE",
    "UNSUPPORTED_MEDIA_TYPE",
    "UNTRANSLATABLE_REQUEST",
    "WEBSOCKET_CONNECTION_LIMIT_REACHED",
    "ErrorCode",
    "by_code",
    "error_body",
    "peer_code",
]

INVALID = "invalid_request_error"
API = "api_error"
RATE = "rate_limit_error"


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One code: ``status`` is the HTTP status it is answered with before the
    first byte; after it, the code travels in an error chunk instead."""

    code: str
    status: int
    type: str
    meaning: str

    def __str__(self) -> str:
        return self.code


def _c(code: str, status: int, type_: str, meaning: str) -> ErrorCode:
    return ErrorCode(code, status, type_, meaning)


# The caller's request, as the proxy or the edge sees it.
MODEL_NAME_TOO_LONG = _c(
    "model_name_too_long", 400, INVALID, "the model name is longer than `max_model_bytes`"
)
MALFORMED_REQUEST = _c(
    "malformed_request", 400, INVALID,
    "the buffer fails a bounds, alignment or identifier check (the message names the check "
    "and the offset)",
)  # fmt: skip
BAD_CONTENT_LENGTH = _c("bad_content_length", 400, INVALID, "`Content-Length` is not a number")
INVALID_JSON = _c("invalid_json", 400, INVALID, "the body is not JSON")
INVALID_REQUEST = _c(
    "invalid_request", 400, INVALID,
    "a field is missing, of the wrong type or out of range (`param` names it)",
)  # fmt: skip
UNTRANSLATABLE_REQUEST = _c(
    "untranslatable_request", 400, INVALID,
    "the request cannot be written in the chosen backend's API (the message says why)",
)  # fmt: skip
EMBEDDINGS_UNSUPPORTED = _c(
    "embeddings_unsupported", 400, INVALID,
    "no backend of the route serves embeddings (an `anthropic` backend never does; "
    "`[[backends]] serves` says what the others do)",
)  # fmt: skip
UNSUPPORTED_CONTENT_TYPE = _c(
    "unsupported_content_type", 400, INVALID,
    "a content part or block type flatgate does not carry (the message names it)",
)  # fmt: skip
INVALID_MEDIA = _c(
    "invalid_media", 400, INVALID,
    "a content part's bytes do not decode (bad base64, a malformed data URL) or are not "
    "the media type the part declares (a PNG declared as JPEG); the message names the part",
)  # fmt: skip
MISSING_API_KEY = _c("missing_api_key", 401, INVALID, "no `Authorization: Bearer` key")
INVALID_API_KEY = _c("invalid_api_key", 401, INVALID, "the key is not one of `[[keys]]`")
INVALID_TOKEN = _c(
    "invalid_token", 401, INVALID,
    "a JWT bearer token (`[auth.jwt]`) does not verify: expired, not yet valid, wrong issuer "
    "or audience, bad signature, unknown `kid`, an algorithm not allowed, or no tenant claim "
    "(the message says which)",
)  # fmt: skip
UNAUTHORIZED = _c(
    "unauthorized", 401, INVALID,
    "a bearer token is missing or wrong: the proxy's caller token (a wrong one on any "
    "request; a missing one on `/metrics`, or on any request with `require_auth`), or the "
    "edge's `/metrics` token",
)  # fmt: skip
TENANT_FORBIDDEN = _c(
    "tenant_forbidden", 403, INVALID,
    "a request sets `tenant` without the proxy's caller token (`auth_token_sha256`)",
)  # fmt: skip
NOT_FOUND = _c("not_found", 404, INVALID, "no such path")
NO_ROUTE = _c("no_route", 404, INVALID, "no route for that provider and model")
MODEL_NOT_FOUND = _c("model_not_found", 404, INVALID, "the edge serves no such model")
RESPONSE_NOT_FOUND = _c(
    "response_not_found", 404, INVALID,
    "no stored response of that id for this tenant (never stored, `store: false`, deleted, "
    "expired after `responses_ttl_seconds`, or another tenant's)",
)  # fmt: skip
PREVIOUS_RESPONSE_NOT_FOUND = _c(
    "previous_response_not_found", 404, INVALID,
    "`previous_response_id` names no stored response of this tenant",
)  # fmt: skip
MALFORMED_BODY = _c(
    "malformed_body", 400, INVALID,
    "the request body ended before its `Content-Length`, its chunked framing is malformed, "
    "or it came in too many small pieces (the message says which)",
)  # fmt: skip
METHOD_NOT_ALLOWED = _c("method_not_allowed", 405, INVALID, "wrong method for the path")
BODY_TIMEOUT = _c(
    "body_timeout", 408, INVALID,
    "the request body stopped arriving for `body_idle_timeout` seconds, or was not complete "
    "within `body_timeout`",
)  # fmt: skip
LENGTH_REQUIRED = _c("length_required", 411, INVALID, "no `Content-Length`")
BODY_TOO_LARGE = _c("body_too_large", 413, INVALID, "body over `max_body_bytes`")
UNSUPPORTED_MEDIA_TYPE = _c(
    "unsupported_media_type", 415, INVALID, "`Content-Type` is not `application/x-flatbuffers`"
)
# Backends, as the proxy sees them.
BACKEND_REJECTED = _c(
    "backend_rejected", 400, INVALID,
    "a backend refused the request (4xx: a context too long, a bad parameter); the status "
    "and the message are the backend's",
)  # fmt: skip
BACKEND_AUTH_FAILED = _c(
    "backend_auth_failed", 502, API,
    "a backend refused flatgate's own credential (401/403): the gateway's configuration, "
    "never the caller's key",
)  # fmt: skip
BACKEND_RATE_LIMITED = _c(
    "backend_rate_limited", 429, RATE,
    "every backend of the route is rate limiting; `Retry-After` is the shortest wait they "
    "asked for (one that names none: its cooldown, at least 1 s)",
)  # fmt: skip
BACKEND_STREAM_ERROR = _c(
    "backend_stream_error", 502, API, "the backend reported an error after its stream began"
)
BACKEND_UNAVAILABLE = _c("backend_unavailable", 502, API, "no backend of the route reachable")
BACKEND_ERROR = _c("backend_error", 502, API, "every backend tried answered 5xx")
BACKEND_PROTOCOL_ERROR = _c(
    "backend_protocol_error", 502, API, "a backend's answer does not decode (a malformed frame)"
)
BACKEND_RESPONSE_TOO_LARGE = _c(
    "backend_response_too_large", 502, API,
    "a backend's whole answer (embeddings) is larger than `max_response_bytes`",
)  # fmt: skip
BACKEND_DISCONNECTED = _c(
    "backend_disconnected", 502, API, "the backend's connection broke mid-stream"
)
BACKEND_STREAM_TRUNCATED = _c(
    "backend_stream_truncated", 502, API, "the backend ended its stream without a final chunk"
)
TENANT_RATE_LIMITED = _c(
    "tenant_rate_limited", 429, RATE,
    "a tenant's limit (`[[limits]]`: requests or tokens per minute, streams in flight, the "
    "day's token budget) is spent; the message names it, `Retry-After` says when to try again",
)  # fmt: skip
CALLER_BUSY = _c(
    "caller_busy", 429, RATE,
    "this caller (a tenant at the edge, an address at the proxy) or this connection already "
    "holds its share of the worker's request-body bytes (`max_buffered_bytes_per_caller`, "
    "`max_buffered_bytes_per_connection`); `Retry-After` says when to try again",
)  # fmt: skip
LIMITS_UNAVAILABLE = _c(
    "limits_unavailable", 503, API,
    "the limits store (`[state]`) does not answer and `on_store_error = \"closed\"`; "
    "`Retry-After` says when to try again",
)  # fmt: skip
RESPONSES_UNAVAILABLE = _c(
    "responses_unavailable", 503, API,
    "the `[state]` store holding stored responses does not answer; `Retry-After` says when "
    "to try again",
)  # fmt: skip
BACKENDS_BUSY = _c(
    "backends_busy", 503, API, "every backend of the route is at its `max_outstanding`"
)
# The server itself.
TOO_MANY_WEBSOCKETS = _c(
    "too_many_websockets", 429, RATE,
    "this caller already holds `[edge] websocket_max_per_caller` Responses WebSockets open on "
    "this worker; `Retry-After` says when to try again",
)  # fmt: skip
WEBSOCKET_CONNECTION_LIMIT_REACHED = _c(
    "websocket_connection_limit_reached", 400, INVALID,
    "a Responses WebSocket reached `[edge] websocket_max_seconds` (the Open Responses "
    "specification's 60 minutes): open a new one and continue with `previous_response_id`",
)  # fmt: skip
DRAINING = _c("draining", 503, API, "the server is shutting down; try another instance")
JWKS_UNAVAILABLE = _c(
    "jwks_unavailable", 503, API,
    "the edge holds no JWT signing keys yet: `[auth.jwt] jwks_url` could not be fetched; "
    "`Retry-After` says when to try again",
)  # fmt: skip
POOL_EXHAUSTED = _c(
    "pool_exhausted", 503, API,
    "no pooled connection to the backend came free within `pool_timeout` (not a backend "
    "failure: it is not cooled down); `Retry-After` says when to try again",
)  # fmt: skip
SERVER_BUSY = _c(
    "server_busy", 503, API,
    "the worker is at its `max_in_flight` requests or `max_buffered_bytes`; `Retry-After` "
    "says when to try again",
)  # fmt: skip
BACKEND_TIMEOUT = _c(
    "backend_timeout", 504, API, "a backend was reached but sent nothing within its read timeout"
)
# The proxy, as the edge sees it.
PROXY_UNAVAILABLE = _c("proxy_unavailable", 502, API, "the edge cannot reach the proxy")
PROXY_AUTH_FAILED = _c(
    "proxy_auth_failed", 502, API,
    "the proxy refused the edge's own credential (`[edge] proxy_token`): the gateway's "
    "configuration, never the caller's key",
)  # fmt: skip
# Codes a retry cannot fix (the gateway's own configuration): answered with
# `x-should-retry: false`, which the OpenAI and Anthropic SDKs obey.
NOT_RETRYABLE = frozenset({BACKEND_AUTH_FAILED.code, PROXY_AUTH_FAILED.code})
PROXY_PROTOCOL_ERROR = _c(
    "proxy_protocol_error", 502, API,
    "the proxy's answer does not decode, or its stream ended before the completion",
)  # fmt: skip
PROXY_TIMEOUT = _c("proxy_timeout", 504, API, "the proxy sent nothing within the read timeout")
INTERNAL_ERROR = _c("internal_error", 500, API, "a bug in flatgate (logged with its traceback)")

CODES: tuple[ErrorCode, ...] = tuple(v for v in list(globals().values()) if type(v) is ErrorCode)
_BY_CODE = {c.code: c for c in CODES}


def by_code(code: str) -> ErrorCode | None:
    """The registered code, or ``None`` for one this flatgate does not know
    (a newer peer's)."""
    return _BY_CODE.get(code)


def peer_code(code: str, status: int) -> ErrorCode:
    """The registered ``code``, or, for one a newer peer sent that this flatgate
    does not know, an unregistered one answered with ``status``."""
    return _BY_CODE.get(code) or ErrorCode(code, status, API, "")


def error_body(code: ErrorCode | str, message: str) -> bytes:
    """The JSON error body the proxy (and the stub) answer before the first byte:
    ``{"error": {"code", "message"}}``."""
    return json.dumps({"error": {"code": str(code), "message": message}}).encode()
