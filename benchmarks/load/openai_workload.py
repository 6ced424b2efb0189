"""The load bench's OpenAI workload: flatgate and its peers on one OpenAI chat request.

``python -m benchmarks.load --workload openai``. Every row takes the same
2 KB request (``benchmarks.load.openai_bodies``): an OpenAI Chat Completions
request (``model`` and ``messages``), the same conversation as a Responses
API request (the ``gateway-responses`` row), as a Gemini API request (the
``gateway-gemini-api`` row) or as an Anthropic Messages request, and sends
it on to the built-in stub in canned mode (``benchmarks.load.cases``: 32 or 512 tokens, whole or
streamed as the request says, answered from bytes built once):

| Row | What the client talks to |
|---|---|
| direct-openai, direct-anthropic (and -512) | the stub itself: the floor |
| nginx-openai, nginx-anthropic (and -512) | nginx, a plain ``proxy_pass`` to the stub |
| edge | the edge, then the proxy (RSGI) and its openai adapter, then the stub |
| gateway | ``flatgate gateway``, one process (only where ``flatgate gateway --help`` works) |
| gateway-responses | the same gateway on ``/v1/responses`` (``store: false``) |
| gateway-gemini-api | the same gateway on ``/v1beta/models/<model>:generateContent`` |
| gateway-anthropic | the same gateway on ``/v1/messages``, its anthropic adapter |
| portkey | the Portkey gateway (node), provider ``openai`` with the stub as custom host |
| portkey-anthropic | the same Portkey on ``/v1/messages``, provider ``anthropic`` |
| litellm | the LiteLLM proxy, model ``openai/<model>`` with the stub as ``api_base`` |
| vllm-router (and -512...) | vllm-router (Rust), round robin to its one stub: one a stub |
| direct-, nginx-, gateway-bedrock and -gemini | the cloud stubs (``benchmarks.load.cloud_rows``) |
| direct-openai-cadence, nginx-openai-cadence (and -anthropic, -512) | a stub in cadence mode |

Each case of ``benchmarks.load.cases`` is one "size" of the result (its rows,
connections and floor in its ``Plan``). The peers run only when asked
(``BENCH_PEERS=1`` or ``--peers``) and where ``benchmarks/peers/setup_peers.sh``
installed them (``benchmarks.load.peers``); otherwise their rows are skipped
with the reason. Streaming (the original rows): 16 concurrent streams of 32
tokens from a second OpenAI stub that echoes the last user message (time to
first token and between tokens as the fbs workload's), timed to the end of
each stream. The rows are measured in the rounds of ``benchmarks.load.measure``,
with "vs. portkey", "vs. litellm" and "vs. vllm-router" ratios.

Owns the rows, the config of the flatgate servers and starting every server
(the bodies are ``benchmarks.load.openai_bodies``'); measures nothing itself.
Loopback only.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from benchmarks.harness.servers import (
    HOST,
    ServerGroup,
    find_tool,
    gateway_available,
    gateway_config,
    tool_version,
)
from benchmarks.load import floor_app, peers
from benchmarks.load.cases import CADENCE_ITL_MS, CADENCE_TTFT_MS, CASES, plans, router_row
from benchmarks.load.cloud_rows import (
    BEDROCK_ENV,
    BEDROCK_MODEL,
    CLOUD_BACKENDS,
    CLOUD_ROWS,
    GEMINI_KEY,
    GEMINI_MODEL,
)
from benchmarks.load.measure import FULL, Settings, Started, document_head
from benchmarks.load.openai_bodies import BODY_BYTES, CHAT_HEADERS, Bodies, chat_body
from benchmarks.load.rows import (
    ADAPTER_MODEL,
    ECHO_MODEL,
    PROXY_SECTION,
    BodyKind,
    Row,
)

__all__ = [
    "BEDROCK_ENV",
    "BEDROCK_MODEL",
    "GEMINI_KEY",
    "GEMINI_MODEL",
    "OPENAI_FULL",
    "OPENAI_QUICK",
    "OPENAI_ROWS",
    "OPENAI_TINY",
    "SIZE",
    "STUBS",
    "config_text",
    "header",
    "start",
    "start_peers",
    "stub_model",
]

SIZE = "2KB"
_CHAT = "/v1/chat/completions"
_RESPONSES = "/v1/responses"
_MESSAGES = "/v1/messages"
# The canned stubs of the cases: server name -> (protocol, tokens).
STUBS = {
    "stub": ("openai", 32),
    "stub-512": ("openai", 512),
    "stub-anthropic": ("anthropic", 32),
    "stub-anthropic-512": ("anthropic", 512),
    "stub-bedrock": ("bedrock", 32),
    "stub-gemini": ("gemini", 32),
    "stub-cadence": ("openai", 32),
    "stub-cadence-512": ("openai", 512),
    "stub-anthropic-cadence": ("anthropic", 32),
    "stub-anthropic-cadence-512": ("anthropic", 512),
}
# The stubs of the cadence cases: in cadence mode ([stub] cadence), not canned.
CADENCE_STUBS = frozenset(n for n in STUBS if "-cadence" in n)
# Each stub's backend in the flatgate config, and the model routed to it.
_BACKENDS = {
    "stub": "canned-openai",
    "stub-512": "canned-openai-512",
    "stub-anthropic": "canned-anthropic",
    "stub-anthropic-512": "canned-anthropic-512",
    "stub-bedrock": "canned-bedrock",
    "stub-gemini": "canned-gemini",
    **{name: name.removeprefix("stub-") for name in CADENCE_STUBS},
}
# The cadence cases' (API, path, stub, nginx, tail).
_CADENCE: tuple[tuple[BodyKind, str, str, str, str], ...] = (
    ("openai", _CHAT, "stub-cadence", "nginx-cadence", ""),
    ("openai", _CHAT, "stub-cadence-512", "nginx-cadence-512", "-512"),
    ("anthropic", _MESSAGES, "stub-anthropic-cadence", "nginx-anthropic-cadence", ""),
    ("anthropic", _MESSAGES, "stub-anthropic-cadence-512", "nginx-anthropic-cadence-512", "-512"),
)
# vllm-router: a router of its own in front of each OpenAI stub (it routes by
# worker, not by model); the first's rows stream from one in front of the echo stub.
_ROUTED = {router_row(stub): stub for stub, (api, _) in STUBS.items() if api == "openai"}


def _echo(router: str, stub: str) -> str | None:
    return f"{router}-echo" if stub == "stub" else None


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
        "floor",
        "floor",
        _CHAT,
        "openai",
        ("floor",),
        None,
        "granian RSGI pass-through, no parse (benchmarks.load.floor_app): the floor",
    ),
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
        "gateway-gemini-api",
        "gateway",
        f"/v1beta/models/{ADAPTER_MODEL}:generateContent",
        "gemini",
        ("gateway",),
        None,
        "flatgate gateway, Gemini API (generateContent), openai adapter",
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
    *(
        Row(name, name, _CHAT, "openai", (name,), _echo(name, stub), f"vllm-router -> {stub}")
        for name, stub in _ROUTED.items()
    ),
    # The other cases' rows (benchmarks.load.cases): no echo stream of their own.
    Row("direct-openai-512", "stub-512", _CHAT, "openai", (), None, "client to the 512-token stub"),
    Row("nginx-openai-512", "nginx-512", _CHAT, "openai", ("nginx-512",), None, "proxy_pass"),
    Row(
        "direct-anthropic",
        "stub-anthropic",
        _MESSAGES,
        "anthropic",
        (),
        None,
        "client to the Anthropic stub",
    ),
    Row(
        "direct-anthropic-512",
        "stub-anthropic-512",
        _MESSAGES,
        "anthropic",
        (),
        None,
        "client to the 512-token Anthropic stub",
    ),
    Row(
        "nginx-anthropic",
        "nginx-anthropic",
        _MESSAGES,
        "anthropic",
        ("nginx-anthropic",),
        None,
        "proxy_pass",
    ),
    Row(
        "nginx-anthropic-512",
        "nginx-anthropic-512",
        _MESSAGES,
        "anthropic",
        ("nginx-anthropic-512",),
        None,
        "proxy_pass",
    ),
    Row(
        "gateway-anthropic",
        "gateway",
        _MESSAGES,
        "anthropic",
        ("gateway",),
        None,
        "flatgate gateway, Messages API, anthropic adapter",
    ),
    Row(
        "portkey-anthropic",
        "portkey",
        _MESSAGES,
        "anthropic",
        ("portkey",),
        None,
        "Portkey gateway, Messages API, provider anthropic",
    ),
    *CLOUD_ROWS,
    # The cadence cases' own floors and nginx rows (benchmarks.load.cases).
    *(
        Row(f"direct-{api}-cadence{long}", stub, path, api, (), None, f"client to {stub}")
        for api, path, stub, _, long in _CADENCE
    ),
    *(
        Row(f"nginx-{api}-cadence{long}", nginx, path, api, (nginx,), None, "proxy_pass")
        for api, path, _, nginx, long in _CADENCE
    ),
)
# The rows of the streaming measurement (the echo stub's 32 tokens, paced).
_STREAM_ROWS = tuple(r.name for r in OPENAI_ROWS if r.stream_server is not None)
_SIZES = tuple(c.name for c in CASES)

# The first case keeps its three rounds, the fixed rate and wrk's 4 s; the
# others (no fixed rate) take two rounds of wrk 2 s and 0.5 s unloaded each.
OPENAI_FULL = replace(
    FULL,
    workload="openai",
    sizes=_SIZES,
    rounds={SIZE: 3, **dict.fromkeys(_SIZES[1:], 2)},
    # LiteLLM takes a few hundred requests a second here: every row at one rate
    # needs a rate it can take three times over.
    rates={SIZE: 50.0},
    rate_seconds=4.0,
    stream_seconds=3.0,
    stream_concurrency=16,
    floor="direct-openai",
    versus=peers.PEERS,
    rows=tuple(r.name for r in OPENAI_ROWS),
    plans=plans(CASES, wrk_seconds=2, unloaded_seconds=0.5),
    stream_rows=_STREAM_ROWS,
    warmup_seconds=2,
    budget_seconds=780.0,  # the cadence cases (issue 43) added about 160 s
)
OPENAI_QUICK = replace(
    OPENAI_FULL,
    mode="quick",
    rounds=dict.fromkeys(_SIZES, 1),
    wrk_seconds=2,
    rate_seconds=2.0,
    unloaded_seconds=0.5,
    stream_seconds=1.5,
    stream_rounds=1,
    plans=plans(CASES, wrk_seconds=1, unloaded_seconds=0.3),
    warmup_seconds=1,
    budget_seconds=300.0,
)
OPENAI_TINY = replace(
    OPENAI_QUICK,
    mode="tiny",
    wrk_seconds=1,
    rate_seconds=0.5,
    unloaded_seconds=0.2,
    stream_seconds=0.5,
    plans=plans(CASES, wrk_seconds=1, unloaded_seconds=0.2),
    warmup_seconds=0,
    budget_seconds=200.0,
)


def config_text(canned: int, echo: int, more: Mapping[str, int] | None = None) -> str:
    """The proxy's, the edge's and the gateway's config: the two OpenAI stubs
    of the first case and the echo, and the other cases' stubs in ``more``
    (``STUBS``' server names to their ports)."""
    ports = {"stub": canned, **(more or {})}
    backends = {"echo-openai": (f"http://{HOST}:{echo}/v1", "openai")}
    routes = {ECHO_MODEL: ["echo-openai"]}
    models = {ECHO_MODEL: "OpenAI"}
    before = PROXY_SECTION
    for server, port in ports.items():
        protocol, _ = STUBS[server]
        model = stub_model(server)
        routes[model] = [_BACKENDS[server]]
        if protocol in CLOUD_BACKENDS:
            # Keys of its own: written here, before the generic entries.
            before += CLOUD_BACKENDS[protocol](_BACKENDS[server], port)
            models[model] = "OpenAI"
            continue
        backends[_BACKENDS[server]] = (f"http://{HOST}:{port}/v1", protocol)
        models[model] = "OpenAI" if protocol == "openai" else "Anthropic"
    return gateway_config(backends, routes, models, before=before)


def stub_model(server: str) -> str:
    """The model flatgate routes to the canned stub ``server`` (``STUBS``)."""
    protocol, tokens = STUBS[server]
    if server == "stub":
        return ADAPTER_MODEL
    paced = "-cadence" * (server in CADENCE_STUBS)
    return f"bench-{protocol}{paced}{'-512' * (tokens == 512)}"


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
    stubs = {
        name: group.flatgate(
            name,
            "stub",
            ["--protocol", protocol, *_stub_mode(name, tokens), "--interface", "rsgi"],
            env=_cadence_env(tokens) if name in CADENCE_STUBS else None,
        )
        for name, (protocol, tokens) in STUBS.items()
    }
    stub = stubs["stub"]
    timing = ["--ttft-ms", str(settings.ttft_ms), "--itl-ms", str(settings.itl_ms)]
    echo = group.flatgate("echo", "stub", ["--protocol", "openai", *timing, "--interface", "rsgi"])
    more = {name: s.port for name, s in stubs.items() if name != "stub"}
    text = config_text(stub.port, echo.port, more)
    config = group.workdir / "openai.toml"
    config.write_text(text)
    cfg = ["--config", str(config)]
    if "edge" in wanted:
        args = [*cfg, "--interface", "rsgi", "--transport", "fast"]
        hop = group.flatgate("proxy-edge", "proxy", args, metrics=True, env=BEDROCK_ENV)
        group.flatgate("edge", "edge", [*cfg, "--proxy-url", hop.url], metrics=True)
    gateways = [n for n in ("gateway", "gateway-limits", "gateway-redis") if n in wanted]
    if gateways:
        ok, help_text = gateway_available()
        extra = ["--interface", "rsgi"] if "--interface" in help_text else []
        redis = find_tool("redis-server", settings.without)
        for name in gateways:
            if not ok:
                skipped[name] = help_text
                continue
            if name == "gateway":
                group.flatgate(name, "gateway", [*cfg, *extra], metrics=True, env=BEDROCK_ENV)
                continue
            limits = LIMITS
            if name == "gateway-redis":
                if redis is None:
                    skipped[name] = "redis-server is not installed (setup_tools.sh installs it)"
                    continue
                store = group.redis("redis", redis)
                limits += f'[state]\nstore = "{store.url}"\non_store_error = "closed"\n'
            limited = group.workdir / f"{name}.toml"
            limited.write_text(text + limits)
            argv = ["--config", str(limited), *extra]
            group.flatgate(name, "gateway", argv, metrics=True, env=BEDROCK_ENV)
    if "floor" in wanted:
        env = {**os.environ, "FLOOR_UPSTREAM": f"{HOST}:{stub.port}"}
        group.granian("floor", floor_app.TARGET, "rsgi", env=env, metrics=False)
    upstreams = {name: stubs[backend].port for name, backend in _NGINX.items() if name in wanted}
    if "nginx-echo" in wanted:
        upstreams["nginx-echo"] = echo.port
    if upstreams and (why := group.nginx_in_front(upstreams, settings.without)) is not None:
        skipped.update(dict.fromkeys(upstreams, why))
    litellm_stubs = {ADAPTER_MODEL: stub.url + "/v1", ECHO_MODEL: echo.url + "/v1"}
    litellm_stubs[stub_model("stub-cadence")] = stubs["stub-cadence"].url + "/v1"
    routers = {name: stubs[stub].url for name, stub in _ROUTED.items() if name in wanted}
    routers |= {f"{n}-echo": echo.url for n in _ROUTED if f"{n}-echo" in wanted}
    peer_skips, found = start_peers(group, settings, wanted, litellm_stubs, routers)
    skipped.update(peer_skips)
    skipped.update(group.wait_healthy(seconds=120.0))
    if "gateway-bedrock" in settings.rows and "gateway" not in skipped:
        _await_signing(group.servers["gateway"].url)
    bodies = Bodies({name: s.url for name, s in stubs.items()}, echo.url)
    return Started(skipped, bodies.size, bodies.stream, found)


def _stub_mode(name: str, tokens: int) -> list[str]:
    """The stub's flags: canned, or a cadence stub's pace (``CADENCE_*``)."""
    if name not in CADENCE_STUBS:
        return ["--canned", str(tokens)]
    return ["--ttft-ms", f"{CADENCE_TTFT_MS:g}", "--itl-ms", f"{CADENCE_ITL_MS:g}"]


def _cadence_env(tokens: int) -> dict[str, str]:
    """``[stub] cadence = true`` and its ``cadence_tokens``, as the stub's overlay."""
    return {"FLATGATE_STUB_CADENCE": "true", "FLATGATE_STUB_CADENCE_TOKENS": str(tokens)}


def _await_signing(url: str, seconds: float = 30.0) -> None:
    """Wait (at most ``seconds``) until the gateway's worker holds its AWS
    credentials, fetched beside its start: until then a Bedrock request is a
    502. A route that never answers is then the row's spot check's to name."""
    body = chat_body(BODY_BYTES, stub_model("stub-bedrock"))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        req = urllib.request.Request(url + _CHAT, body, dict(CHAT_HEADERS), method="POST")
        try:
            with _DIRECT.open(req, timeout=10) as answer:
                if answer.status == 200:
                    return
        except OSError:  # HTTPError included: a 502 until the credentials come
            pass
        time.sleep(0.2)


# Loopback only: never through a proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# The nginx servers: each in front of one stub.
_NGINX = {
    "nginx": "stub",
    "nginx-512": "stub-512",
    "nginx-anthropic": "stub-anthropic",
    "nginx-anthropic-512": "stub-anthropic-512",
    "nginx-bedrock": "stub-bedrock",
    "nginx-gemini": "stub-gemini",
    **{nginx: stub for _, _, stub, nginx, _ in _CADENCE},
}


def start_peers(
    group: ServerGroup,
    settings: Settings,
    wanted: set[str],
    stubs: dict[str, str],
    routers: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """Start the wanted peers in front of ``stubs`` (model name to base URL)
    and a vllm-router for each of ``routers`` (its server name to its stub's
    URL); the ones that cannot run, with why, and the versions found."""
    skipped: dict[str, str] = {}
    found: dict[str, str] = {}
    names = [p for p in peers.PEERS if p in wanted and p != peers.VLLM_ROUTER]
    routers = routers or {}
    if not settings.peers:
        why = "peers not requested (BENCH_PEERS=1 or --peers)"
        return dict.fromkeys([*names, *routers], why), found
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
    if routers:
        router = peers.find_vllm_router(root, settings.without)
        if isinstance(router, str):
            return {**skipped, **dict.fromkeys(routers, router)}, found
        found[peers.VLLM_ROUTER] = router.version
        for name, worker in routers.items():
            if (problem := peers.worker_problem(worker)) is not None:
                skipped[name] = problem
                continue
            peers.start_vllm_router(group, router, name, worker)
    return skipped, found


def header(settings: Settings, revision: str = "unknown") -> dict[str, Any]:
    s = settings
    short = next((p for p in s.plans.values() if not p.fixed_rate), None)
    wrk_short = short.wrk_seconds if short and short.wrk_seconds else s.wrk_seconds
    unloaded_short = short.unloaded_seconds if short and short.unloaded_seconds else 0
    warm = (
        f" Each row is warmed up first, {s.warmup_seconds} s of wrk unrecorded (node's JIT "
        "starts cold)."
        if s.warmup_seconds
        else ""
    )
    method = (
        "All servers on 127.0.0.1, started once and measured side by side in rounds, the "
        "row order rotated each round. Request: an OpenAI chat request (model and "
        f"messages, {BODY_BYTES} bytes of JSON), or the same conversation as an Anthropic "
        "Messages request. Backend: the built-in stub speaking the OpenAI (or Anthropic) "
        "API in canned mode, 32 or 512 deltas of one token each, whole when the request "
        "says stream false and streamed (every event in one write) when it says true, "
        "answered from bytes built once without parsing the body; each case's stub is the "
        "same for every row. The cadence cases' stub is in cadence mode instead "
        f"([stub] cadence): a first token after {CADENCE_TTFT_MS:g} ms, then one every "
        f"{CADENCE_ITL_MS:g} ms, each its own write, so every row relays the same events "
        "(wrk runs at least three such streams long). flatgate's servers run one granian "
        "worker each, nginx one "
        f"worker, Portkey one node process, LiteLLM one uvicorn worker.{warm} Saturation: wrk, "
        f"one thread, {s.connections} keep-alive connections (16 for streams), "
        f"{s.wrk_seconds} s per round for the first case ({wrk_short} s for the others); "
        "CPU from /proc utime+stime of each server's process tree over the wrk run, per "
        "request and, for streams, per token. Fixed rate (the first case only): an "
        "open-loop asyncio client starting requests on a fixed schedule; added latency = "
        "the row's percentile minus its case's direct row's. Unloaded: one connection, one "
        f"request at a time ({s.unloaded_seconds} s a round for the first case, "
        f"{unloaded_short} s for the others), timed to the answer's last byte and to its "
        "first body byte. Streaming: an OpenAI echo stub (ttft "
        f"{s.ttft_ms} ms, {s.itl_ms} ms between tokens, 32 tokens), "
        f"{s.stream_concurrency} concurrent streams, each timed from its request to its "
        "last byte. Peak RSS: VmHWM of each server's largest process."
    )
    packages = ("granian", "msgspec", "flatbuffers", "httptools", "uvloop")
    return document_head(s, revision, packages, method)
