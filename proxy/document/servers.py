"""The servers' sections: ``[proxy]``, ``[edge]`` and ``[stub]``, over the
fields they share, each key said once with its default and its comment.

Owns two bases: ``ServerSection``, what every granian server flatgate runs
has (where it listens, its workers and interface, its graceful stop), and
``ServiceSection``, what the two services a caller reaches have besides
(admission, bodies, HTTP/2 streams, the largest answer held whole, the
upstream client and pool, the access log, reloads and the GC); each section
sets its own ``port`` and adds its own keys. Their checks are the
services' (``plumbing.server_section`` for the shared fields). No I/O.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_PROTOCOL",
    "EdgeSection",
    "Fault",
    "ProxySection",
    "ServerSection",
    "ServiceSection",
    "StubSection",
    "ToolMode",
]

# The backend protocol a [[backends]] entry and the stub speak unless told
# (the first of ``backends.registry.PROTOCOLS``).
DEFAULT_PROTOCOL: Final = "fbs"

# 32 MiB, one default for every client API's shape and for the proxy: what
# Anthropic's Messages API takes (32 MB requests, images of up to 5 MB of
# base64 each, PDFs of up to 32 MB), and OpenAI's file inputs (32 MB); of
# OpenAI's images (up to 50 MB of image bytes a request, 20 MB each) it admits
# 24 MiB, the most base64 a 32 MiB body carries: a deployment that wants more
# raises it (the shares below follow). The proxy's buffer of such a request is
# about 3/4 of it (raw bytes, not base64), so one default fits both.
DEFAULT_MAX_BODY_BYTES: Final = 32 << 20

# 32 MiB: 1,024 vectors of 8,192 float32 dimensions (the verifier's largest
# embeddings answer, 2,048 x 16,384, is 128 MiB: a deployment that wants it
# raises the cap).
DEFAULT_MAX_RESPONSE_BYTES: Final = 32 << 20


class ServerSection(msgspec.Struct, frozen=True, kw_only=True):
    # The listen address and port (each section sets its own default port).
    host: str = "127.0.0.1"
    port: int
    # granian worker processes.
    workers: int = 1
    # Server interface: "asgi" has backpressure on streamed responses in
    # granian (a client that stops reading bounds what is buffered for it:
    # the send waits), "rsgi" is leaner and has none (docs/design.md, "Slow readers").
    interface: Literal["asgi", "rsgi"] = "asgi"
    # Graceful stop on SIGTERM/SIGINT: 503 `draining` at once, the listener
    # closed after drain_grace_seconds, streams still running ended (an error
    # chunk) just before drain_seconds, counted from the signal
    # (docs/operations.md, "Graceful restarts").
    drain_grace_seconds: float = 5.0
    drain_seconds: float = 30.0


class ServiceSection(ServerSection, frozen=True, kw_only=True):
    # Upstream HTTP client (the proxy's to its backends, the edge's to the
    # proxy): "fast" (asyncio + llhttp keep-alive pool, default) or "httpx"
    # (reference).
    transport: Literal["fast", "httpx"] = "fast"
    # Connections kept per upstream host, per worker: sized for thousands of
    # concurrent streams (each holds one for its whole life).
    pool_limit: int = 4096
    # Longest wait for a free pooled connection; then 503 with Retry-After (a
    # full pool is not an upstream failure: no backend is cooled down).
    pool_timeout: float = 5.0
    # One line per request on stderr (plumbing.accesslog), as logfmt "text"
    # or "json".
    access_log: bool = True
    log_format: Literal["text", "json"] = "text"
    # Each worker looks at the config file this often and applies a good
    # change to what the service reloads (the proxy: [[backends]] and
    # [[routes]]; the edge: [[keys]], [auth], [[models]], [state], [[limits]]
    # and [[tenants]]; plumbing.reload, `flatgate reload`). 0: never.
    reload_seconds: float = 1.0
    # The cyclic GC (plumbing.gctune): thresholds per generation (CPython's
    # are 700, 10, 10: a young collection every few streams at token
    # cadence), and gc.freeze() once the app is built.
    gc_thresholds: tuple[int, int, int] = (50_000, 20, 100)
    gc_freeze: bool = True
    # Largest request body accepted (413 above it).
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Largest answer held whole before it is passed on (an embeddings
    # answer: the proxy's from a backend, the edge's from the proxy); a larger
    # one is refused with a 502 (at the proxy `backend_response_too_large`),
    # not held.
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # Admission control, per worker: requests in flight and request-body bytes
    # held (from Content-Length before the body is read; a chunked body counts
    # as max_body_bytes); above either, 503 `server_busy` with Retry-After.
    # 256 MiB: eight bodies of the largest default size (what translating them
    # holds besides, their decoded bytes and their FlatBuffer, is each no more
    # than the body; docs/security.md, "Bounds").
    max_in_flight: int = 10000
    max_buffered_bytes: int = 256 << 20
    # Of those bytes, what one caller (a tenant at the edge; at the proxy, an
    # address that did not present the caller token) and what one connection
    # (HTTP/2 carries many requests on one) may hold at once: 429
    # `caller_busy` with Retry-After above either. 0: derived, a quarter of
    # max_buffered_bytes per caller and two bodies per connection (never less
    # than max_body_bytes): by default 64 MiB each, two requests of the
    # largest size at once.
    max_buffered_bytes_per_caller: int = 0
    max_buffered_bytes_per_connection: int = 0
    # A request body that sends no byte for body_idle_timeout seconds, or is
    # not complete within body_timeout of its headers, is answered 408
    # `body_timeout` (0: no limit).
    body_idle_timeout: float = 15.0
    body_timeout: float = 60.0
    # HTTP/2 streams one connection may have open at once.
    http2_max_streams: int = 100


class ProxySection(ServiceSection, frozen=True, kw_only=True, forbid_unknown_fields=True):
    port: int = 8081
    # Seconds a backend that failed before its first byte is skipped.
    cooldown_seconds: float = 5.0
    # Backends tried per request, failover and fallbacks included (0: all).
    max_attempts: int = 3
    # Longest model name routed (400 above it): bounds what the route cache keeps.
    max_model_bytes: int = 256
    # Callers must present `Authorization: Bearer <token>` to set a tenant or
    # read /metrics; this is the token's hex SHA-256 ("": no authentication).
    auth_token_sha256: str = ""
    # With a token configured: every request must present it (401 otherwise),
    # not only those that set a tenant.
    require_auth: bool = False


class EdgeSection(ServiceSection, frozen=True, kw_only=True, forbid_unknown_fields=True):
    port: int = 8080
    # Where the FlatBuffers proxy listens (its POST /v1/completions).
    proxy_url: str = "http://127.0.0.1:8081"
    connect_timeout: float = 2.0
    # Longest wait between the proxy's bytes once the answer has begun.
    read_timeout: float = 30.0
    # Longest wait for the proxy's answer to begin: a reasoning model behind it
    # may think for minutes before its first token.
    first_byte_timeout: float = 600.0
    # While a stream waits for its first token, an SSE comment goes to the
    # client this often (0: never), so that proxies in between keep the
    # connection; it commits the response to 200, so a later error is an event.
    keepalive_seconds: float = 15.0
    # Longest whole exchange with the proxy (0: none).
    total_timeout: float = 0.0
    # The token the edge presents to a proxy that authenticates its callers
    # (`Authorization: Bearer`); best set as FLATGATE_EDGE_PROXY_TOKEN.
    proxy_token: str = ""
    # Hex SHA-256 of the bearer token /metrics needs ("": /metrics is open).
    metrics_token_sha256: str = ""
    # Serve HTTPS with this PEM certificate (chain) and key (both, or neither).
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # The Responses API's WebSocket mode on /v1/responses (docs/api/openai-responses.md):
    # served at all; the largest response.create message (0: max_body_bytes);
    # response.create messages waiting behind the one in flight (one runs at
    # a time; past these, each is refused with an error event); a socket
    # with no message and no response in flight for idle seconds is closed;
    # its whole life (the specification's 60 minutes: then
    # websocket_connection_limit_reached); sockets one caller holds open at
    # once, per worker (a caller: a tenant, an address when the edge is open).
    websocket: bool = True
    websocket_max_message_bytes: int = 0
    websocket_max_queued: int = 4
    websocket_idle_seconds: float = 300.0
    websocket_max_seconds: float = 3600.0
    websocket_max_per_caller: int = 16


# Faults the stub injects on request (tests): ``[stub] fault``, a model's
# ``@fault`` suffix, or an fbs request's ``stub.fault`` metadata.
Fault = Literal[
    "fail", "stall", "die", "hang", "error", "rate_limit", "overloaded", "auth", "reject"
]

# When the stub calls a tool: ``named``, only the one ``tool_choice`` names;
# ``offered``, also the one function tool a request offers, unasked (what a
# model does when the prompt asks for what the tool does), so that suites
# written for real models run against it.
ToolMode = Literal["named", "offered"]


class StubSection(ServerSection, frozen=True, kw_only=True, forbid_unknown_fields=True):
    port: int = 8082
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    # > 0: answer every request with this many fixed deltas, built once, without
    # reading the body (a backend of fixed, minimal cost, for load benchmarks).
    canned: int = 0
    # Cadence mode (load benchmarks): every request is answered as a stream of
    # cadence_tokens fixed deltas and a final frame with the usage, from frames
    # built once, the body not read; one timer per worker paces every stream
    # (first delta after ttft_ms, then one every itl_ms). See stub.cadence.
    cadence: bool = False
    cadence_tokens: int = 128
    # A fault injected in every request (tests): one of FAULTS (see backends.dialect).
    fault: Fault | Literal[""] = ""
    # When it calls a tool (backends.dialect.ToolMode): "named", only the one
    # tool_choice names; "offered", also the one function tool a request
    # offers (tool_choice not none) when the conversation ends with the
    # user's input, with arguments its schema accepts.
    tools: ToolMode = "named"
    # The API it serves: fbs (CompletionRequest), openai (Chat Completions),
    # openai-responses (the Responses API), anthropic (Messages) or bedrock
    # (Bedrock Runtime: Converse, and InvokeModel for Claude and embeddings).
    protocol: str = DEFAULT_PROTOCOL
    # Non-empty: openai and openai-responses requests must carry
    # `Authorization: Bearer <key>` (or Azure's `api-key: <key>`), anthropic
    # requests `x-api-key: <key>`, bedrock requests the key as a Bedrock API
    # key (`Authorization: Bearer <key>`) or a SigV4 signature made with it as
    # the secret access key (any access key id) (fbs requests are not checked).
    api_key: str = ""
    # What `flatgate up` starts: one stub per protocol, on port, port + 1, ...
    # (`flatgate stub` alone serves `protocol`).
    up: tuple[str, ...] = (DEFAULT_PROTOCOL,)
