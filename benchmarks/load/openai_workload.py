"""The load bench's OpenAI workload: flatgate and its peers on one OpenAI chat request.

``python -m benchmarks.load --workload openai``. Every row takes the same
OpenAI Chat Completions request (``chat_body``: ``model`` and ``messages``,
2 KB of JSON, not streamed: one backend answer per request), or the same
conversation as a Responses API request (``responses_body``, the
``gateway-responses`` row), and sends it on to the same backend, the
built-in stub speaking the OpenAI API in canned mode (8 deltas, built once):

| Row | What the client talks to |
|---|---|
| direct-openai | the stub itself: the floor |
| nginx-openai | nginx, a plain ``proxy_pass`` to the stub |
| edge | the edge, then the proxy (RSGI) and its openai adapter, then the stub |
| gateway | ``flatgate gateway``, one process (only where ``flatgate gateway --help`` works) |
| gateway-responses | the same gateway on ``/v1/responses`` (``store: false``) |
| portkey | the Portkey gateway (node), provider ``openai`` with the stub as custom host |
| litellm | the LiteLLM proxy, model ``openai/<model>`` with the stub as ``api_base`` |

The peers run only when asked (``BENCH_PEERS=1`` or ``--peers``) and where
``benchmarks/peers/setup_peers.sh`` installed them (``benchmarks.load.peers``);
otherwise their rows are skipped with the reason. Streaming: 16 concurrent
streams of 32 tokens from a second OpenAI stub that echoes the last user
message (time to first token and between tokens as the fbs workload's), timed
to the end of each stream. The rows are measured in the rounds of
``benchmarks.load.measure``, with "vs. portkey" and "vs. litellm" ratios.

Owns the rows, the bodies, the config of the flatgate servers and starting
every server; measures nothing itself. Loopback only.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import msgspec

from benchmarks.harness.servers import (
    HOST,
    ServerGroup,
    find_tool,
    gateway_available,
    gateway_config,
    tool_version,
)
from benchmarks.load import peers
from benchmarks.load.measure import FULL, Settings, Started, document_head
from benchmarks.load.rows import (
    ADAPTER_MODEL,
    CANNED_DELTAS,
    ECHO_MODEL,
    PROXY_SECTION,
    STREAM_TEXT,
    Body,
    Row,
)

__all__ = [
    "OPENAI_FULL",
    "OPENAI_QUICK",
    "OPENAI_ROWS",
    "OPENAI_TINY",
    "SIZE",
    "chat_body",
    "config_text",
    "header",
    "responses_body",
    "start",
    "start_peers",
    "stream_chat_body",
]

SIZE = "2KB"
BODY_BYTES = 2048
_CHAT = "/v1/chat/completions"
_RESPONSES = "/v1/responses"
_SEED = 7

OPENAI_ROWS: tuple[Row, ...] = (
    Row("direct-openai", "stub", _CHAT, "openai", (), "echo", "client to the OpenAI stub"),
    Row("nginx-openai", "nginx", _CHAT, "openai", ("nginx",), "nginx-echo", "proxy_pass"),
    Row(
        "edge",
        "edge",
        _CHAT,
        "openai",
        ("edge", "proxy-edge"),
        "edge",
        "edge -> proxy (RSGI) -> openai adapter -> stub",
    ),
    Row("gateway", "gateway", _CHAT, "openai", ("gateway",), "gateway", "flatgate gateway"),
    Row(
        "gateway-responses",
        "gateway",
        _RESPONSES,
        "responses",
        ("gateway",),
        "gateway",
        "flatgate gateway, Responses API",
    ),
    Row(
        "gateway-limits",
        "gateway-limits",
        _CHAT,
        "openai",
        ("gateway-limits",),
        None,
        "gateway, three tenant limits, memory store",
    ),
    Row(
        "gateway-redis",
        "gateway-redis",
        _CHAT,
        "openai",
        ("gateway-redis",),
        None,
        "gateway, three tenant limits, Redis on loopback (its CPU not counted)",
    ),
    Row("portkey", "portkey", _CHAT, "openai", ("portkey",), "portkey", "Portkey gateway (node)"),
    Row("litellm", "litellm", _CHAT, "openai", ("litellm",), "litellm", "LiteLLM proxy"),
)

OPENAI_FULL = replace(
    FULL,
    workload="openai",
    sizes=(SIZE,),
    rounds={SIZE: 3},
    # LiteLLM takes a few hundred requests a second here: every row at one rate
    # needs a rate it can take three times over.
    rates={SIZE: 50.0},
    rate_seconds=4.0,
    stream_seconds=3.0,
    stream_concurrency=16,
    floor="direct-openai",
    versus=peers.PEERS,
    rows=tuple(r.name for r in OPENAI_ROWS),
    budget_seconds=420.0,
)
OPENAI_QUICK = replace(
    OPENAI_FULL,
    mode="quick",
    rounds={SIZE: 1},
    wrk_seconds=2,
    rate_seconds=2.0,
    unloaded_seconds=0.5,
    stream_seconds=1.5,
    stream_rounds=1,
    budget_seconds=150.0,
)
OPENAI_TINY = replace(
    OPENAI_QUICK,
    mode="tiny",
    wrk_seconds=1,
    rate_seconds=0.5,
    unloaded_seconds=0.2,
    stream_seconds=0.5,
    budget_seconds=90.0,
)

_TEXT = (
    "the gateway reads each request once and sends it on to the model server that "
    "answers it while the caller waits for every token of the reply in order"
)
_WORDS = _TEXT.split()


def chat_body(size_bytes: int = BODY_BYTES, model: str = ADAPTER_MODEL) -> bytes:
    """A non-streamed chat request of exactly ``size_bytes`` of JSON (at least
    ~200): a system message and one user message of seeded words."""
    rng = random.Random(_SEED)

    def encode(text: str) -> bytes:
        messages = [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": text},
        ]
        return msgspec.json.encode({"model": model, "messages": messages, "stream": False})

    words: list[str] = []
    while len(encode(" ".join(words))) < size_bytes:
        words.append(rng.choice(_WORDS))
    text = " ".join(words)
    short = size_bytes - len(encode(text))
    if short < 0:
        text = text[:short]
    return encode(text + "." * max(0, size_bytes - len(encode(text))))


def responses_body(chat: bytes, *, stream: bool = False) -> bytes:
    """``chat`` (``chat_body``'s or ``stream_chat_body``'s request) as the
    Responses API request of the same conversation: the system message as
    ``instructions``, the user's as the ``input`` string, not stored."""
    request = msgspec.json.decode(chat)
    system = [m["content"] for m in request["messages"] if m["role"] == "system"]
    out = {
        "model": request["model"],
        "input": request["messages"][-1]["content"],
        "stream": stream,
        "store": False,
    }
    if system:
        out["instructions"] = system[0]
    return msgspec.json.encode(out)


def stream_chat_body(model: str = ECHO_MODEL) -> bytes:
    """A streamed chat request the echo stub answers with ``STREAM_TEXT``, word by word."""
    request = {
        "model": model,
        "messages": [{"role": "user", "content": STREAM_TEXT}],
        "stream": True,
    }
    return msgspec.json.encode(request)


_HEADERS = (("content-type", "application/json"), ("authorization", f"Bearer {peers.DUMMY_KEY}"))


def config_text(canned: int, echo: int) -> str:
    """The proxy's, the edge's and the gateway's config: the two OpenAI stubs."""
    return gateway_config(
        {
            "canned-openai": (f"http://{HOST}:{canned}/v1", "openai"),
            "echo-openai": (f"http://{HOST}:{echo}/v1", "openai"),
        },
        {ADAPTER_MODEL: ["canned-openai"], ECHO_MODEL: ["echo-openai"]},
        {ADAPTER_MODEL: "OpenAI", ECHO_MODEL: "OpenAI"},
        before=PROXY_SECTION,
    )


# Limits that never refuse: what checking and charging them costs. Three
# checks, as a typical tenant has: two rates and a concurrency lease.
LIMITS = """
[[limits]]
tenant = "*"
requests_per_minute = 1000000000
tokens_per_minute = 1000000000000
max_concurrent = 1000000
"""


def start(group: ServerGroup, settings: Settings) -> Started:
    """Start every server the selected rows need; what cannot run, with why."""
    selected = [r for r in OPENAI_ROWS if r.name in settings.rows]
    wanted = {n for r in selected for n in (r.server, r.stream_server, *r.hop) if n}
    skipped: dict[str, str] = {}
    stub = group.flatgate(
        "stub",
        "stub",
        ["--protocol", "openai", "--canned", str(CANNED_DELTAS), "--interface", "rsgi"],
    )
    timing = ["--ttft-ms", str(settings.ttft_ms), "--itl-ms", str(settings.itl_ms)]
    echo = group.flatgate("echo", "stub", ["--protocol", "openai", *timing, "--interface", "rsgi"])
    config = group.workdir / "openai.toml"
    config.write_text(config_text(stub.port, echo.port))
    cfg = ["--config", str(config)]
    if "edge" in wanted:
        args = [*cfg, "--interface", "rsgi", "--transport", "fast"]
        hop = group.flatgate("proxy-edge", "proxy", args, metrics=True)
        group.flatgate("edge", "edge", [*cfg, "--proxy-url", hop.url], metrics=True)
    gateways = [n for n in ("gateway", "gateway-limits", "gateway-redis") if n in wanted]
    if gateways:
        ok, text = gateway_available()
        extra = ["--interface", "rsgi"] if "--interface" in text else []
        redis = find_tool("redis-server", settings.without)
        for name in gateways:
            if not ok:
                skipped[name] = text
                continue
            if name == "gateway":
                group.flatgate(name, "gateway", [*cfg, *extra], metrics=True)
                continue
            limits = LIMITS
            if name == "gateway-redis":
                if redis is None:
                    skipped[name] = "redis-server is not installed (setup_tools.sh installs it)"
                    continue
                store = group.redis("redis", redis)
                limits += f'[state]\nstore = "{store.url}"\non_store_error = "closed"\n'
            limited = group.workdir / f"{name}.toml"
            limited.write_text(config_text(stub.port, echo.port) + limits)
            group.flatgate(name, "gateway", ["--config", str(limited), *extra], metrics=True)
    if "nginx" in wanted:
        upstreams = {"nginx": stub.port, "nginx-echo": echo.port}
        if (why := group.nginx_in_front(upstreams, settings.without)) is not None:
            skipped["nginx"] = why
    stubs = {ADAPTER_MODEL: stub.url + "/v1", ECHO_MODEL: echo.url + "/v1"}
    peer_skips, found = start_peers(group, settings, wanted, stubs)
    skipped.update(peer_skips)
    skipped.update(group.wait_healthy(seconds=120.0))
    portkey_size = (*_HEADERS, *peers.portkey_headers(stub.url + "/v1"))
    portkey_stream = (*_HEADERS, *peers.portkey_headers(echo.url + "/v1"))
    size_data = {size: chat_body(BODY_BYTES) for size in settings.sizes}
    stream_data = stream_chat_body()
    # The same conversations, to /v1/responses.
    size_responses = {size: responses_body(data) for size, data in size_data.items()}
    stream_responses = responses_body(stream_data, stream=True)

    def size_body(row: Row, size: str) -> Body:
        if row.body == "responses":
            return Body(size_responses[size], _HEADERS)
        return Body(size_data[size], portkey_size if row.name == "portkey" else _HEADERS)

    def stream_body(row: Row) -> Body:
        if row.body == "responses":
            return Body(stream_responses, _HEADERS)
        return Body(stream_data, portkey_stream if row.name == "portkey" else _HEADERS)

    return Started(skipped, size_body, stream_body, found)


def start_peers(
    group: ServerGroup, settings: Settings, wanted: set[str], stubs: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Start the wanted peers in front of ``stubs`` (model name to base URL);
    the ones that cannot run, with why, and the versions found."""
    skipped: dict[str, str] = {}
    found: dict[str, str] = {}
    names = [p for p in peers.PEERS if p in wanted]
    if not settings.peers:
        return dict.fromkeys(names, "peers not requested (BENCH_PEERS=1 or --peers)"), found
    root = peers.peers_dir()
    if "portkey" in names:
        portkey = peers.find_portkey(root, settings.without)
        if isinstance(portkey, str):
            skipped["portkey"] = portkey
        else:
            found.update(portkey.versions)
            found["node"] = tool_version("node", settings.without)
            peers.start_portkey(group, portkey)
    if "litellm" in names:
        litellm = peers.find_litellm(root, settings.without)
        if isinstance(litellm, str):
            skipped["litellm"] = litellm
        else:
            found["litellm"] = litellm.version
            peers.start_litellm(group, litellm, stubs)
    return skipped, found


def header(settings: Settings, revision: str = "unknown") -> dict[str, Any]:
    s = settings
    method = (
        "All servers on 127.0.0.1, started once and measured side by side in rounds, the "
        "row order rotated each round. Request: an OpenAI chat request (model and "
        f"messages, {BODY_BYTES} bytes of JSON, not streamed). Backend: the built-in stub "
        f"speaking the OpenAI API in canned mode ({CANNED_DELTAS} deltas, answered without "
        "reading the body), the same for every row. flatgate's servers run one granian "
        "worker each, nginx one worker, Portkey one node process, LiteLLM one uvicorn "
        "worker. Saturation: wrk, one thread, "
        f"{s.connections} keep-alive connections, {s.wrk_seconds} s per round; CPU from "
        "/proc utime+stime of each server's process tree over the wrk run. Fixed rate: an "
        "open-loop asyncio client starting requests on a fixed schedule; added latency = "
        "the row's percentile minus direct-openai's. Unloaded: one connection, one request "
        "at a time. Streaming: an OpenAI echo stub (ttft "
        f"{s.ttft_ms} ms, {s.itl_ms} ms between tokens, 32 tokens), "
        f"{s.stream_concurrency} concurrent streams, each timed from its request to its "
        "last byte. Peak RSS: VmHWM of each server's largest process."
    )
    packages = ("granian", "msgspec", "flatbuffers", "httptools", "uvloop")
    return document_head(s, revision, packages, method)
