"""Micro benchmark of the wire layer: does routing cost depend on prompt size?

Run: ``.venv/bin/pytest benchmarks/bench_wire.py --benchmark-enable``
(``testpaths`` is ``tests``, so this file runs only when named).

One group per prompt size (1 KB, 16 KB, 128 KB, 1 MB; requests of 20 messages
and 4 tools from ``benchmarks.payloads``), each comparing:

- ``read_route``: flatgate's reader (``bytes`` input, as the proxy gets it,
  and a memoryview input);
- ``accessors``: the baseline, the generated ``GetRootAs`` + ``Provider()`` +
  ``ModelName()`` (which copies the name);
- ``route+lookup``: ``read_route`` then an exact ``RouteTable`` hit, the
  proxy's whole per-request routing decision;
- ``verify``: ``verify_request`` of the whole request.

Allocations per call are counted separately by ``benchmarks/alloc_wire.py``
(memray), not here.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.payloads import PROMPT_SIZES, make_request, to_flatbuffer
from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest
from flatgate.proxy.service.routes import Route, RouteTable
from flatgate.proxy.wire.route import read_route
from flatgate.proxy.wire.verify import verify_request

MESSAGES = 20
TOOLS = 4
ROUTES: RouteTable[str] = RouteTable(
    [Route("gpt-4o-mini", "openai", provider=0), Route("llama-*", "local"), Route("*", "default")]
)


@pytest.fixture(scope="module", params=list(PROMPT_SIZES))
def body(request: pytest.FixtureRequest) -> tuple[str, bytes]:
    name = request.param
    d = make_request(PROMPT_SIZES[name], seed=1, messages=MESSAGES, tools=TOOLS)
    return name, to_flatbuffer(d)


def accessor_route(buf: bytes) -> tuple[int, bytes]:
    root = CompletionRequest.GetRootAs(buf, 0)
    return root.Provider(), root.ModelName()


def route_and_lookup(buf: bytes) -> str | None:
    provider, model = read_route(buf)
    return ROUTES.lookup(provider, model)


def _run(benchmark: Any, body: tuple[str, bytes], label: str, fn: Any, arg: Any) -> Any:
    name, buf = body
    benchmark.group = f"{name} prompt ({len(buf)} B body)"
    benchmark.name = label
    benchmark.extra_info["body_bytes"] = len(buf)
    return benchmark(fn, arg)


def test_read_route(benchmark: Any, body: tuple[str, bytes]) -> None:
    provider, model = _run(benchmark, body, "read_route", read_route, body[1])
    assert (provider, bytes(model)) == accessor_route(body[1])


def test_read_route_memoryview(benchmark: Any, body: tuple[str, bytes]) -> None:
    view = memoryview(body[1])
    _, model = _run(benchmark, body, "read_route(memoryview)", read_route, view)
    assert model.obj is body[1]


def test_accessors(benchmark: Any, body: tuple[str, bytes]) -> None:
    assert _run(benchmark, body, "accessors", accessor_route, body[1]) == (0, b"gpt-4o-mini")


def test_route_and_lookup(benchmark: Any, body: tuple[str, bytes]) -> None:
    assert _run(benchmark, body, "route+lookup", route_and_lookup, body[1]) == "openai"


def test_verify(benchmark: Any, body: tuple[str, bytes]) -> None:
    _run(benchmark, body, "verify_request", verify_request, body[1])
