"""Which step of a request each function's time belongs to, from a deterministic profile.

Owns ``STEPS`` (the steps, in a request's order), ``MODULE_STEPS`` (each
module on the measured paths, by dotted name or package prefix, to its
step), ``FUNCTION_STEPS`` (the few functions of a module that holds two
steps), ``profile`` (``cProfile`` over a loop of requests) and ``shares``
(each step's % of the profiled time).

A function's own time (``tottime``) goes to its module's step. Functions of
no step of their own (C builtins, generated code such as a dataclass's
``__init__``, and the modules set to ``CALLER``: the wire layer's shared
bounds-checked primitives, the chunk frames' reader, the extras' splice)
are charged to the steps of their callers, in proportion to the time each
caller spent in them.
Anything unmapped is ``other``. Beside the issue's steps there are three of
the bench's own: ``handler`` (the request's own flow: the edge's and the
proxy's apps, the drain, the serve layer), ``event loop`` (asyncio's timers
and tasks) and ``harness`` (the bench's fake exchange and transport, and the
floors' code), so that no product step is charged for them.

A profile's hooks slow Python calls more than C, so the shares are of the
profiled time, not of the CPU figure beside them: read them as where to look.
Pure: no I/O.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "CALLER",
    "FUNCTION_STEPS",
    "MODULE_STEPS",
    "STEPS",
    "module_of",
    "profile",
    "shares",
    "step_of",
]

STEPS = (
    "decode",
    "write",
    "route",
    "admission",
    "limits",
    "adapter encode",
    "transport",
    "parse",
    "frame",
    "render",
    "log",
    "metrics",
    "spans",
    "handler",
    "event loop",
    "harness",
    "other",
)
# Charged to the callers' steps.
CALLER = ""
MODULE_STEPS: dict[str, str] = {
    # The client's JSON decoded and checked.
    "flatgate.proxy.apis": "decode",
    "flatgate.edge_translator.openai.endpoint": "decode",
    "msgspec": "decode",
    # The CompletionRequest written.
    "flatgate.edge_translator.openai.translate": "write",
    "flatgate.edge_translator.openai.mapping": "write",
    "flatgate.proxy.wire.request.writer": "write",
    "flatgate.proxy.wire.request.build": "write",
    "flatgate.proxy.wire.request.content": "write",
    "flatgate.proxy.wire.builders": "write",
    "flatgate.proxy.wire.layout": "write",
    "flatgate.edge_translator.ids": "write",
    "flatbuffers": "write",
    # The route: path, model, route table, backend.
    "flatgate.proxy.wire.request.route": "route",
    "flatgate.proxy.wire.request.tables": "route",
    "flatgate.proxy.service.routes": "route",
    "flatgate.proxy.service.balancer": "route",
    "flatgate.edge_translator.routes": "route",
    "flatgate.edge_translator.catalog": "route",
    # Who may come in, and with how many bytes.
    "flatgate.proxy.plumbing.admission": "admission",
    "flatgate.proxy.plumbing.body": "admission",
    "flatgate.proxy.plumbing.intake": "admission",
    "flatgate.proxy.plumbing.auth": "admission",
    "flatgate.proxy.plumbing.validation": "admission",
    "flatgate.proxy.service.caller": "admission",
    "flatgate.proxy.document.callers": "admission",
    "flatgate.edge_translator.identity": "admission",
    "flatgate.edge_translator.keys": "admission",
    "flatgate.edge_translator.bounds": "admission",
    "flatgate.proxy.wire.digits": "admission",
    # Tenants' limits and the router's shared counts.
    "flatgate.proxy.limits": "limits",
    "flatgate.proxy.service.quota": "limits",
    "flatgate.edge_translator.tenancy": "limits",
    # The backend's request made: the buffer verified and read, its JSON written.
    "flatgate.proxy.backends.openai.adapter": "adapter encode",
    "flatgate.proxy.backends.openai.parts": "adapter encode",
    "flatgate.proxy.backends.openai.config": "adapter encode",
    "flatgate.proxy.backends.fbs.adapter": "adapter encode",
    "flatgate.proxy.backends.base": "adapter encode",
    "flatgate.proxy.backends.registry": "adapter encode",
    "flatgate.proxy.wire.request.decode": "adapter encode",
    "flatgate.proxy.wire.request.verify": "adapter encode",
    "flatgate.proxy.wire.request.estimate": "adapter encode",
    "flatgate.proxy.wire.parts": "adapter encode",
    "flatgate.proxy.wire.media": "adapter encode",
    # The exchange with the backend, and the router's in-process link.
    "flatgate.proxy.service.dispatch": "transport",
    "flatgate.proxy.service.inprocess": "transport",
    "flatgate.proxy.transport": "transport",
    "flatgate.edge_translator.proxy_link": "transport",
    # The backend's answer parsed.
    "flatgate.proxy.backends.json_api": "parse",
    "flatgate.proxy.backends.sse": "parse",
    "flatgate.proxy.backends.openai.stream": "parse",
    "flatgate.proxy.backends.openai.whole": "parse",
    # Chunk frames made, cut and relayed.
    "flatgate.proxy.wire.chunk.writer": "frame",
    "flatgate.proxy.wire.chunk.frames": "frame",
    "flatgate.proxy.wire.chunk.stock": "frame",
    "flatgate.proxy.service.relay": "frame",
    # The frames rendered in the client's API (the frames' reader is charged
    # to its callers: the edge's renderers, the proxy's final-chunk read).
    "flatgate.edge_translator.openai.render": "render",
    "flatgate.edge_translator.answer": "render",
    "flatgate.edge_translator.client_api": "render",
    "flatgate.proxy.plumbing.aggregate": "render",
    # The access log, the metrics, the spans.
    "flatgate.proxy.plumbing.accesslog": "log",
    "flatgate.proxy.plumbing.metrics": "metrics",
    "flatgate.proxy.plumbing.instruments": "metrics",
    "prometheus_client": "metrics",
    "flatgate.proxy.plumbing.telemetry": "spans",
    "opentelemetry": "spans",
    # The request's own flow.
    "flatgate.edge_translator.app": "handler",
    "flatgate.edge_translator.flow": "handler",
    "flatgate.edge_translator.errors": "handler",
    "flatgate.proxy.service.app": "handler",
    "flatgate.proxy.service.errors": "handler",
    "flatgate.proxy.plumbing.serve": "handler",
    "flatgate.proxy.plumbing.head": "handler",
    "flatgate.proxy.plumbing.drain": "handler",
    "flatgate.proxy.errors": "handler",
    "asyncio": "event loop",
    "_weakrefset": "event loop",
    "contextvars": "event loop",
    "benchmarks": "harness",
    # Shared primitives: charged to whoever called them.
    "flatgate.proxy.wire.buffer": CALLER,
    "flatgate.proxy.wire.chunk.reader": CALLER,
    "flatgate.proxy.backends.extras": CALLER,
    "enum": CALLER,
    "contextlib": CALLER,
    "typing": CALLER,
    "functools": CALLER,
    "abc": CALLER,
}
# A module holding two steps: these of its functions are the other one.
FUNCTION_STEPS: dict[tuple[str, str], str] = {
    ("flatgate.proxy.backends.json_api", "prepare"): "adapter encode",
    ("flatgate.proxy.backends.json_api", "headers"): "adapter encode",
    ("flatgate.proxy.backends.json_api", "omitted"): "adapter encode",
    # The proxy app's own steps, in its module.
    ("flatgate.proxy.service.app", "head"): "admission",
    ("flatgate.proxy.service.app", "admit"): "route",
    ("flatgate.proxy.service.app", "target_of"): "route",
    ("flatgate.proxy.service.app", "target_for"): "route",
    ("flatgate.proxy.service.app", "_read_final"): "log",
    # The edge's reading of the router's frames (``Frames``) is for its renderer.
    ("flatgate.edge_translator.proxy_link", "__init__"): "render",
    ("flatgate.edge_translator.proxy_link", "next"): "render",
    ("flatgate.edge_translator.proxy_link", "<listcomp>"): "render",
}

_ROOT = Path(__file__).resolve().parents[1]
_FLATGATE = ("proxy", "edge_translator", "generated")
_STDLIB = Path(sys.base_prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}")

Func = tuple[str, int, str]


def module_of(filename: str) -> str | None:
    """The dotted module of a profiled file (flatgate's under ``flatgate.``);
    ``None`` for builtins and generated code."""
    if filename.startswith(("~", "<")):
        return None
    path = Path(filename)
    parts: tuple[str, ...]
    if "site-packages" in path.parts:
        parts = path.parts[path.parts.index("site-packages") + 1 :]
    elif path.is_relative_to(_ROOT):
        parts = path.relative_to(_ROOT).parts
        if parts and parts[0] in _FLATGATE:
            parts = ("flatgate", *parts)
    elif path.is_relative_to(_STDLIB):
        parts = path.relative_to(_STDLIB).parts
    else:
        return filename
    dotted = ".".join(parts)
    return dotted.removesuffix(".py").removesuffix(".__init__")


def step_of(module: str | None, function: str = "") -> str | None:
    """The step of a function of ``module``: ``CALLER`` for one charged to its
    callers (and for builtins, ``None`` module), ``other`` when unmapped."""
    if module is None:
        return CALLER
    step = FUNCTION_STEPS.get((module, function))
    if step is not None:
        return step
    name = module
    while True:
        step = MODULE_STEPS.get(name)
        if step is not None:
            return step
        if "." not in name:
            return "other"
        name = name.rpartition(".")[0]


def profile(serve: Callable[[], object], requests: int) -> pstats.Stats:
    """``cProfile`` over ``requests`` calls of ``serve``."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(requests):
        serve()
    prof.disable()
    return pstats.Stats(prof)


def shares(stats: pstats.Stats) -> dict[str, float]:
    """Each step's % of the profiled time (``STEPS``' order, every step)."""
    table: dict[Func, Any] = stats.stats  # type: ignore[attr-defined]
    memo: dict[Func, dict[str, float]] = {}

    def spread(func: Func, seen: frozenset[Func]) -> dict[str, float]:
        """Where ``func``'s time goes: one step, or its callers' mix."""
        if func in memo:
            return memo[func]
        step = step_of(module_of(func[0]), func[2])
        if step != CALLER:
            out = {step or "other": 1.0}
        else:
            callers = table[func][4] if func in table else {}
            weights = {c: float(edge[3]) for c, edge in callers.items() if c not in seen}
            total = sum(weights.values())
            if total <= 0:
                out = {"other": 1.0}
            else:
                out = {}
                for caller, weight in weights.items():
                    for s, part in spread(caller, seen | {func}).items():
                        out[s] = out.get(s, 0.0) + part * weight / total
        memo[func] = out
        return out

    spent = dict.fromkeys(STEPS, 0.0)
    for func, (_, _, own, _, _) in table.items():
        for step, part in spread(func, frozenset()).items():
            spent[step] += own * part
    whole = sum(spent.values()) or 1.0
    return {step: 100.0 * seconds / whole for step, seconds in spent.items()}
