"""The load bench's embeddings workload: one embeddings request per protocol, edge and proxy.

``python -m benchmarks.load --workload embeddings``. Two cases (the result's
"sizes"): ``1x1536`` and ``64x1536``, one or 64 short texts asking for 1536
dimensions, answered by the built-in stub (``flatgate stub --protocol fbs``
or ``--protocol openai``: a deterministic vector per input, cached for short
inputs, so the stub's own cost is small and the same for every row):

| Row | What the client talks to |
|---|---|
| direct-fbs | the fbs stub itself, an ``EmbeddingRequest``: the floor |
| proxy-fbs | ``flatgate proxy`` (RSGI) in front of the fbs stub: relayed untouched |
| proxy-openai | the same proxy, a model routed to the openai stub: JSON out, base64 in |
| nginx-fbs | nginx, a plain ``proxy_pass`` to the fbs stub |
| edge | ``flatgate edge`` -> the proxy (its own, RSGI) -> the fbs stub; OpenAI JSON in |
| gateway | ``flatgate gateway``, one process, OpenAI JSON in, the fbs stub behind |
| direct-openai | the openai stub itself, the same OpenAI JSON |

The OpenAI JSON asks ``encoding_format: "base64"``, as the openai SDK does.
``targets`` computes the issue's target from the rows: the proxy's user CPU
(utime, apart from the kernel's stime) per request relayed untouched at
64 x 1536 over 1 x 1536, at most 1.2x. Owns the rows, the cases' plans, the
bodies, the config and starting the servers; measures nothing itself
(``benchmarks.load.measure``), asserts on no figure. Loopback only.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from benchmarks.harness.report import ratio
from benchmarks.harness.servers import HOST, ServerGroup, gateway_available, gateway_config
from benchmarks.load.measure import FULL, Plan, Settings, Started, document_head
from benchmarks.load.rows import PROXY_SECTION, Body, Row
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.embeddings import read_embedding_response, write_embedding_request
from flatgate.proxy.wire.schema import EMBEDDINGS_PATH, FLATBUFFERS

__all__ = [
    "CASES",
    "DIMENSIONS",
    "EMBEDDINGS_FULL",
    "EMBEDDINGS_QUICK",
    "EMBEDDINGS_ROWS",
    "EMBEDDINGS_TINY",
    "TARGET_BOUND",
    "TARGET_NAME",
    "EmbeddingsTarget",
    "body_for",
    "config_text",
    "header",
    "start",
    "targets",
    "texts",
    "user_cpu_us",
    "with_hops",
]

DIMENSIONS = 1536
# The cases: result "size" -> number of inputs.
CASES = {"1x1536": 1, "64x1536": 64}
_FBS_MODEL = "bench-embed-fbs"  # routed to the fbs stub
_OPENAI_MODEL = "bench-embed-openai"  # routed to the openai stub
_P = EMBEDDINGS_PATH

EMBEDDINGS_ROWS: tuple[Row, ...] = (
    Row(
        "direct-fbs",
        "stub-fbs",
        _P,
        "fbs",
        ("stub-fbs",),
        None,
        "client to the fbs stub: the floor",
    ),
    Row("proxy-fbs", "proxy", _P, "fbs", ("proxy",), None, "proxy (RSGI), fbs backend: untouched"),
    Row(
        "proxy-openai",
        "proxy",
        _P,
        "fbs",
        ("proxy",),
        None,
        "proxy (RSGI), openai backend: JSON out, base64 JSON -> EmbeddingResponse",
    ),
    Row("nginx-fbs", "nginx", _P, "fbs", ("nginx",), None, "proxy_pass to the fbs stub"),
    Row(
        "edge",
        "edge",
        _P,
        "openai",
        ("edge", "proxy-edge"),
        None,
        "OpenAI JSON -> edge -> proxy (RSGI) -> fbs stub; base64 out",
    ),
    Row("gateway", "gateway", _P, "openai", ("gateway",), None, "flatgate gateway, fbs stub"),
    Row(
        "direct-openai",
        "stub-openai",
        _P,
        "openai",
        ("stub-openai",),
        None,
        "client to the openai stub",
    ),
)
_ROW_NAMES = tuple(r.name for r in EMBEDDINGS_ROWS)
_SIZES = tuple(CASES)


def _plans(wrk_seconds: int | None, unloaded_seconds: float) -> dict[str, Plan]:
    return {
        size: Plan(
            rows=_ROW_NAMES,
            wrk_seconds=wrk_seconds,
            unloaded_seconds=unloaded_seconds,
            fixed_rate=False,
            backend="stub-fbs",
            floor="direct-fbs",
        )
        for size in _SIZES
    }


# 7 rows x 2 cases x 3 rounds x (3 s of wrk + 0.3 s unloaded): about 2.5 minutes.
EMBEDDINGS_FULL = replace(
    FULL,
    workload="embeddings",
    sizes=_SIZES,
    rounds=dict.fromkeys(_SIZES, 3),
    wrk_seconds=3,
    unloaded_seconds=0.3,
    rates={},
    floor="direct-fbs",
    versus=("nginx-fbs",),
    rows=_ROW_NAMES,
    plans=_plans(None, 0.3),
    stream_rows=(),
    warmup_seconds=1,
    budget_seconds=200.0,
)
EMBEDDINGS_QUICK = replace(
    EMBEDDINGS_FULL,
    mode="quick",
    rounds=dict.fromkeys(_SIZES, 1),
    wrk_seconds=2,
    plans=_plans(None, 0.2),
    warmup_seconds=0,
    budget_seconds=100.0,
)
EMBEDDINGS_TINY = replace(
    EMBEDDINGS_QUICK,
    mode="tiny",
    wrk_seconds=1,
    unloaded_seconds=0.1,
    plans=_plans(None, 0.1),
    budget_seconds=60.0,
)


def texts(count: int) -> list[str]:
    """``count`` short, distinct texts (a sentence each)."""
    return [f"embedding input number {i} of the load bench" for i in range(count)]


def _fbs_ok(count: int, data: bytes) -> bool:
    try:
        answer = read_embedding_response(data)
    except MalformedBuffer:
        return False
    return answer.count == count and answer.dimensions == DIMENSIONS


def _json_ok(count: int, data: bytes) -> bool:
    try:
        items = json.loads(data)["data"]
        return len(items) == count and all(
            len(base64.b64decode(i["embedding"])) == 4 * DIMENSIONS for i in items
        )
    except (ValueError, KeyError, TypeError):
        return False


@dataclass(frozen=True, slots=True)
class _Check:
    """The spot check of one case's answer, in the row's format."""

    count: int
    fbs: bool

    def __call__(self, data: bytes) -> bool:
        return _fbs_ok(self.count, data) if self.fbs else _json_ok(self.count, data)


_JSON_HEADERS = (("content-type", "application/json"), ("authorization", "Bearer bench"))


def body_for(row: Row, size: str) -> Body:
    """The request ``row`` sends at case ``size``: an ``EmbeddingRequest`` for
    the fbs rows, OpenAI's JSON (base64, 1536 dimensions) for the others."""
    count = CASES[size]
    if row.body == "fbs":
        model = _OPENAI_MODEL if row.name == "proxy-openai" else _FBS_MODEL
        data = write_embedding_request(model, texts=texts(count), dimensions=DIMENSIONS)
        return Body(data, (("content-type", FLATBUFFERS),), check=_Check(count, True))
    request = {
        "model": _FBS_MODEL,
        "input": texts(count),
        "dimensions": DIMENSIONS,
        "encoding_format": "base64",
    }
    return Body(msgspec.json.encode(request), _JSON_HEADERS, check=_Check(count, False))


def config_text(fbs_port: int, openai_port: int) -> str:
    """The proxy's, the edge's and the gateway's config: each model to its stub."""
    return gateway_config(
        {
            "embed-fbs": (f"http://{HOST}:{fbs_port}", "fbs"),
            "embed-openai": (f"http://{HOST}:{openai_port}/v1", "openai"),
        },
        {_FBS_MODEL: ["embed-fbs"], _OPENAI_MODEL: ["embed-openai"]},
        {_FBS_MODEL: "OpenAI", _OPENAI_MODEL: "OpenAI"},
        before=PROXY_SECTION,
    )


def start(group: ServerGroup, settings: Settings) -> Started:
    """Start every server the selected rows need; what cannot run, with why."""
    wanted = {n for r in EMBEDDINGS_ROWS if r.name in settings.rows for n in (r.server, *r.hop)}
    skipped: dict[str, str] = {}
    fbs = group.flatgate("stub-fbs", "stub", ["--protocol", "fbs", "--interface", "rsgi"])
    openai = group.flatgate("stub-openai", "stub", ["--protocol", "openai", "--interface", "rsgi"])
    config = group.workdir / "embeddings.toml"
    config.write_text(config_text(fbs.port, openai.port))
    cfg = ["--config", str(config)]
    proxy_args = [*cfg, "--interface", "rsgi", "--transport", "fast"]
    if "proxy" in wanted:
        group.flatgate("proxy", "proxy", proxy_args, metrics=True)
    if "edge" in wanted:
        hop = group.flatgate("proxy-edge", "proxy", proxy_args, metrics=True)
        group.flatgate("edge", "edge", [*cfg, "--proxy-url", hop.url], metrics=True)
    if "gateway" in wanted:
        ok, help_text = gateway_available()
        if ok:
            extra = ["--interface", "rsgi"] if "--interface" in help_text else []
            group.flatgate("gateway", "gateway", [*cfg, *extra], metrics=True)
        else:
            skipped["gateway"] = help_text
    if "nginx" in wanted and (why := group.nginx_in_front({"nginx": fbs.port})) is not None:
        skipped["nginx"] = why
    skipped.update(group.wait_healthy())
    return Started(skipped, body_for)


def header(settings: Settings, revision: str = "unknown") -> dict[str, Any]:
    s = settings
    method = (
        "All servers on 127.0.0.1, one granian worker each (nginx: one worker), started "
        "once and measured side by side in rounds, the row order rotated each round. "
        f"Request: {', '.join(f'{n} short text(s)' for n in CASES.values())} asking for "
        f"{DIMENSIONS} dimensions, as an EmbeddingRequest FlatBuffer (the fbs rows) or "
        "OpenAI's JSON with encoding_format base64 (edge, gateway, direct-openai). "
        "Backend: the built-in stub (fbs or openai protocol), a deterministic vector per "
        "input, cached. Saturation: wrk, one thread, "
        f"{s.connections} keep-alive connections, {s.wrk_seconds} s per round; CPU per "
        "request from /proc utime+stime of each server's process tree over the wrk run, "
        "user CPU (utime) apart. Unloaded: one connection, one request at a time. Peak "
        "RSS: VmHWM of each server's largest process."
    )
    packages = ("granian", "msgspec", "flatbuffers", "httptools", "uvloop")
    return document_head(s, revision, packages, method)


def user_cpu_us(row: Mapping[str, Any]) -> float | None:
    """The hop's user CPU per request (µs): its CPU less the kernel's share."""
    cpu = row.get("cpu_us_per_req") or {}
    sys_ = row.get("sys_us_per_req") or {}
    hop = [n for n in cpu if n in row.get("hop", ())]
    if not hop:
        return None
    return float(sum(cpu[n] - sys_.get(n, 0.0) for n in hop))


TARGET_NAME = "proxy (fbs, relayed untouched) user CPU per request, 64x1536 / 1x1536"
TARGET_BOUND = 1.2


@dataclass(frozen=True, slots=True)
class EmbeddingsTarget:
    name: str
    value: float | None
    bound: float
    inputs: dict[str, float | None]

    @property
    def met(self) -> bool | None:
        return None if self.value is None else self.value <= self.bound


def _ok(rows: Sequence[Mapping[str, Any]], size: str, name: str) -> Mapping[str, Any] | None:
    return next(
        (r for r in rows if r.get("size") == size and r["row"] == name and r["status"] == "ok"),
        None,
    )


def targets(rows: Sequence[Mapping[str, Any]]) -> list[EmbeddingsTarget]:
    """The issue's target from the result rows (``hop`` as ``with_hops`` adds it)."""
    small, large = (_ok(rows, size, "proxy-fbs") for size in _SIZES)
    a = None if large is None else user_cpu_us(large)
    b = None if small is None else user_cpu_us(small)
    value = ratio(a, b) if a is not None and b else None
    inputs = {f"{_SIZES[1]} user µs/req": a, f"{_SIZES[0]} user µs/req": b}
    return [EmbeddingsTarget(TARGET_NAME, value, TARGET_BOUND, inputs)]


def with_hops(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The result rows with each row's hop servers and user CPU per request added."""
    hops = {r.name: list(r.hop) for r in EMBEDDINGS_ROWS}
    out = []
    for r in rows:
        row = {**r, "hop": hops.get(r["row"], [])}
        if r.get("status") == "ok":
            row["hop_user_cpu_us_per_req"] = user_cpu_us(row)
        out.append(row)
    return out
