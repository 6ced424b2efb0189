"""The OpenAI workload's cases: one answer length and mode each, every peer beside flatgate.

Issue 23's rows of ``make bench-load`` on the real path. Every case is the
same 2 KB request (an OpenAI chat request, or the same conversation as an
Anthropic Messages request) answered by the built-in stub in canned mode
(``flatgate stub --protocol openai|anthropic --canned N``: ``N`` deltas of
one token each, built once, whole when the request says ``"stream": false``
and streamed, every event in one write, when it says ``true``; the body is
not parsed beyond that flag):

| Case | API | tokens | answer | wrk connections |
|---|---|---:|---|---:|
| ``2KB`` | Chat Completions | 32 | whole | 32 |
| ``whole-512`` | Chat Completions | 512 | whole | 32 |
| ``stream-32`` | Chat Completions | 32 | streamed, in one burst | 16 |
| ``stream-512`` | Chat Completions | 512 | streamed, in one burst | 16 |
| ``cadence-32`` | Chat Completions | 32 | streamed at a model's cadence | 16 |
| ``cadence-512`` | Chat Completions | 512 | streamed at a model's cadence | 16 |
| ``anthropic-*`` | Messages | the same six | | |
| ``bedrock-whole-32`` | Converse (the gateway: Chat Completions) | 32 | whole | 32 |
| ``bedrock-stream-32`` | ConverseStream (the gateway: Chat Completions) | 32 | streamed | 16 |
| ``gemini-whole-32`` | generateContent (the gateway: Chat Completions) | 32 | whole | 32 |
| ``gemini-stream-32`` | streamGenerateContent (the gateway: Chat Comp.) | 32 | streamed | 16 |

A burst (``stream-*``: the canned stub writes every event at once) lets a
relay that sends what one read brought as one write send a few writes where
another sends every event; the cadence cases (issue 43) run a stub in
cadence mode instead (``[stub] cadence``, ``proxy.stub.cadence``: one token
every ``CADENCE_ITL_MS`` after ``CADENCE_TTFT_MS``, as a model sends them),
so every row relays the same events, one a read. Their stubs, floors and
nginx rows are their own (``-cadence`` in the names); the gateway, Portkey
and LiteLLM rows are the same rows, sent the cadence stub's model.

Each case names its floor (the client straight to that stub), the row in
each column of the report (``ROLES``: nginx, vllm-router, Portkey, LiteLLM,
the flatgate gateway) and, for ``2KB``, the other flatgate rows measured
beside them. vllm-router is in every OpenAI case (it has no Messages API), a
router of its own in front of each case's stub (``router_row``: it routes by
worker, not by model).
LiteLLM is in the 32-token OpenAI cases only: at 512 tokens it takes seconds
a stream at c16, past wrk's run. The Bedrock cases (issue 39) have no peer:
the stub is ``flatgate stub --protocol bedrock --canned 32``, the direct and
nginx rows send it the same conversation as a Converse request (on
``/model/{id}/converse`` or ``/converse-stream``: a row each, as a row has one
path), and the gateway row sends the OpenAI chat request to ``flatgate
gateway``, whose ``bedrock`` backend signs it with SigV4 and sends it to that
stub through Converse. The Gemini cases (issue 40) are the same with
``flatgate stub --protocol gemini --canned 32``: the direct and nginx rows
send it the conversation as a ``generateContent`` request (on
``/v1beta/models/{model}:generateContent`` or
``:streamGenerateContent?alt=sse``), the gateway row the OpenAI chat request
to ``flatgate gateway``, whose ``gemini`` backend (``x-goog-api-key``)
translates it for that stub. ``targets`` computes the issue's target
ratios from a result document's rows (``target_records``: as the result
document keeps them). Pure: no I/O; figures are reported,
never asserted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from benchmarks.harness.report import ratio
from benchmarks.load.measure import Plan

__all__ = [
    "CADENCE_ITL_MS",
    "CADENCE_TTFT_MS",
    "CASES",
    "ROLES",
    "Case",
    "Target",
    "case_named",
    "plans",
    "result_row",
    "router_row",
    "target_records",
    "targets",
]

Api = Literal["openai", "anthropic", "bedrock", "gemini"]
# The report's columns, in order: who stands in front of the same stub.
ROLES = ("nginx", "vllm-router", "portkey", "litellm", "gateway")
# The cadence stubs' pace: a first token after ttft, then one every itl.
CADENCE_TTFT_MS = 10.0
CADENCE_ITL_MS = 2.0


@dataclass(frozen=True, slots=True)
class Case:
    name: str  # the result rows' "size"
    label: str
    api: Api
    tokens: int
    stream: bool
    connections: int
    backend: str  # the stub's server name
    model: str  # routed by flatgate and LiteLLM to that stub
    floor: str  # the row straight to the stub
    columns: Mapping[str, str]  # role -> row
    extra: tuple[str, ...] = ()  # more rows measured, outside the columns
    fixed_rate: bool = False
    cadence: bool = False  # streamed by a stub in cadence mode, not in one burst

    @property
    def rows(self) -> tuple[str, ...]:
        return (self.floor, *self.columns.values(), *self.extra)

    @property
    def least_wrk_seconds(self) -> int:
        """wrk's shortest run for this case: three of its cadence streams (a
        stream cut off at the end of the run costs CPU wrk does not count)."""
        if not self.cadence:
            return 0
        return math.ceil(3 * (CADENCE_TTFT_MS + self.tokens * CADENCE_ITL_MS) / 1000)


def _case(
    api: Api,
    tokens: int,
    stream: bool,
    extra: tuple[str, ...] = (),
    *,
    name: str = "",
    cadence: bool = False,
) -> Case:
    long = "-512" if tokens == 512 else ""
    own = "-cadence" if cadence else ""  # the cadence case's stub, floor and nginx
    mode = "cadence" if cadence else "stream" if stream else "whole"
    prefix = "" if api == "openai" else "anthropic-"
    what = "Chat Completions" if api == "openai" else "Messages"
    answer = f"{tokens}-token whole answer"
    if stream:
        answer = (
            f"{tokens}-chunk stream, a token every {CADENCE_ITL_MS:g} ms"
            if cadence
            else f"{tokens}-chunk stream in one burst"
        )
    connections = 16 if stream else 32
    backend = "stub" if api == "openai" else "stub-anthropic"
    direct = "direct-openai" if api == "openai" else "direct-anthropic"
    nginx = "nginx-openai" if api == "openai" else "nginx-anthropic"
    columns = {
        "nginx": nginx + own + long,
        "portkey": "portkey" if api == "openai" else "portkey-anthropic",
        "gateway": "gateway" if api == "openai" else "gateway-anthropic",
    }
    if api == "openai" and tokens == 32:
        columns = {**columns, "litellm": "litellm"}
    return Case(
        name=name or f"{prefix}{mode}-{tokens}",
        label=f"{what}, 2 KB request, {answer}, c{connections}",
        api=api,
        tokens=tokens,
        stream=stream,
        connections=connections,
        backend=backend + own + long,
        model=f"bench-{api}{own}{long}",
        floor=direct + own + long,
        columns=columns,
        extra=extra,
        fixed_rate=bool(name),
        cadence=cadence,
    )


# The first is the workload's original size: every flatgate row, the fixed rate too.
_FIRST_EXTRA = (
    "edge",
    "gateway-responses",
    "gateway-gemini-api",
    "gateway-limits",
    "gateway-redis",
    "floor",
)


# The cloud cases' APIs, as the stub is spoken to: whole, streamed.
_CLOUD_APIS = {
    "bedrock": ("Bedrock Converse", "Bedrock Converse"),
    "gemini": ("Gemini API generateContent", "Gemini API streamGenerateContent"),
}


def _cloud_case(api: Api, stream: bool) -> Case:
    """Issue 39's (``bedrock``: Converse) and issue 40's (``gemini``): the
    gateway's backend of that protocol beside nginx in front of the same
    stub (see the module docstring)."""
    mode, tail = ("stream", "-stream") if stream else ("whole", "")
    answer = "32-chunk stream in one burst" if stream else "32-token whole answer"
    connections = 16 if stream else 32
    what = _CLOUD_APIS[api][stream]
    return Case(
        name=f"{api}-{mode}-32",
        label=f"{what}, 2 KB request, {answer}, c{connections}",
        api=api,
        tokens=32,
        stream=stream,
        connections=connections,
        backend=f"stub-{api}",
        model=f"bench-{api}",
        floor=f"direct-{api}{tail}",
        columns={"nginx": f"nginx-{api}{tail}", "gateway": f"gateway-{api}"},
    )


CASES: tuple[Case, ...] = (
    _case("openai", 32, False, _FIRST_EXTRA, name="2KB"),
    _case("openai", 512, False),
    _case("openai", 32, True),
    _case("openai", 512, True),
    _case("openai", 32, True, cadence=True),
    _case("openai", 512, True, cadence=True),
    _case("anthropic", 32, False),
    _case("anthropic", 512, False),
    _case("anthropic", 32, True),
    _case("anthropic", 512, True),
    _case("anthropic", 32, True, cadence=True),
    _case("anthropic", 512, True, cadence=True),
    _cloud_case("bedrock", False),
    _cloud_case("bedrock", True),
    _cloud_case("gemini", False),
    _cloud_case("gemini", True),
)


def router_row(backend: str) -> str:
    """The vllm-router row (and server) in front of the stub ``backend``: one
    router a stub, as vllm-router routes by worker, not by model."""
    return "vllm-router" + backend.removeprefix("stub")


def _with_router(case: Case) -> Case:
    """An OpenAI case with its vllm-router column (vllm-router has no Messages API)."""
    if case.api != "openai":
        return case
    return replace(case, columns={**case.columns, "vllm-router": router_row(case.backend)})


CASES = tuple(_with_router(c) for c in CASES)


def case_named(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def plans(
    cases: Sequence[Case], wrk_seconds: int | None = None, unloaded_seconds: float | None = None
) -> dict[str, Plan]:
    """Each case's measurement plan; ``wrk_seconds`` and ``unloaded_seconds``
    for the cases without the fixed rate (the new ones: shorter, so the run
    stays in its budget), wrk's at least ``Case.least_wrk_seconds``."""
    out = {}
    for c in cases:
        short = not c.fixed_rate
        wrk = max(wrk_seconds, c.least_wrk_seconds) if wrk_seconds else None
        out[c.name] = Plan(
            rows=c.rows,
            connections=c.connections,
            wrk_seconds=wrk if short else None,
            unloaded_seconds=unloaded_seconds if short else None,
            fixed_rate=c.fixed_rate,
            backend=c.backend,
            floor=c.floor,
            tokens=c.tokens,
            stream=c.stream,
        )
    return out


def result_row(rows: Sequence[Mapping[str, Any]], case: str, name: str) -> Mapping[str, Any] | None:
    """The measured row ``name`` of ``case`` (``None``: absent or skipped)."""
    for r in rows:
        if r.get("size") == case and r["row"] == name and r.get("status") == "ok":
            return r
    return None


def _figure(rows: Sequence[Mapping[str, Any]], case: Case, role: str, key: str) -> float | None:
    name = case.columns.get(role)
    r = None if name is None else result_row(rows, case.name, name)
    value = None if r is None else r.get(key)
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class Target:
    """One of the issue's targets: ``value`` (a ratio) against ``bound``."""

    name: str
    value: float | None
    bound: float
    at_most: bool = True
    inputs: dict[str, float | None] = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value <= self.bound if self.at_most else self.value >= self.bound


_CPU = "hop_cpu_us_per_req"
_PER_TOKEN = "hop_cpu_us_per_token"
_RPS = "throughput_rps"
_ADDED = "unloaded_added_p50_ms"
_ADDED_FIRST = "unloaded_added_first_byte_p50_ms"


def targets(rows: Sequence[Mapping[str, Any]], api: Api = "openai") -> list[Target]:
    """The issue's targets on the real path, from the result rows of one run,
    for the cases of ``api`` (``openai``: the issue's own; ``anthropic``: the
    same ratios through the anthropic adapter)."""
    prefix = "" if api == "openai" else "anthropic-"
    whole32 = case_named("2KB" if api == "openai" else "anthropic-whole-32")
    whole512 = case_named(f"{prefix}whole-512")
    stream32 = case_named(f"{prefix}stream-32")
    stream512 = case_named(f"{prefix}stream-512")

    def one(
        name: str,
        bound: float,
        a: tuple[Case, str, str],
        b: tuple[Case, str, str],
        at_most: bool = True,
    ) -> Target:
        x, y = _figure(rows, *a), _figure(rows, *b)
        value = ratio(x, y) if x is not None and y is not None and y > 0 else None
        inputs = {f"{a[0].name} {a[1]} {a[2]}": x, f"{b[0].name} {b[1]} {b[2]}": y}
        return Target(name, value, bound, at_most, inputs)

    g, p, n = "gateway", "portkey", "nginx"
    return [
        one(
            "512-token whole answer: gateway CPU per request / Portkey's",
            0.5,
            (whole512, g, _CPU),
            (whole512, p, _CPU),
        ),
        one(
            "512-token whole answer: gateway CPU per request / its own 32-token whole answer's",
            2.0,
            (whole512, g, _CPU),
            (whole32, g, _CPU),
        ),
        one(
            "32-token whole answer: gateway req/s / Portkey's",
            5.0,
            (whole32, g, _RPS),
            (whole32, p, _RPS),
            at_most=False,
        ),
        one(
            "32-token whole answer: gateway CPU per request / nginx's",
            10.0,
            (whole32, g, _CPU),
            (whole32, n, _CPU),
        ),
        one(
            "512-chunk stream: gateway CPU per token / Portkey's",
            0.35,
            (stream512, g, _PER_TOKEN),
            (stream512, p, _PER_TOKEN),
        ),
        one(
            "32-token whole answer: unloaded added p50 at c1, gateway / Portkey",
            0.4,
            (whole32, g, _ADDED),
            (whole32, p, _ADDED),
        ),
        one(
            "32-chunk stream: unloaded added p50 to the first byte at c1, gateway / Portkey",
            0.4,
            (stream32, g, _ADDED_FIRST),
            (stream32, p, _ADDED_FIRST),
        ),
    ]


def target_records(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every target of both adapters as the result document keeps them: name,
    adapter, ratio, bound, direction, met, and the figures they came from."""
    out = []
    for api in ("openai", "anthropic"):
        for t in targets(rows, api):
            record: dict[str, Any] = {"name": t.name, "adapter": api, "ratio": t.value}
            record |= {"bound": t.bound, "at_most": t.at_most, "met": t.met, "inputs": t.inputs}
            out.append(record)
    return out
