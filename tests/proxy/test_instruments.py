"""The lock-free instruments render exactly what prometheus-client's own do."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from flatgate.proxy.plumbing.instruments import CountFamily, HistFamily, Level

BOUNDS = (0.001, 0.01, 0.1, 1.0)


class _Ours(Collector):
    def __init__(self, *instruments: CountFamily | HistFamily | Level) -> None:
        self._instruments = instruments

    def collect(self) -> Iterable[Metric]:
        for i in self._instruments:
            yield from i.collect()


def _lines(text: bytes) -> list[str]:
    # prometheus-client's own objects add *_created samples; ours do not.
    return [line for line in text.decode().splitlines() if "_created" not in line]


def test_the_same_exposition_as_prometheus_client() -> None:
    theirs = CollectorRegistry()
    c = Counter("t_requests", "Requests.", ["route", "status"], registry=theirs)
    h = Histogram("t_seconds", "Seconds.", ["backend"], buckets=BOUNDS, registry=theirs)
    g = Gauge("t_active", "Active.", registry=theirs)
    u = Counter("t_bytes", "Bytes.", registry=theirs)
    oc = CountFamily("t_requests", "Requests.", ["route", "status"])
    oh = HistFamily("t_seconds", "Seconds.", BOUNDS, ["backend"])
    og = Level("t_active", "Active.")
    ou = CountFamily("t_bytes", "Bytes.")
    for value in (0.0005, 0.001, 0.002, 0.5, 3.0, 0.01):
        h.labels("b1").observe(value)
        oh.labels("b1").observe(value)
    h.labels("b2").observe(0.2)
    oh.labels("b2").observe(0.2)
    for route, status in (("r", "200"), ("r", "200"), ("r", "502"), ("*", "404")):
        c.labels(route, status).inc()
        oc.labels(route, status).inc()
    g.inc()
    g.inc()
    g.dec()
    og.inc()
    og.inc()
    og.dec()
    u.inc(123)
    ou.inc(123)
    ours = CollectorRegistry()
    ours.register(_Ours(oc, oh, og, ou))
    assert _lines(generate_latest(ours)) == _lines(generate_latest(theirs))
