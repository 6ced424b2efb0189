"""Counters, gauges and histograms that cost an attribute add on the hot path.

prometheus-client's own metric objects take a lock on every ``inc`` and every
``observe`` (two for a histogram): about half a microsecond each, and a
request touched a dozen of them. A granian worker runs its app on one event
loop thread, and scrapes run on that thread too, so these keep plain numbers
and no lock; ``collect`` turns them into prometheus-client's metric families
at scrape time, so exposition (and ``plumbing.aggregate``'s snapshots) are
unchanged. Not for use from several threads.

A labelled family hands out one child per label values (``labels``), made on
first use and kept: label values must come from configuration (routes,
backends, statuses), never from callers.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

__all__ = ["Count", "CountFamily", "Hist", "HistFamily", "Level"]


class Count:
    """A counter's value."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class Level:
    """A gauge's value."""

    __slots__ = ("doc", "name", "value")

    def __init__(self, name: str, doc: str) -> None:
        self.name = name
        self.doc = doc
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def collect(self) -> Iterable[Metric]:
        g = GaugeMetricFamily(self.name, self.doc)
        g.add_metric([], self.value)
        yield g


class CountFamily:
    """A counter, labelled or not (no labels: ``inc`` on the family itself)."""

    __slots__ = ("_children", "_one", "doc", "labelnames", "name")

    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], Count] = {}
        self._one = self.labels() if not self.labelnames else None

    def labels(self, *values: str) -> Count:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = Count()
        return child

    def inc(self, amount: float = 1.0) -> None:
        assert self._one is not None, "a labelled counter: use labels(...)"
        self._one.value += amount

    def collect(self) -> Iterable[Metric]:
        c = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, child in self._children.items():
            c.add_metric(list(values), child.value)
        yield c


class Hist:
    """One histogram's bucket counts (non-cumulative) and sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value


class HistFamily:
    """A histogram, labelled or not, with fixed bucket bounds."""

    __slots__ = ("_children", "bounds", "doc", "labelnames", "name")

    def __init__(
        self, name: str, doc: str, bounds: Sequence[float], labelnames: Sequence[str] = ()
    ) -> None:
        self.name = name
        self.doc = doc
        self.bounds = tuple(sorted(bounds))
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], Hist] = {}

    def labels(self, *values: str) -> Hist:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = Hist(self.bounds)
        return child

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def collect(self) -> Iterable[Metric]:
        h = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, child in self._children.items():
            total = 0
            buckets = []
            for bound, count in zip((*self.bounds, float("inf")), child.counts, strict=True):
                total += count
                buckets.append((_le(bound), total))
            h.add_metric(list(values), buckets, child.sum)
        yield h


def _le(bound: float) -> str:
    """A bucket bound as prometheus-client writes it."""
    if bound == float("inf"):
        return "+Inf"
    return repr(float(bound))
