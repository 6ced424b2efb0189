"""How each failure reaches a client of the official openai SDK, end to end.

A real stack (stub -> proxy -> edge, each a ``flatgate`` subprocess on a
loopback port) spoken to with ``openai.OpenAI(max_retries=2)``, the SDK's
default. For each failure: the exception the SDK raises, its status, the
``code`` and ``type`` of its body, ``Retry-After`` where one is due, and how
many HTTP attempts the SDK made (an httpx2 event hook on the SDK's own
``http_client`` counts them); where it matters, how many attempts reached the
backend (the stub's ``GET /stats`` ``started``, which counts requests that got
past the stub's before-head faults).

The SDK retries 408, 409, 429 and 5xx (honouring ``Retry-After`` up to 60 s,
else backing off from 0.5 s), so a retried failure costs about two seconds
here; nothing asserts on time.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest

from flatgate.edge_translator.keys import hash_key
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES
from tests.edge.hardening_stack import wait_for
from tests.servers import Server, closed_port, free_port, spawn
from tests.stacks import QUIET, loopback, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

# The SDK's default; written out because what is counted depends on it.
MAX_RETRIES = 2
SDK_ATTEMPTS = MAX_RETRIES + 1
KEY = "sk-sdk-errors-acme"  # an edge API key, of tenant "acme"
PROXY_TOKEN = "proxy-token-s3cret-0123456789"  # the proxy's caller token
FIRST_BYTE = 0.5  # seconds the impatient backends wait for a first byte
MAX_BODY = 65536  # the edge's max_body_bytes

MODELS = (
    "flatgate-echo",
    "flatgate-busy",
    "flatgate-closed",
    "flatgate-impatient",
    "flatgate-trio",
)


class Stack:
    """The stub, the proxy and the edges one test module shares."""

    def __init__(self, stub: Server, proxy: Server, edge: Server, orphan: Server) -> None:
        self.stub, self.proxy, self.edge = stub, proxy, edge
        # An edge whose proxy_url is a closed port.
        self.orphan = orphan

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(f"{self.stub.url}/stats").json()
        return stats

    def started(self) -> int:
        started: int = self.stats()["started"]
        return started


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("sdk-errors")
    stub, proxy, edge, orphan = (free_port() for _ in range(4))
    ports = contextlib.ExitStack()
    closed, dead_proxy = (ports.enter_context(closed_port()) for _ in range(2))
    at = loopback(stub)
    impatient = {"url": at, "first_byte_timeout": FIRST_BYTE}
    config = write_stack(
        d / "flatgate.toml",
        proxy={"port": proxy, "cooldown_seconds": 0, "max_attempts": 2, **QUIET},
        stub={"port": stub},
        backends={
            "stub": at,
            "busy": {"url": at, "max_outstanding": 1},
            "forwarding": {"url": at, "forward_credentials": True},
            "closed": {"url": loopback(closed), "connect_timeout": 1.0},
            "impatient": impatient,
            "trio-a": impatient,
            "trio-b": impatient,
            "trio-c": impatient,
        },
        routes={
            "flatgate-echo": {"provider": "SelfHosted", "backends": ["stub"]},
            "flatgate-forward": "forwarding",
            "flatgate-busy": "busy",
            "flatgate-closed": "closed",
            "flatgate-impatient": "impatient",
            "flatgate-trio": ["trio-a", "trio-b", "trio-c"],
        },
        edge={"port": edge, "proxy_url": loopback(proxy), "max_body_bytes": MAX_BODY, **QUIET},
        models=dict.fromkeys(MODELS, "SelfHosted"),
    )
    args = ["--config", config]
    servers = [
        spawn("stub", args, d, port=stub),
        spawn("proxy", args, d, port=proxy),
        spawn("edge", args, d, port=edge),
        spawn("edge", [*args, "--proxy-url", loopback(dead_proxy)], d, port=orphan),
    ]
    start_all(servers)
    try:
        yield Stack(*servers)
    finally:
        stop_all(servers)
        ports.close()


class AuthStack:
    """A proxy that authenticates its callers (``auth_token_sha256``), in front
    of the shared stub through a ``forward_credentials`` backend, and two keyed
    edges: one presenting the proxy's token, one without it."""

    def __init__(self, proxy: Server, trusted: Server, untrusted: Server) -> None:
        self.proxy, self.trusted, self.untrusted = proxy, trusted, untrusted


@pytest.fixture(scope="module")
def auth_stack(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    d = tmp_path_factory.mktemp("sdk-errors-auth")
    proxy, trusted, untrusted = (free_port() for _ in range(3))
    config = write_stack(
        d / "flatgate.toml",
        proxy={
            "port": proxy,
            "cooldown_seconds": 0,
            **QUIET,
            "auth_token_sha256": hash_key(PROXY_TOKEN),
        },
        stub={"port": stack.stub.port},
        backends={"forwarding": {"url": stack.stub.url, "forward_credentials": True}},
        routes={"flatgate-echo": {"provider": "SelfHosted", "backends": ["forwarding"]}},
        edge={"port": trusted, "proxy_url": loopback(proxy), **QUIET},
        models={"flatgate-echo": "SelfHosted"},
        keys={KEY: "acme"},
    )
    args = ["--config", config]
    servers = [
        spawn("proxy", args, d, port=proxy),
        spawn("edge", args, d, env={"FLATGATE_EDGE_PROXY_TOKEN": PROXY_TOKEN}, port=trusted),
        spawn("edge", args, d, port=untrusted),
    ]
    start_all(servers)
    try:
        yield AuthStack(*servers)
    finally:
        stop_all(servers)


class Client:
    """An SDK client with the default retries that counts the HTTP requests it
    sends (every attempt, retries included), through an event hook on its own
    ``http_client``. ``on_attempt`` runs before each one is sent."""

    def __init__(
        self, server: Server, api_key: str, on_attempt: Callable[[], None] | None = None
    ) -> None:
        self.attempts = 0
        self._on_attempt = on_attempt
        self._http = httpx2.Client(event_hooks={"request": [self._sent]})
        self.sdk = openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key=api_key,
            max_retries=MAX_RETRIES,
            timeout=30.0,
            http_client=self._http,
        )

    def _sent(self, request: httpx2.Request) -> None:
        self.attempts += 1
        if self._on_attempt is not None:
            self._on_attempt()

    def create(self, model: str, text: str = "hello there", **kw: Any) -> Any:
        return self.sdk.chat.completions.create(
            model=model, messages=[{"role": "user", "content": text}], **kw
        )

    def close(self) -> None:
        self.sdk.close()
        self._http.close()


ClientFactory = Callable[..., Client]


@pytest.fixture
def client() -> Iterator[ClientFactory]:
    made: list[Client] = []

    def make(
        server: Server, api_key: str = "unused", on_attempt: Callable[[], None] | None = None
    ) -> Client:
        c = Client(server, api_key, on_attempt)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def fault(name: str, after: int | None = None) -> dict[str, Any]:
    """The stub fault a request asks for (fbs metadata, passed on by the edge)."""
    metadata = {"stub.fault": name}
    if after is not None:
        metadata["stub.fault_after"] = str(after)
    return {"metadata": metadata}


def check(err: openai.APIStatusError, status: int, code: str, type_: str = "api_error") -> None:
    assert err.status_code == status
    assert err.code == code, err.body
    assert err.type == type_, err.body
    body = err.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}


# 1. A backend's 400 is the caller's: passed through, not retried.
def test_backend_400_is_bad_request_once(stack: Stack, client: ClientFactory) -> None:
    c = client(stack.edge)
    with pytest.raises(openai.BadRequestError) as info:
        c.create("flatgate-echo", **fault("reject"))
    err = info.value
    assert err.status_code == 400
    assert err.type == "invalid_request_error"
    # The proxy's own code, or (an fbs backend's JSON error body is passed
    # through as it is) the backend's: today the stub's ``invalid_request``.
    assert err.code in ("backend_rejected", "invalid_request"), err.body
    assert "too long" in err.message
    assert c.attempts == 1


# 2. A backend's 429: the SDK sees a 429 with Retry-After and retries it.
def test_backend_429_is_rate_limit_with_retry_after(stack: Stack, client: ClientFactory) -> None:
    c = client(stack.edge)
    with pytest.raises(openai.RateLimitError) as info:
        c.create("flatgate-echo", **fault("rate_limit"))
    check(info.value, 429, "backend_rate_limited", "rate_limit_error")
    assert info.value.response.headers["retry-after"] == "1"
    assert c.attempts == SDK_ATTEMPTS


# 3. A backend refusing flatgate's own credential: the gateway's fault, a 502.
def test_backend_auth_failure_is_502(stack: Stack, client: ClientFactory) -> None:
    c = client(stack.edge)
    with pytest.raises(openai.InternalServerError) as info:
        c.create("flatgate-echo", **fault("auth"))
    check(info.value, 502, "backend_auth_failed")
    # A retry cannot fix the gateway's own credential: the SDK is told not to.
    assert info.value.response.headers["x-should-retry"] == "false"
    assert c.attempts == 1


# 4. Every backend at its max_outstanding: 503 backends_busy with Retry-After.
def test_backends_at_max_outstanding_are_busy(stack: Stack, client: ClientFactory) -> None:
    holder = client(stack.edge)
    held = holder.create("flatgate-busy", "one two three", stream=True, **fault("hang", 1))
    try:
        first = next(iter(held))
        assert first.choices[0].delta.content == "one "
        before = stack.started()
        c = client(stack.edge)
        with pytest.raises(openai.InternalServerError) as info:
            c.create("flatgate-busy")
        check(info.value, 503, "backends_busy")
        assert info.value.response.headers["retry-after"] == "1"
        assert c.attempts == SDK_ATTEMPTS
        assert stack.started() == before  # refused by the proxy, never sent on
    finally:
        held.close()
    # The held stream's slot comes free once its caller has gone.
    after = client(stack.edge)

    def served() -> bool:
        try:
            done = after.sdk.with_options(max_retries=0).chat.completions.create(
                model="flatgate-busy", messages=[{"role": "user", "content": "free again"}]
            )
        except openai.InternalServerError:
            return False
        return done.choices[0].message.content == "free again"

    assert wait_for(served, 10.0)


# 5. No backend reachable.
def test_unreachable_backend_is_502(stack: Stack, client: ClientFactory) -> None:
    c = client(stack.edge)
    with pytest.raises(openai.InternalServerError) as info:
        c.create("flatgate-closed")
    check(info.value, 502, "backend_unavailable")
    assert c.attempts == SDK_ATTEMPTS


# 6. A backend reached that sends nothing within its first-byte timeout.
def test_backend_timeout_is_504(stack: Stack, client: ClientFactory) -> None:
    before = stack.started()
    c = client(stack.edge)
    with pytest.raises(openai.InternalServerError) as info:
        c.create("flatgate-impatient", **fault("stall"))
    check(info.value, 504, "backend_timeout")
    assert not isinstance(info.value, openai.APITimeoutError)
    assert c.attempts == SDK_ATTEMPTS
    assert wait_for(lambda: stack.started() - before == SDK_ATTEMPTS, 10.0)


# 7. The edge cannot reach its proxy.
def test_unreachable_proxy_is_502(stack: Stack, client: ClientFactory) -> None:
    c = client(stack.orphan)
    with pytest.raises(openai.InternalServerError) as info:
        c.create("flatgate-echo")
    check(info.value, 502, "proxy_unavailable")
    assert c.attempts == SDK_ATTEMPTS


# 8. A model the edge does not serve.
def test_unknown_model_is_not_found_once(stack: Stack, client: ClientFactory) -> None:
    before = stack.started()
    c = client(stack.edge)
    with pytest.raises(openai.NotFoundError) as info:
        c.create("gpt-9")
    check(info.value, 404, "model_not_found", "invalid_request_error")
    assert info.value.param == "model"
    assert c.attempts == 1
    assert stack.started() == before


# 9. A body over the edge's max_body_bytes.
def test_body_over_the_limit_is_413_once(stack: Stack, client: ClientFactory) -> None:
    c = client(stack.edge)
    with pytest.raises(openai.APIStatusError) as info:
        c.create("flatgate-echo", "x" * (MAX_BODY + 1))
    assert type(info.value) is openai.APIStatusError  # no SDK subclass for 413
    check(info.value, 413, "body_too_large", "invalid_request_error")
    assert c.attempts == 1


# 10. A failure after the stream began: an error event, which the SDK raises.
@pytest.mark.parametrize(
    ("name", "code"), [("error", "backend_stream_error"), ("die", "backend_disconnected")]
)
def test_mid_stream_failure_raises_while_iterating(
    stack: Stack, client: ClientFactory, name: str, code: str
) -> None:
    c = client(stack.edge)
    stream = c.create("flatgate-echo", "one two three four", stream=True, **fault(name, 2))
    got: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == "one two "
    assert not isinstance(info.value, openai.APIStatusError)
    assert info.value.code == code and info.value.type == "api_error"
    assert c.attempts == 1  # the SDK never retries a stream that began


# 11. max_attempts bounds the backends tried per request, failover included.
def test_max_attempts_bounds_backends_per_request(stack: Stack, client: ClientFactory) -> None:
    marks: list[int] = []
    c = client(stack.edge, on_attempt=lambda: marks.append(stack.started()))
    with pytest.raises(openai.InternalServerError) as info:
        c.create("flatgate-trio", **fault("stall"))
    check(info.value, 504, "backend_timeout")
    assert c.attempts == SDK_ATTEMPTS
    total = SDK_ATTEMPTS * 2  # max_attempts = 2, of the route's 3 backends
    assert wait_for(lambda: stack.started() - marks[0] == total, 10.0), (marks, stack.started())
    marks.append(stack.started())
    per_request = [b - a for a, b in itertools.pairwise(marks)]
    assert per_request == [2] * SDK_ATTEMPTS


# 12. The proxy's caller authentication (auth_token_sha256).
def _proxy_request(tenant: str | None) -> bytes:
    return build_request(
        "flatgate-echo",
        [("user", "direct call")],
        provider="SelfHosted",
        stream=False,
        tenant=tenant or "",
    )


def _post(proxy: Server, body: bytes, token: str | None) -> httpx.Response:
    headers = {"content-type": FLATBUFFERS, "accept": FRAMES}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return httpx.post(f"{proxy.url}/v1/completions", content=body, headers=headers)


def _upstream_authorization(stack: Stack) -> str | None:
    """The ``Authorization`` of the last request the stub saw, as it reports it
    (a ``sha256:<hex>`` digest); the proxy's token is never in its stats in clear."""
    stats = stack.stats()
    assert PROXY_TOKEN not in json.dumps(stats)
    seen: str | None = stats["last_headers"]["authorization"]
    return seen


def test_edge_with_the_proxy_token_is_served(
    stack: Stack, auth_stack: AuthStack, client: ClientFactory
) -> None:
    c = client(auth_stack.trusted, KEY)
    done = c.create("flatgate-echo", "tenant acme here")
    assert done.choices[0].message.content == "tenant acme here"
    assert c.attempts == 1
    # forward_credentials: yet the proxy's own token stays behind
    assert _upstream_authorization(stack) is None


def test_edge_without_the_proxy_token_is_a_gateway_failure(
    stack: Stack, auth_stack: AuthStack, client: ClientFactory
) -> None:
    before = stack.stats()["last_body_sha256"]
    c = client(auth_stack.untrusted, KEY)
    with pytest.raises(openai.InternalServerError) as info:
        c.create("flatgate-echo")
    assert stack.stats()["last_body_sha256"] == before  # refused by the proxy
    err = info.value
    # The gateway's own configuration is wrong: not the caller's key, and no
    # retry can fix it.
    check(err, 502, "proxy_auth_failed")
    assert err.response.headers["x-should-retry"] == "false"
    assert c.attempts == 1


@pytest.mark.parametrize(
    ("tenant", "token", "answer"),
    [
        ("acme", None, (403, "tenant_forbidden")),
        ("acme", "not-the-token", (401, "unauthorized")),  # wrong: 401 on any request
        ("acme", PROXY_TOKEN, (200, None)),
        (None, None, (200, None)),
    ],
)
def test_proxy_tenant_needs_the_token(
    stack: Stack,
    auth_stack: AuthStack,
    tenant: str | None,
    token: str | None,
    answer: tuple[int, str | None],
) -> None:
    status, code = answer
    r = _post(auth_stack.proxy, _proxy_request(tenant), token)
    assert r.status_code == status, r.text
    if code is not None:
        assert r.json()["error"]["code"] == code
    else:
        assert r.headers["content-type"] == FRAMES and r.content
        assert _upstream_authorization(stack) is None


def test_proxy_metrics_need_the_token(auth_stack: AuthStack) -> None:
    url = f"{auth_stack.proxy.url}/metrics"
    r = httpx.get(url)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"].startswith("Bearer")
    wrong = httpx.get(url, headers={"authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401
    r = httpx.get(url, headers={"authorization": f"Bearer {PROXY_TOKEN}"})
    assert r.status_code == 200 and "flatgate_requests_total" in r.text


def test_a_proxy_without_a_token_forwards_credentials_as_configured(stack: Stack) -> None:
    """The control for the checks above: a proxy that does not authenticate its
    callers passes a caller's Authorization to a forward_credentials backend,
    and the stub reports it by digest."""
    body = build_request("flatgate-forward", [("user", "hi")], provider="SelfHosted", stream=False)
    r = _post(stack.proxy, body, PROXY_TOKEN)
    assert r.status_code == 200, r.text
    digest = hashlib.sha256(f"Bearer {PROXY_TOKEN}".encode()).hexdigest()
    assert _upstream_authorization(stack) == f"sha256:{digest}"
