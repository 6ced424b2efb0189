"""What the streams bench compares: its rows, their servers, bodies and config.

Owns the row table (who the client talks to, in which format, which
processes are charged to the row), the one request every stream sends (a
400-token prompt, 128 tokens asked for, ``stream: true``) in ``.fbs`` and
OpenAI JSON, the config every server of a row reads, and starting a row's
servers (``start_row``), fresh for every row so that each row's peak RSS and
GC are its own:

- the stub in cadence mode (``[stub] cadence``) on granian's own command line,
  RSGI, with granian's backpressure raised past the connections (granian's
  default lets one worker serve 1,024 requests at once, and the backend must
  not cap the streams);
- the flatgate services under test (``proxy``, ``edge``, ``gateway``) through
  the ``flatgate`` command with the default config, one worker, only the ports
  (and the addresses of the next hop) set; or, with ``backpressure``, through
  granian's command line with that backpressure (what granian's default of
  1,024 requests per worker costs);
- nginx (Debian's, ``benchmarks.harness.servers.nginx_config``) in front of the stub.

The stub speaks the ``.fbs`` protocol, or for the ``*-openai`` rows the OpenAI
API (``[stub] protocol = "openai"``, still in cadence mode: the same deltas at
the same pace as ``chat.completion.chunk`` events), and the gateway reaches it
through its ``openai`` adapter: the real path, beside the fbs rows and nginx.

Only loopback addresses; the processes are ``benchmarks.harness.servers``'.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from benchmarks.harness.servers import (
    HOST,
    NO_NGINX,
    ServerGroup,
    find_tool,
    free_port,
    gateway_available,
    gateway_config,
)
from benchmarks.payloads import to_flatbuffer
from benchmarks.streams.client import Call, Kind
from flatgate.proxy.service.settings import ProxySection
from flatgate.proxy.stub.cadence import TOKEN
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES

__all__ = [
    "MODEL",
    "ROWS",
    "GcSetting",
    "Row",
    "Timing",
    "call_for",
    "config_text",
    "request_json",
    "start_row",
]

MODEL = "bench-streams"
_SEED = 1
_VOCABULARY = (
    "the a of to and in is for that on with as it be by this are from at or an model "
    "request token stream backend latency prompt context answer question user system "
    "tool function call result value table buffer route proxy gateway server client"
)
_WORDS = tuple(_VOCABULARY.split())


@dataclass(frozen=True, slots=True)
class Timing:
    """The backend: time to first token, between tokens, tokens per stream."""

    ttft_ms: float = 90.0
    itl_ms: float = 14.0
    tokens: int = 128
    prompt_tokens: int = 400


@dataclass(frozen=True, slots=True)
class GcSetting:
    """The collector's settings a row's flatgate processes run with: the
    ``gc_thresholds`` and ``gc_freeze`` keys of ``[proxy]`` and ``[edge]`` (the
    one-process gateway reads ``[edge]``'s; ``plumbing.gctune``)."""

    name: str
    thresholds: tuple[int, int, int]
    freeze: bool
    note: str = ""

    def toml(self) -> str:
        a, b, c = self.thresholds
        return f"gc_thresholds = [{a}, {b}, {c}]\ngc_freeze = {str(self.freeze).lower()}\n"


Backend = Literal["fbs", "openai"]


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    kind: Kind  # what the client sends and reads
    path: str
    front: str  # the server the client calls
    charged: tuple[str, ...]  # the processes whose CPU, GC and RSS the row reports
    note: str
    backend: Backend = "fbs"  # the protocol the stub speaks (and the gateway's adapter)


_C, _CHAT = "/v1/completions", "/v1/chat/completions"
ROWS: tuple[Row, ...] = (
    Row("direct", "fbs", _C, "stub", ("stub",), "client -> stub: the floor"),
    Row("nginx", "fbs", _C, "nginx", ("nginx", "stub"), "nginx proxy_pass, buffering off"),
    Row("proxy", "fbs", _C, "proxy", ("proxy", "stub"), "client -> flatgate proxy -> stub"),
    Row(
        "edge+proxy",
        "openai",
        _CHAT,
        "edge",
        ("edge", "proxy", "stub"),
        "OpenAI JSON -> edge -> proxy -> stub, SSE out",
    ),
    Row(
        "gateway",
        "openai",
        _CHAT,
        "gateway",
        ("gateway", "stub"),
        "OpenAI JSON -> the one-process gateway (edge + proxy) -> stub",
    ),
    Row(
        "nginx-openai",
        "openai",
        _CHAT,
        "nginx",
        ("nginx", "stub"),
        "nginx proxy_pass, buffering off -> the stub speaking the OpenAI API",
        "openai",
    ),
    Row(
        "gateway-openai",
        "openai",
        _CHAT,
        "gateway",
        ("gateway", "stub"),
        "OpenAI JSON -> the gateway -> its openai adapter -> the stub speaking the OpenAI API",
        "openai",
    ),
)


def request_json(t: Timing) -> dict[str, Any]:
    """The request: a system prompt and a user turn of ``prompt_tokens`` words
    in all (the stub counts a word a token), ``tokens`` asked for, streamed."""
    rng = random.Random(_SEED)
    words = [rng.choice(_WORDS) for _ in range(t.prompt_tokens)]
    cut = t.prompt_tokens // 4
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": " ".join(words[:cut])},
            {"role": "user", "content": " ".join(words[cut:])},
        ],
        "max_tokens": t.tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def call_for(row: Row, port: int, t: Timing) -> Call:
    """The HTTP request every stream of ``row`` sends, and what it must get."""
    doc = request_json(t)
    if row.kind == "fbs":
        body = to_flatbuffer(doc)
        headers = [("content-type", FLATBUFFERS), ("accept", FRAMES)]
    else:
        body = msgspec.json.encode(doc)
        headers = [("content-type", "application/json"), ("accept", "text/event-stream")]
    head = [f"POST {row.path} HTTP/1.1", f"host: {HOST}:{port}"]
    head += [f"{k}: {v}" for k, v in headers]
    head.append(f"content-length: {len(body)}")
    request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
    return Call(HOST, port, request, row.kind, t.tokens, TOKEN)


def config_text(
    stub_port: int,
    proxy_port: int,
    t: Timing,
    gc: GcSetting | None = None,
    backend: Backend = "fbs",
) -> str:
    """The one config of a row: the stub's cadence (and, for an ``openai``
    backend, its protocol), one backend and a route to it, the edge's proxy
    and model, and ``gc``'s keys in ``[proxy]`` and ``[edge]`` when given;
    everything else the shipped defaults."""
    proxy = "" if gc is None else f"[proxy]\n{gc.toml()}\n"
    protocol = 'protocol = "openai"\n' if backend == "openai" else ""
    stub = f"""{proxy}[stub]
{protocol}cadence = true
cadence_tokens = {t.tokens}
ttft_ms = {t.ttft_ms}
itl_ms = {t.itl_ms}
"""
    edge = f'proxy_url = "http://{HOST}:{proxy_port}"\n' + ("" if gc is None else gc.toml())
    url = f"http://{HOST}:{stub_port}" + ("/v1" if backend == "openai" else "")
    return gateway_config(
        {"stub": (url, backend)},
        {"*": ["stub"]},
        {MODEL: "OpenAI" if backend == "openai" else "SelfHosted"},
        before=stub,
        edge=edge,
    )


# The granian targets of the services (as the flatgate command serves them).
_TARGETS = {
    "stub": "flatgate.proxy.stub:create_app",
    "proxy": "flatgate.proxy.service.app:create_app",
    "edge": "flatgate.edge_translator.app:create_app",
    "gateway": "flatgate.proxy.gateway.onebox:create_app",
}


def _granian(group: ServerGroup, name: str, port: int, env: dict[str, str], bp: int) -> None:
    """``name`` on granian's own command line with backpressure ``bp``."""
    iface = "rsgi" if name == "stub" else ProxySection().interface  # the shipped default
    extra = ["--backlog", "4096", "--backpressure", str(bp)]
    group.granian(
        name, _TARGETS[name], iface, env=env, port=port, extra=extra, metrics=name != "stub"
    )


def start_row(
    group: ServerGroup,
    row: Row,
    t: Timing,
    *,
    connections: int,
    backpressure: int | None,
    without: Sequence[str] = (),
    gc: GcSetting | None = None,
) -> tuple[int, str | None]:
    """Start ``row``'s servers (not yet healthy), flatgate's with ``gc``'s
    collector settings when given: the port the client calls, and why the row
    cannot run (``None``: it can)."""
    nginx = find_tool("nginx", without) if row.front == "nginx" else None
    if row.front == "nginx" and nginx is None:
        return 0, NO_NGINX
    if row.front == "gateway":
        ok, why = gateway_available()
        if not ok:
            return 0, why
    ports = {name: free_port() for name in ("stub", "proxy", "edge", "gateway")}
    config = group.workdir / f"{row.name.replace('+', '-')}.toml"
    config.write_text(config_text(ports["stub"], ports["proxy"], t, gc, row.backend))
    # The backend takes every stream at once, whatever the row.
    stub_bp = max(4096, 2 * connections + 1024)
    env = {"FLATGATE_CONFIG": str(config)}
    _granian(group, "stub", ports["stub"], env, stub_bp)
    if nginx is not None:
        server = group.nginx("nginx", ports["stub"], nginx, 2 * connections + 1024)
        return server.port, None
    for name in ("proxy", "edge", "gateway"):
        if name not in row.charged:
            continue
        if backpressure is None:
            args = ["--config", str(config)]
            group.flatgate(name, name, args, metrics=True, port=ports[name])
        else:  # the edge's shipped interface is the proxy's
            _granian(group, name, ports[name], env, backpressure)
    return ports[row.front], None
