"""No input is a 500: every route's query strings and every client API's
nested fields, fuzzed against the real gateway app in process.

``onebox.create_app`` (what granian runs for ``flatgate gateway``) is driven
through httpx's ASGI transport, its one backend a closed port (a request
that passes every check is a 502, never forwarded). A seeded generator (the
seed is printed on failure) makes a fixed number of hostile values: digits
of other scripts (``"²"`` passes ``str.isdigit``), numbers past
``int``'s 4,300 digits, signs, spaces and bad percent-escapes in query
strings; wrong types, unknown keys, flatgate's own ``$`` keys, ``fg1.``
payloads and nesting close to the decoders' bound in each API's nested
fields. Every answer must be a status below 500 or a gateway's own 502/503
(the backend that is not there), and the log must hold no unexpected error.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.gateway.inprocess_app import caller, gateway_app
from tests.servers import closed_port
from tests.stacks import QUIET, write_stack

SEED = 20261202
KEY = "sk-fuzz"
MODEL = "echo"
QUERY_EXAMPLES = 400
BODY_EXAMPLES = 700
# Nesting around the decoders' bound (about the recursion limit).
DEPTHS = (400, 900, 960, 966, 975, 990, 1010, 1100)
# Every depth in this band, for the nested fields decoded a second time.
DEPTH_BAND = (800, 1000)

Json = Any


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    with closed_port() as port:
        config = write_stack(
            tmp_path / "gateway.toml",
            proxy=QUIET,
            backends={"none": f"http://127.0.0.1:{port}"},
            routes={MODEL: "none"},
            edge=QUIET,
            models={MODEL: "SelfHosted"},
            keys={KEY: "fuzz"},
        )
        headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
        async with caller(gateway_app(config), headers=headers) as c:
            yield c


# Numbers as hostile callers write them: other scripts' digits (which
# ``str.isdigit`` takes), past ``int``'s 4,300 digits, signed, spaced, escaped.
HOSTILE_NUMBERS = [
    "²",
    "٣",
    "\uff11\uff12",
    "1²",
    "+1",
    "-1",
    " 1",
    "1 ",
    "0",
    "1e3",
    "0x10",
    "1_000",
    "9" * 4301,
    "9" * 5000,
    "1" * 19,
    "",
    "%00",
    "%zz",
    "%ff%fe",
    "%C2%B2",
    "%EF%BC%91",
    "nan",
    "inf",
    "\x00",
]


def _digits(rng: random.Random) -> str:
    return rng.choice(HOSTILE_NUMBERS)


def _text(rng: random.Random) -> str:
    pool = [
        "",
        "a",
        "resp_x",
        "msg_1",
        "fg1.128.QUFB",
        "fg1.999999999999999999999.QUFB",
        "fg1.2.r.%%%",
        "$blocks",
        "x" * rng.randint(1, 3000),
        "é" * rng.randint(1, 50),
        "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
        _digits(rng),
    ]
    return rng.choice(pool)


def _query(rng: random.Random, names: tuple[str, ...]) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        name = rng.choice((*names, "zz", "", "limit%00"))
        value = rng.choice((_digits(rng), _text(rng)[:200]))
        # Escaped as a client would, but for '%': "%zz" and "%C2%B2" go as written.
        parts.append(f"{quote(name, safe='%')}={quote(value, safe='%')}")
    return "&".join(parts)


QUERY_ROUTES: list[tuple[str, str, dict[str, str], tuple[str, ...]]] = [
    ("GET", "/v1/models", {}, ("limit", "after", "order")),
    ("GET", "/v1/models", {"anthropic-version": "2023-06-01"}, ("limit", "after_id", "before_id")),
    ("GET", f"/v1/models/{MODEL}", {"anthropic-version": "2023-06-01"}, ("limit", "beta")),
    ("GET", f"/v1/models/{MODEL}", {}, ("limit",)),
    ("GET", "/v1/responses/{rid}", {}, ("include", "stream", "starting_after")),
    ("GET", "/v1/responses/{rid}/input_items", {}, ("limit", "order", "after", "include")),
    ("DELETE", "/v1/responses/{rid}", {}, ("limit",)),
    ("GET", "/readyz", {}, ("verbose",)),
    ("GET", "/healthz", {}, ("x",)),
    ("GET", "/metrics", {}, ("name[]",)),
]


def _nested(rng: random.Random, depth: int = 0) -> Json:
    """A random JSON value: wrong types, unknown keys, flatgate's own keys."""
    kind = rng.randrange(10 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**31, 2**63, 10**30, -(10**30), 1.5, 1e308])
    if kind == 3:
        return _text(rng)
    if kind == 4:
        return rng.choice([[], {}, "", 0])
    if kind == 5:
        return {"type": rng.choice(["text", "image", "function", "namespace", "web_search", "x"])}
    if kind in (6, 7):
        keys = ["type", "text", "name", "role", "content", "id", "$x", "zz", "tools", "input"]
        return {rng.choice(keys): _nested(rng, depth + 1) for _ in range(rng.randint(1, 4))}
    return [_nested(rng, depth + 1) for _ in range(rng.randint(1, 3))]


def _deep(rng: random.Random) -> bytes:
    n = rng.choice(DEPTHS)
    return b'{"a":' * n + b"1" + b"}" * n if rng.random() < 0.5 else b"[" * n + b"]" * n


def _put(doc: Json, path: tuple[str | int, ...], value: Json) -> Json:
    """``doc`` with ``value`` at ``path`` (a missing list index appends)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items = list(doc) if isinstance(doc, list) else []
        if head < len(items):
            items[head] = _put(items[head], rest, value)
        else:
            items.append(_put({}, rest, value))
        return items
    out = dict(doc) if isinstance(doc, dict) else {}
    out[head] = _put(out.get(head, {}), rest, value)
    return out


_USER = {"role": "user", "content": "hi"}
_FN = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
BODIES: dict[str, tuple[Json, list[tuple[str | int, ...]]]] = {
    "/v1/chat/completions": (
        {"model": MODEL, "messages": [_USER], "tools": [_FN]},
        [
            ("messages", 0, "content"),
            ("messages", 0),
            ("messages", 1),
            ("tools", 0),
            ("tools", 0, "function", "parameters"),
            ("tool_choice",),
            ("response_format",),
            ("metadata",),
            ("stream_options",),
            ("zz",),
            ("n",),
            ("stop",),
        ],
    ),
    "/v1/responses": (
        {
            "model": MODEL,
            "input": "hi",
            "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}],
        },
        [
            ("input",),
            ("input", 0),
            ("input", 0, "content"),
            ("input", 0, "encrypted_content"),
            ("tools", 0),
            ("tools", 1),
            ("tools", 0, "tools"),
            ("tools", 1, "zz"),
            ("tools", 0, "zz"),
            ("tool_choice", "zz"),
            ("tool_choice",),
            ("text",),
            ("reasoning",),
            ("include",),
            ("metadata",),
            ("previous_response_id",),
            ("zz",),
        ],
    ),
    "/v1/messages": (
        {"model": MODEL, "max_tokens": 5, "messages": [_USER]},
        [
            ("messages", 0, "content"),
            ("messages", 0, "content", 0),
            ("tools", 0),
            ("tools", 0, "input_schema"),
            ("system",),
            ("thinking",),
            ("tool_choice",),
            ("metadata",),
            ("thread",),
            ("$blocks",),
            ("zz",),
        ],
    ),
    "/v1/messages/count_tokens": (
        {"model": MODEL, "messages": [_USER]},
        [
            ("messages", 0, "content"),
            ("tools", 0),
            ("system",),
            ("thread",),
            ("$blocks",),
            ("zz",),
        ],
    ),
    "/v1/embeddings": (
        {"model": MODEL, "input": "hi"},
        [("input",), ("input", 0), ("dimensions",), ("encoding_format",), ("user",), ("zz",)],
    ),
}
_MARK = "__DEEP__"


def _spliced(base: Json, path: tuple[str | int, ...], raw: bytes) -> bytes:
    """``base`` with the JSON text ``raw`` at ``path``."""
    return json.dumps(_put(base, path, _MARK)).encode().replace(json.dumps(_MARK).encode(), raw)


def _body(rng: random.Random, base: Json, path: tuple[str | int, ...]) -> bytes:
    if rng.random() < 0.2:
        return _spliced(base, path, _deep(rng))
    return json.dumps(_put(base, path, _nested(rng))).encode()


def _nestings(n: int) -> tuple[bytes, bytes]:
    return b'{"a":' * n + b"1" + b"}" * n, b"[" * n + b"]" * n


# Values every endpoint's every path gets, besides the random ones.
_SPECIAL = [
    {"type": "reasoning", "summary": [], "encrypted_content": f"fg1.{d}.QUFB"}
    for d in ("0", "3", "128", "255", "256", "9" * 5000)
]


def _assert_handled(status: int, what: str) -> None:
    assert status != 500 and (status < 500 or status in (502, 503)), what


@pytest.fixture
def no_unexpected_errors(caplog: pytest.LogCaptureFixture) -> Callable[[], None]:
    caplog.set_level(logging.ERROR)

    def check() -> None:
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [], f"seed {SEED}: {errors[:3]}"

    return check


async def test_no_query_string_is_a_500(
    client: httpx.AsyncClient, no_unexpected_errors: Callable[[], None]
) -> None:
    # A response whose input is stored (its backend is not there: a 502 after
    # the input was kept), so that its input_items' query is read.
    made = await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    assert made.status_code == 502
    rid = made.headers["x-request-id"]
    assert (await client.get(f"/v1/responses/{rid}/input_items")).status_code == 200
    # Every route's every parameter with every hostile number, then at random.
    cases = [
        (method, path, headers, f"{quote(name)}={quote(value, safe='%')}")
        for method, path, headers, names in QUERY_ROUTES
        for name in names
        for value in HOSTILE_NUMBERS
    ]
    rng = random.Random(SEED)
    for i in range(QUERY_EXAMPLES):
        method, path, headers, names = QUERY_ROUTES[i % len(QUERY_ROUTES)]
        cases.append((method, path, headers, _query(rng, names)))
    for method, path, headers, query in cases:
        target = f"{path.format(rid=rid)}?{query}"
        r = await client.request(method, target, headers=headers)
        _assert_handled(r.status_code, f"seed {SEED}: {method} {target[:300]}")
    no_unexpected_errors()


async def test_no_nested_field_is_a_500(
    client: httpx.AsyncClient, no_unexpected_errors: Callable[[], None]
) -> None:
    rng = random.Random(SEED + 1)
    routes = list(BODIES.items())
    # Every path of every endpoint nested around the decoders' bound, and
    # given the special values; then random values at random paths.
    cases = [
        (endpoint, _spliced(base, path, raw))
        for endpoint, (base, paths) in routes
        for path in paths
        for n in DEPTHS
        for raw in _nestings(n)
    ]
    # Level by level where the bound lies: a body that decodes may hold a
    # tool decoded again a few frames deeper (it was a RecursionError, a 500).
    responses = BODIES["/v1/responses"][0]
    cases += [
        ("/v1/responses", _spliced(responses, path, raw))
        for path in (("tools", 1, "zz"), ("tools", 0, "zz"), ("tool_choice", "zz"))
        for n in range(*DEPTH_BAND)
        for raw in _nestings(n)
    ]
    cases += [
        (endpoint, json.dumps(_put(base, path, value)).encode())
        for endpoint, (base, paths) in routes
        for path in paths
        for value in _SPECIAL
    ]
    for i in range(BODY_EXAMPLES):
        endpoint, (base, paths) = routes[i % len(routes)]
        cases.append((endpoint, _body(rng, base, paths[rng.randrange(len(paths))])))
    seen: set[int] = set()
    for endpoint, body in cases:
        r = await client.post(
            endpoint,
            content=body,
            headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
        )
        seen.add(r.status_code)
        _assert_handled(r.status_code, f"seed {SEED + 1}: {endpoint} {body[:300]!r}")
    no_unexpected_errors()
    # The generator reached both the checks (400) and past them (the 502).
    assert {400, 502} <= seen
