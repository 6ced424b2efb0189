"""Prometheus metrics for flatgate's services (prometheus-client).

Owns metric names and the garbage-collector instrumentation. Each service
makes one ``Metrics`` with its prefix (``flatgate`` for the proxy,
``flatgate_edge`` for the edge) in its own registry, per worker process
(granian workers are processes); ``/metrics`` renders ``Metrics.render``.

Under the ``flatgate`` command, ``$FLATGATE_METRICS_DIR`` names a directory
the server's workers share: each worker's loop writes a snapshot of its
registry there every second (``install``), and ``render`` merges every live
worker's figures, with ``{prefix}_workers`` saying how many (see
``plumbing.aggregate``). Without it (one app in process, tests, embedding),
``render`` is this worker's registry alone. Updates on the hot path are
``plumbing.instruments``: plain numbers, no lock, turned into
prometheus-client's families at scrape time.

Token figures (``answers_of``): time to first token, time per output token
and output tokens, by a route's configured model name and a backend's name
(``Answers``; buckets ``TTFT_BUCKETS`` and ``TPOT_BUCKETS``, explained in
docs/operations.md).

GC: a ``gc.callbacks`` hook counts collections and sums their pause per
generation. It is installed once per process and shared by every registry.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flatgate.proxy.plumbing.admission import Admission
from flatgate.proxy.plumbing.aggregate import (
    ENV_METRICS_DIR,
    SNAPSHOT_SECONDS,
    Snapshot,
    WorkerDir,
    merge,
    render,
    take,
)
from flatgate.proxy.plumbing.instruments import Count, CountFamily, Hist, HistFamily, Level
from flatgate.proxy.wire.builders import BuilderPool

__all__ = [
    "CONTENT_TYPE",
    "ENV_METRICS_DIR",
    "TPOT_BUCKETS",
    "TTFT_BUCKETS",
    "Answers",
    "GcStats",
    "Metrics",
    "gc_stats",
]

log = logging.getLogger("flatgate.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# Time to first token: a local or cached model answers in milliseconds, a
# hosted one in 0.1 to a few seconds, a long prompt or a queue in a minute.
TTFT_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
# Time per output token: 1 ms (1,000 tokens/s) to 2.5 s, finest around
# 10-50 ms (100-20 tokens/s), where most models decode.
TPOT_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    1.0,
    2.5,
)


class GcStats:
    """Collections and pause seconds per generation, since the hook went in."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.pause_seconds = [0.0, 0.0, 0.0]
        self._start = 0.0

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            gen = info.get("generation", 2)
            self.collections[gen] += 1
            self.pause_seconds[gen] += time.perf_counter() - self._start


_GC: GcStats | None = None


def gc_stats() -> GcStats:
    """The process-wide GC hook (installed on first call)."""
    global _GC
    if _GC is None:
        _GC = GcStats()
        gc.callbacks.append(_GC.callback)
    return _GC


class _CallbackCollector(Collector):
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()


class _Children(dict[Any, Any]):
    """A metric's label children by label value (or tuple of values), made on
    first use; hits are a plain dict lookup."""

    def __init__(self, metric: Any) -> None:
        super().__init__()
        self._metric = metric

    def __missing__(self, key: Any) -> Any:
        labels = key if isinstance(key, tuple) else (key,)
        child = self[key] = self._metric.labels(*(str(v) for v in labels))
        return child


class Answers:
    """The token figures of one (route, backend): answers with a first token.

    ``observe`` takes an answer's time to first token and duration (seconds
    from the request's arrival) and its completion tokens (``None``: the
    backend sent no usage). Every answer counts in time to first token (a
    whole answer's first token came with the rest) and its tokens in the
    output tokens; only a streamed one with two tokens or more gives a time
    per output token: the time after the first, over the tokens after it
    (the proxy saw a whole answer's tokens at once, at no pace)."""

    __slots__ = ("_tokens", "_tpot", "_ttft")

    def __init__(self, ttft: Hist, tpot: Hist, tokens: Count) -> None:
        self._ttft = ttft
        self._tpot = tpot
        self._tokens = tokens

    def observe(self, ttft: float, duration: float, tokens: int | None, streamed: bool) -> None:
        self._ttft.observe(ttft)
        if tokens is not None and tokens > 0:
            self._tokens.inc(tokens)
            if streamed and tokens > 1:
                self._tpot.observe(max(duration - ttft, 0.0) / (tokens - 1))


class _AnswersByKey(dict[tuple[str, str], Answers]):
    """``Answers`` by (model, backend), made on first use."""

    def __init__(self, ttft: HistFamily, tpot: HistFamily, tokens: CountFamily) -> None:
        super().__init__()
        self._families = (ttft, tpot, tokens)

    def __missing__(self, key: tuple[str, str]) -> Answers:
        ttft, tpot, tokens = self._families
        made = self[key] = Answers(ttft.labels(*key), tpot.labels(*key), tokens.labels(*key))
        return made


class Metrics:
    """The metrics one service exposes; cheap to update on the hot path.

    ``shared_dir`` is the directory the server's workers share their figures
    through (default: ``$FLATGATE_METRICS_DIR``; none: this worker's alone)."""

    def __init__(
        self,
        prefix: str,
        pool: BuilderPool | None = None,
        *,
        shared_dir: str | None = None,
        snapshot_seconds: float = SNAPSHOT_SECONDS,
    ) -> None:
        self.prefix = prefix
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = CountFamily(
            f"{prefix}_requests",
            "Requests answered, by route and HTTP status.",
            ["route", "status"],
        )
        self.upstream_ttfb = HistFamily(
            f"{prefix}_upstream_ttfb_seconds",
            "Time from sending a request upstream to its response head.",
            _LATENCY_BUCKETS,
            ["backend"],
        )
        self.upstream_duration = HistFamily(
            f"{prefix}_upstream_duration_seconds",
            "Time from sending a request upstream to the end of its response.",
            _LATENCY_BUCKETS,
            ["backend"],
        )
        self.upstream_failures = CountFamily(
            f"{prefix}_upstream_failures",
            "Upstream attempts that failed before the first byte, by backend and kind.",
            ["backend", "kind"],
        )
        self.active_streams = Level(f"{prefix}_active_streams", "Responses being streamed now.")
        self.relayed_bytes = CountFamily(
            f"{prefix}_relayed_bytes", "Response bytes relayed to callers."
        )
        self.usage_unknown = CountFamily(
            f"{prefix}_usage_unknown",
            "Completions answered without usage, because the backend sent none.",
        )
        # Label values: a configured route's model name and a backend's name,
        # never the caller's model name (bounded by the configuration).
        self.time_to_first_token = HistFamily(
            f"{prefix}_time_to_first_token_seconds",
            "Time from a request's arrival to its answer's first token, by route and backend.",
            TTFT_BUCKETS,
            ["model", "backend"],
        )
        self.time_per_output_token = HistFamily(
            f"{prefix}_time_per_output_token_seconds",
            "A stream's time after its first token over the tokens after it, by route and backend.",
            TPOT_BUCKETS,
            ["model", "backend"],
        )
        self.output_tokens = CountFamily(
            f"{prefix}_output_tokens",
            "Completion tokens answered (as the backend's usage says), by route and backend.",
            ["model", "backend"],
        )
        for instrument in (
            self.requests,
            self.upstream_ttfb,
            self.upstream_duration,
            self.upstream_failures,
            self.active_streams,
            self.relayed_bytes,
            self.usage_unknown,
            self.time_to_first_token,
            self.time_per_output_token,
            self.output_tokens,
        ):
            r.register(_CallbackCollector(instrument.collect))
        self._pool = pool
        self._transport: Callable[[], Any] | None = None
        self._admission: Admission | None = None
        self._gc = gc_stats()
        r.register(_CallbackCollector(self._collect_runtime))
        r.register(_CallbackCollector(self._collect_limits))
        # Label children by the caller's own key (a status as an int): one
        # dict lookup per update.
        self._requests = _Children(self.requests)
        self._ttfb = _Children(self.upstream_ttfb)
        self._duration = _Children(self.upstream_duration)
        self._failures = _Children(self.upstream_failures)
        self._answers = _AnswersByKey(
            self.time_to_first_token, self.time_per_output_token, self.output_tokens
        )
        path = os.environ.get(ENV_METRICS_DIR, "") if shared_dir is None else shared_dir
        self._shared = WorkerDir(path) if path else None
        self._snapshot_seconds = snapshot_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.Handle | None = None
        self._failing = False

    def upstream_ttfb_of(self, backend: str) -> Any:
        return self._ttfb[backend]

    def upstream_duration_of(self, backend: str) -> Any:
        return self._duration[backend]

    def upstream_failure_of(self, backend: str, kind: str) -> Any:
        return self._failures[backend, kind]

    def answers_of(self, model: str, backend: str) -> Answers:
        """The token figures of route ``model`` (its configured name) and ``backend``."""
        return self._answers[model, backend]

    def count(self, route: str, status: int) -> None:
        self._requests[route, status].inc()

    def histogram(self, name: str, doc: str, bounds: Iterable[float]) -> HistFamily:
        """An unlabelled histogram shown with these figures (``observe`` to update)."""
        h = HistFamily(name, doc, tuple(bounds))
        self.registry.register(_CallbackCollector(h.collect))
        return h

    def include(self, other: Metrics) -> None:
        """Show ``other``'s figures with these (one registry, one ``/metrics``,
        one snapshot): the one-process gateway's proxy beside its edge."""
        self.registry.register(_CallbackCollector(other.registry.collect))

    def collect_from(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Show the families ``collect()`` yields at each scrape with these."""
        self.registry.register(_CallbackCollector(collect))

    def watch_transport(self, transport: Callable[[], Any]) -> None:
        """Report the upstream pool: ``transport()`` is the worker's transport
        (``None`` until made), whose ``stats()`` is read at each scrape."""
        self._transport = transport

    def watch_admission(self, admission: Admission) -> None:
        """Report admission control: requests in flight, body bytes held, refusals."""
        self._admission = admission

    def _collect_runtime(self) -> Iterable[Metric]:
        p = self.prefix
        gc_count = CounterMetricFamily(
            f"{p}_gc_collections", "Python GC collections, by generation.", labels=["generation"]
        )
        gc_pause = CounterMetricFamily(
            f"{p}_gc_pause_seconds", "Python GC pause time, by generation.", labels=["generation"]
        )
        for gen in range(3):
            gc_count.add_metric([str(gen)], self._gc.collections[gen])
            gc_pause.add_metric([str(gen)], self._gc.pause_seconds[gen])
        yield gc_count
        yield gc_pause
        if self._pool is not None:
            s = self._pool.stats()
            hits = CounterMetricFamily(
                f"{p}_builder_pool_hits", "Builder leases served from the pool."
            )
            hits.add_metric([], s.hits)
            misses = CounterMetricFamily(
                f"{p}_builder_pool_misses", "Builder leases that made a new builder."
            )
            misses.add_metric([], s.misses)
            idle = GaugeMetricFamily(f"{p}_builder_pool_idle", "Builders idle in the pool.")
            idle.add_metric([], s.idle)
            leased = GaugeMetricFamily(f"{p}_builder_pool_leased", "Builders out on lease.")
            leased.add_metric([], self._pool.leased)
            yield hits
            yield misses
            yield idle
            yield leased

    def _collect_limits(self) -> Iterable[Metric]:
        p = self.prefix
        transport = None if self._transport is None else self._transport()
        if transport is not None:
            s = transport.stats()
            for key, help_ in (
                ("open", "Upstream connections open (in use or idle)."),
                ("idle", "Upstream connections idle in the pool."),
                ("waiting", "Requests waiting now for a pooled upstream connection."),
            ):
                g = GaugeMetricFamily(f"{p}_upstream_pool_{key}", help_)
                g.add_metric([], s.get(key, 0))
                yield g
            for key, help_ in (
                ("waits", "Requests that had to wait for a pooled upstream connection."),
                ("timeouts", "Requests that found no pooled connection within pool_timeout."),
            ):
                c = CounterMetricFamily(f"{p}_upstream_pool_{key}", help_)
                c.add_metric([], s.get("pool_timeouts" if key == "timeouts" else key, 0))
                yield c
        a = self._admission
        if a is not None:
            g = GaugeMetricFamily(f"{p}_in_flight", "Requests in flight.")
            g.add_metric([], a.in_flight)
            yield g
            g = GaugeMetricFamily(f"{p}_buffered_body_bytes", "Request-body bytes held.")
            g.add_metric([], a.held)
            yield g
            c = CounterMetricFamily(
                f"{p}_admission_refused", "Requests refused at max_in_flight or max_buffered_bytes."
            )
            c.add_metric([], a.refused)
            yield c

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Share this worker's figures with the others: a snapshot at the
        loop's next turn, then every ``snapshot_seconds`` (once per worker;
        nothing without a shared directory)."""
        if self._shared is None or self._loop is not None:
            return
        self._loop = loop
        self._timer = loop.call_soon(self._tick)

    def stop(self) -> None:
        """No more snapshots (the last one stays until its worker is gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        assert self._loop is not None
        self._timer = self._loop.call_later(self._snapshot_seconds, self._tick)
        try:
            self._share()
        except Exception:  # a collector failed: /metrics says so; not logged every second
            self._warn_once("metrics: cannot take this worker's figures", exc_info=True)

    def _share(self) -> Snapshot:
        """This worker's samples now, also written for the other workers (a
        failure to write is logged, once until a write succeeds)."""
        assert self._shared is not None
        snapshot = take(self.registry, self._shared.pid)
        try:
            self._shared.write(snapshot)
        except OSError as exc:
            self._warn_once(f"metrics: cannot share this worker's figures: {exc}")
        else:
            self._failing = False
        return snapshot

    def _warn_once(self, message: str, *, exc_info: bool = False) -> None:
        if not self._failing:
            self._failing = True
            log.warning(message, exc_info=exc_info)

    def render(self) -> bytes:
        """Prometheus text: every worker's figures, summed, with a shared
        directory (another worker's up to a snapshot interval old); else this
        worker's."""
        if self._shared is None:
            return generate_latest(self.registry)
        # Written before it is shown: a later scrape, answered by any worker,
        # reads this worker's counters at least as high as this one does.
        snapshots = [self._share(), *self._shared.others()]
        workers = GaugeMetricFamily(
            f"{self.prefix}_workers", "Worker processes whose figures this scrape sums."
        )
        workers.add_metric([], len(snapshots))
        return render([*merge(snapshots), workers])
