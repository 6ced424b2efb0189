"""Shared offsets (issue 18): what a buffer expands to is bounded.

``verify_request`` counts the bytes of strings and vector elements with their
multiplicity against ``max_bytes``; the proxy passes its ``max_body_bytes``
on the adapters' decode path; the token estimate, which the proxy runs before
anything verifies, stays bounded and never raises. In process; the real
servers are in ``test_amplification_http``.
"""

from __future__ import annotations

import json
import random
import struct
from typing import Any

import pytest

from benchmarks.inmemory import FakeExchange, drive
from benchmarks.payloads import make_request, to_flatbuffer
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.layout import COMPLETION_REQUEST
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.estimate import estimate_request, estimate_tokens, reservation
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import MAX_BYTES, MAX_OBJECTS, verify_request
from tests.proxy.shared_offsets import (
    amplified,
    expanded_bytes,
    shared_calls,
    shared_stop,
    shared_strings,
)
from tests.proxy.test_proxy_limits import CountingTransport
from tests.proxy.wire_helpers import build, sample_request

HOSTILE = amplified()  # 2,000 references to one 256 KiB message
HOSTILE_EXPANDS = expanded_bytes(2000, 256 << 10)


# -- the verifier --------------------------------------------------------------


def test_the_hostile_buffer_is_refused_naming_the_check() -> None:
    assert len(HOSTILE) < 300_000  # a 270 KB body...
    with pytest.raises(
        MalformedBuffer,
        match=rf"^CompletionRequest\.messages\[\d+\]: expands to more than {MAX_BYTES} bytes "
        r"of strings and vectors \(max_bytes\) at offset \d+$",
    ):
        verify_request(HOSTILE)
    # ...that passes every other check: the expansion is what refuses it.
    verify_request(HOSTILE, max_bytes=HOSTILE_EXPANDS)


@pytest.mark.parametrize(("refs", "content"), [(1, 0), (2, 1), (50, 1000), (700, 4096)])
def test_the_bound_counts_every_reference(refs: int, content: int) -> None:
    buf = amplified(refs, content)
    need = expanded_bytes(refs, content)
    verify_request(buf, max_bytes=need)
    with pytest.raises(MalformedBuffer, match=r"\(max_bytes\)"):
        verify_request(buf, max_bytes=need - 1)


def test_a_shared_stop_string_counts_once_per_reference() -> None:
    buf = shared_stop(1000, b"y" * 40_000)  # 44 KB that reads as 40 MB
    assert len(buf) < 50_000
    with pytest.raises(MalformedBuffer, match=r"^CompletionRequest: expands to more than"):
        verify_request(buf)
    verify_request(buf, max_bytes=1000 * (40_000 + 4) + 4 + len("hello") + len("echo-1"))


def test_an_honest_buffer_sharing_small_strings_passes_just_under_the_limit() -> None:
    """flatc's ``CreateSharedString``: 1,000 messages, one 1 KiB string."""
    buf = shared_strings(1000, b"z" * 1024)
    need = expanded_bytes(1000, 1024)
    assert len(buf) < need // 10  # shared on the wire, not in what it reads as
    verify_request(buf, max_bytes=need)
    verify_request(buf, max_bytes=need + 1)
    with pytest.raises(MalformedBuffer, match=r"\(max_bytes\)"):
        verify_request(buf, max_bytes=need - 1)
    req = read_request(buf)
    assert [m.content for m in req.messages] == ["z" * 1024] * 1000


@pytest.mark.parametrize("size", [1 << 10, 16 << 10, 128 << 10, 1 << 20])
def test_a_buffer_that_shares_nothing_expands_to_less_than_its_size(size: int) -> None:
    """So a service's ``max_body_bytes`` never refuses an honest body."""
    buf = to_flatbuffer(make_request(size, seed=size))
    verify_request(buf, max_bytes=len(buf))


def test_every_table_and_vector_of_the_schema_shares_nothing_within_its_size() -> None:
    buf = build(sample_request())
    verify_request(buf, max_bytes=len(buf))


# -- the proxy's decode path (the openai adapter) ------------------------------


def openai_proxy(max_body: int, **extra: Any) -> tuple[ProxyServer, CountingTransport]:
    cfg = {
        "proxy": {"access_log": False, "max_body_bytes": max_body},
        "backends": [{"name": "oai", "url": "http://127.0.0.1:9/v1", "protocol": "openai"}],
        "routes": [{"model": "*", "backends": ["oai"]}],
        **extra,
    }
    server = ProxyServer(parse_config(cfg, environ={}), worker="t")
    transport = CountingTransport()
    server._transport = transport
    return server, transport


def call(server: ProxyServer, body: bytes, **headers: str) -> FakeExchange:
    ex = FakeExchange(body)
    ex._headers.update(headers)
    drive(server.completions(ex))
    return ex


def test_the_proxy_refuses_it_before_a_json_backend_sees_it() -> None:
    server, transport = openai_proxy(8 << 20)
    ex = call(server, HOSTILE)
    assert ex.status == 400
    error = json.loads(ex.body_out)["error"]
    assert error["code"] == "malformed_request"
    assert "(max_bytes)" in error["message"]
    assert transport.calls == 0
    backend = server.backends["oai"]
    assert (backend.cooldown_until, backend.outstanding) == (0.0, 0)


def test_the_proxys_limit_is_its_max_body_bytes() -> None:
    body = shared_strings(1000, b"z" * 1024)
    need = expanded_bytes(1000, 1024)
    server, transport = openai_proxy(need)
    call(server, body)
    assert transport.calls == 1  # verified, decoded and sent
    server, transport = openai_proxy(need - 1)
    ex = call(server, body)
    assert (ex.status, transport.calls) == (400, 0)
    assert f"expands to more than {need - 1} bytes" in json.loads(ex.body_out)["error"]["message"]


# -- the estimate, which the proxy runs on buffers nothing has verified --------


def test_the_estimate_of_the_hostile_buffer_is_bounded() -> None:
    assert estimate_request(HOSTILE) == estimate_tokens(MAX_BYTES, 2000)
    assert estimate_request(HOSTILE, max_bytes=1 << 20) == estimate_tokens(1 << 20, 2000)
    assert reservation(HOSTILE, 100) == estimate_tokens(MAX_BYTES, 2000) + 100


def test_an_honest_estimate_is_unchanged_by_sharing() -> None:
    assert estimate_request(shared_strings(1000, b"z" * 1024)) == estimate_tokens(1024 * 1000, 1000)


def test_a_shared_tool_calls_vector_is_read_a_bounded_number_of_times() -> None:
    """100,000 messages that are one message with 100,000 tool calls: 10^10
    tool calls if every reference were followed. The estimate reads at most
    ``MAX_OBJECTS`` tables (here, all messages); the verifier refuses it."""
    buf = shared_calls(100_000, 100_000)
    assert estimate_request(buf) == estimate_tokens(0, MAX_OBJECTS)
    with pytest.raises(MalformedBuffer, match=r"\(max_objects\)"):
        verify_request(buf)


def _truncated_messages(buf: bytes, length: int) -> bytes:
    """``buf`` with its messages vector claiming ``length`` elements."""
    root = struct.unpack_from("<I", buf, 0)[0]
    vt = root - struct.unpack_from("<i", buf, root)[0]
    at = root + struct.unpack_from("<H", buf, vt + COMPLETION_REQUEST.voffset("messages"))[0]
    vec = at + struct.unpack_from("<I", buf, at)[0]
    out = bytearray(buf)
    struct.pack_into("<I", out, vec, length)
    return bytes(out)


def test_the_estimate_never_raises_on_a_buffer_the_route_read_accepts() -> None:
    seed = 18
    rng = random.Random(seed)
    bases = [shared_strings(3, b"hello world", tenant="acme"), build(sample_request())]
    tried = 0
    for _ in range(3000):
        buf = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        body = bytes(buf)
        try:
            read_route(body)
        except MalformedBuffer:
            continue
        tried += 1
        tokens = estimate_request(body)
        assert 0 <= tokens <= estimate_tokens(MAX_BYTES, MAX_OBJECTS), f"seed {seed}"
        reservation(body, 100)
    assert tried > 1000, f"seed {seed}"
    assert estimate_request(_truncated_messages(bases[0], 1_000_000)) >= 0


def test_a_tenant_limited_proxy_answers_a_truncated_vector_with_400() -> None:
    """Tenants' limits estimate the request before the dispatcher verifies it."""
    limits = {"limits": [{"tenant": "acme", "requests_per_minute": 100, "tokens_per_day": 10**9}]}
    server, transport = openai_proxy(8 << 20, **limits)
    body = _truncated_messages(shared_strings(3, b"hello world", tenant="acme"), 1_000_000)
    ex = call(server, body)
    assert ex.status == 400
    assert json.loads(ex.body_out)["error"]["code"] == "malformed_request"
    assert transport.calls == 0
