"""Hostile callers, third round, against a real ``flatgate gateway`` (one
worker, the memory store) in front of real stubs: the surface of stored
responses, Responses tools and embeddings.

- one tenant flooding the store (large inputs, many tiny ones, long chains)
  evicts only its own stored responses, and ``/metrics`` counts them;
- a refused request (another model than its key's, a spent limit, a body
  that does not validate) stores nothing;
- a namespace's description written once per function is charged to the
  request: past ``max_body_bytes``, a 413 naming ``tools``;
- a chained ``previous_response_id`` is charged to the caller's share as if
  it had been sent: concurrent chains past the share are 429 ``caller_busy``;
- an embeddings answer of 1,020 x 8,192 floats is streamed to clients that
  do not read, and the worker's memory stays bounded;
- the inputs that were 500s are 4xx naming what is wrong.

Memory is asserted as a bound on the growth of the gateway's resident set
(its process tree), generous and explained where it is asserted.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.servers import Server, running, tree_rss
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration

MIB = 1 << 20
KEYS = {
    "team-a": "sk-team-a",
    "team-b": "sk-team-b",
    "team-c": "sk-team-c",
    "narrow": "sk-narrow",
    "limited": "sk-limited",
}
STATE = {
    "max_stored_response_bytes": MIB,
    "max_responses_per_tenant": 6,
    "max_response_bytes_per_tenant": 3 * MIB,
    "memory_max_responses": 12,
    "memory_max_response_bytes_total": 8 * MIB,
}
REASONING = {"type": "reasoning", "summary": []}
EDGE = {
    **QUIET,
    "max_body_bytes": 4 * MIB,
    "max_buffered_bytes_per_caller": 6 * MIB,
}


@dataclass
class Stack:
    gateway: Server

    def client(self, tenant: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.gateway.url,
            headers={"authorization": f"Bearer {KEYS[tenant]}"},
            timeout=60,
        )

    def metric(self, name: str) -> float:
        text = httpx.get(f"{self.gateway.url}/metrics", timeout=10).text
        m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        assert m is not None, name
        return float(m.group(1))

    def rss(self) -> int:
        return tree_rss(self.gateway.proc.pid)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("third")
    with (
        running("stub", [], d) as fast,
        running("stub", ["--ttft-ms", "1500"], d) as slow,
    ):
        config = write_stack(
            d / "gateway.toml",
            proxy={**QUIET, "cooldown_seconds": 0},
            backends={"fast": fast.url, "slow": slow.url},
            routes={"echo": "fast", "echo-2": "fast", "slow": "slow"},
            edge=EDGE,
            models={"echo": "SelfHosted", "echo-2": "SelfHosted", "slow": "SelfHosted"},
            keys={
                **{KEYS[t]: t for t in ("team-a", "team-b", "team-c", "limited")},
                KEYS["narrow"]: {"tenant": "narrow", "models": ["echo"]},
            },
            limits=[{"tenant": "limited", "model": "*", "requests_per_minute": 1}],
            state=STATE,
        )
        with running("gateway", ["--config", config, "--workers", "1"], d) as gateway:
            yield Stack(gateway)


def respond(c: httpx.Client, **body: Any) -> httpx.Response:
    body.setdefault("model", "echo")
    body.setdefault("max_output_tokens", 1)
    return c.post("/v1/responses", json=body)


def stored_id(c: httpx.Client, **body: Any) -> str:
    r = respond(c, **body)
    assert r.status_code == 200, r.text
    rid: str = r.json()["id"]
    return rid


# -- stored responses: one tenant never evicts another's -----------------------


def test_a_flooding_tenant_evicts_only_its_own(stack: Stack) -> None:
    with stack.client("team-b") as b, stack.client("team-a") as a, stack.client("team-c") as c:
        kept = stored_id(b, input="keep me")
        chained = stored_id(b, input="and me", previous_response_id=kept)
        evicted = stack.metric("flatgate_edge_responses_evicted_total")
        big = "x" * (400 * 1024)
        first = stored_id(a, input=big)
        for _ in range(10):  # 4 MB: past team-a's 3 MiB share
            stored_id(a, input=big)
        head = stored_id(a, input="tiny")
        for _ in range(12):  # chained on one another: each stores the chain's input again
            head = stored_id(a, input="t", previous_response_id=head)
        for _ in range(40):  # tiny ones, past team-a's count and, with team-c's, the whole's
            stored_id(a, input="t")
            stored_id(c, input="t")
        # team-b's responses and its chain are all there.
        assert b.get(f"/v1/responses/{kept}").status_code == 200
        assert b.get(f"/v1/responses/{chained}").status_code == 200
        items = b.get(f"/v1/responses/{chained}/input_items").json()["data"]
        assert [i["content"][0]["text"] for i in items if i["type"] == "message"][-1] == "keep me"
        assert respond(b, input="more", previous_response_id=chained).status_code == 200
        # team-a lost its own oldest, and the metric says so.
        assert a.get(f"/v1/responses/{first}").status_code == 404
        assert stack.metric("flatgate_edge_responses_evicted_total") > evicted
        # The store holds no more than its bounds.
        assert (
            stack.metric("flatgate_edge_responses_store_bytes")
            <= STATE["memory_max_response_bytes_total"]
        )


def test_a_chain_shares_what_it_continues(stack: Stack) -> None:
    """A chained response's stored input holds the chain's runs by reference:
    forty turns over a 300 KB input store about 300 KB, not forty copies."""
    with stack.client("team-c") as c:
        before = stack.metric("flatgate_edge_responses_store_bytes")
        head = stored_id(c, input="y" * (300 * 1024))
        for _ in range(5):  # within team-c's count of 6
            head = stored_id(c, input="next", previous_response_id=head)
        grown = stack.metric("flatgate_edge_responses_store_bytes") - before
        assert grown < 700 * 1024, grown  # 6 copies would be 1.8 MB
        listed = c.get(f"/v1/responses/{head}/input_items", params={"limit": 100}).json()
        texts = [i["content"][0]["text"] for i in listed["data"] if i["type"] == "message"]
        assert texts[0] == "next" and texts[-1] == "y" * (300 * 1024)  # newest first


def test_a_refused_request_stores_nothing(stack: Stack) -> None:
    with stack.client("narrow") as n, stack.client("limited") as lim:
        assert respond(lim, input="first").status_code == 200  # its one request a minute
        held = stack.metric("flatgate_edge_responses_store_bytes")
        big = "z" * (500 * 1024)
        for _ in range(4):
            r = respond(n, model="echo-2", input=big)  # not among its key's models
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
            r = respond(lim, input=big)
            assert r.status_code == 429, r.text
            r = respond(
                n, input=[{"type": "reasoning", "summary": [], "encrypted_content": "fg1.128.QUFB"}]
            )
            assert r.status_code == 400 and r.json()["error"]["param"] == "input"
        assert stack.metric("flatgate_edge_responses_store_bytes") == held


# -- every byte a request makes the gateway hold is charged to it --------------


def test_a_namespace_description_copied_per_function_is_charged(stack: Stack) -> None:
    tools = [
        {
            "type": "namespace",
            "name": "ns",
            "description": "d" * MIB,
            "tools": [{"type": "function", "name": f"f{i}"} for i in range(300)],
        }
    ]
    before = stack.rss()
    with stack.client("team-a") as a:
        r = respond(a, input="hi", tools=tools)
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("tools", "body_too_large")
    # Before: the request wrote 300 MB. A 1 MB body is read and decoded.
    assert stack.rss() - before < 100 * MIB


def test_a_chain_is_charged_to_the_callers_share(stack: Stack) -> None:
    with stack.client("team-b") as b:
        head = stored_id(b, model="slow", input="w" * (450 * 1024))  # and its echo
    results: list[httpx.Response] = []

    def chain() -> None:
        # Not stored: a stored answer counts against team-b's six, and the seventh
        # would evict the head while a late thread still continues it (a 404).
        with stack.client("team-b") as c:
            r = respond(c, model="slow", input="go", previous_response_id=head, store=False)
            results.append(r)

    before = stack.rss()
    threads = [threading.Thread(target=chain) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(r.status_code for r in results)
    assert 404 not in statuses, results[0].text
    busy = [r for r in results if r.status_code == 429]
    # Each chain holds about 0.9 MB (input and echo) of the caller's 6 MiB share while the slow
    # backend has not answered: a few at once, the rest told to retry.
    assert busy and set(statuses) == {200, 429}, statuses
    for r in busy:
        assert r.json()["error"]["code"] == "caller_busy"
        assert r.json()["error"]["param"] == "previous_response_id"
        assert float(r.headers["retry-after"]) > 0
    # Before: 100 such requests took 380 MB. The charged ones hold what the
    # share allows, decoded (a few times the bytes), and no more.
    assert stack.rss() - before < 200 * MIB


# -- embeddings: an answer is streamed, never built whole ------------------------


def _unread_embeddings(url: str, body: bytes) -> socket.socket:
    """A client that sends its request and does not read the answer."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    head = (
        f"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {KEYS['team-a']}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def test_a_huge_float_answer_is_streamed_to_clients_that_do_not_read(stack: Stack) -> None:
    body = json.dumps({"model": "echo", "input": ["a"] * 1020, "dimensions": 8192}).encode()
    before = stack.rss()
    peak = before
    socks = [_unread_embeddings(stack.gateway.url, body) for _ in range(8)]
    try:
        # A ninth client reads a smaller answer whole, streamed in pieces:
        # the same vectors as base64 asks for.
        with stack.client("team-a") as a:
            small = {"model": "echo", "input": ["a", "b"] * 32, "dimensions": 8192}
            floats = a.post("/v1/embeddings", json=small)
            packed = a.post("/v1/embeddings", json={**small, "encoding_format": "base64"})
        assert floats.status_code == packed.status_code == 200
        assert "content-length" not in floats.headers  # streamed
        got = [d["embedding"] for d in floats.json()["data"]]
        want = [
            list(struct.unpack(f"<{8192}f", base64.b64decode(d["embedding"])))
            for d in packed.json()["data"]
        ]
        assert got == want and len(got) == 64
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            peak = max(peak, stack.rss())
            time.sleep(0.25)
    finally:
        for s in socks:
            s.close()
    # Before: +1.6 GB for 8 such clients (each answer built whole as 161 MB of
    # JSON and as many Python floats). Now each holds its 33 MB FlatBuffer
    # answer (max_response_bytes bounds it) and the pieces of text granian
    # has not sent yet: about 48 MB a client here, under 64 MiB.
    assert peak - before < 8 * 64 * MIB, (peak - before) / MIB


# -- no 500 from input --------------------------------------------------------------


def test_the_inputs_that_were_500s_are_4xx(stack: Stack) -> None:
    with stack.client("team-a") as a:
        rid = stored_id(a, input="mine")
        for limit in ("%C2%B2", "9" * 4301, "-1", "+5"):
            r = a.get(f"/v1/responses/{rid}/input_items?limit={limit}")
            assert r.status_code == 400 and r.json()["error"]["param"] == "limit", r.text
        r = a.get(f"/v1/models?limit={'9' * 5000}", headers={"anthropic-version": "2023-06-01"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        for depth in (900, 960, 966, 980):
            nested = "[" * depth + "]" * depth
            body = (
                '{"model":"echo","input":"hi","tools":[{"type":"web_search","zz":' + nested + "}]}"
            )
            r = a.post("/v1/responses", content=body, headers={"content-type": "application/json"})
            assert r.status_code in (200, 400), (depth, r.status_code, r.text[:200])
        r = respond(
            a,
            input=[
                {"type": "reasoning", "summary": [], "encrypted_content": "fg1.128.QUFB"},
                {"role": "user", "content": "hi"},
            ],
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "input", r.text
        assert "dialect" in r.json()["error"]["message"]
    assert "unexpected error" not in stack.gateway.log_tail(200_000)
