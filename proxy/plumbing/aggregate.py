"""Metrics across a server's worker processes: snapshots in one directory, merged at a scrape.

granian's workers are processes, each with its own ``Metrics`` registry. The
server's main process (``gateway.cli``) makes one directory per server and
names it in ``$FLATGATE_METRICS_DIR``. In it each worker keeps ``<pid>.snap``:
every sample its registry yields (custom collectors included), rewritten every
``SNAPSHOT_SECONDS`` and whenever it answers a scrape. The worker answering
``/metrics`` merges its own samples, taken then, with every live worker's
snapshot (``merge``: values summed per sample name and label set; a
``*_created`` sample keeps the earliest) and renders Prometheus text.

Another worker's figures are thus up to ``SNAPSHOT_SECONDS`` old. A worker
rewrites its snapshot before answering a scrape, so a counter never reads
lower than at an earlier scrape, whichever worker answers either; it does when
a worker dies, since its counts go with it (a partial counter reset).

A snapshot is written whole to ``.<pid>.tmp`` and renamed over ``<pid>.snap``
(``os.replace``): a reader sees one snapshot or the next, never a torn one. A
snapshot whose process is gone, or that does not decode, is left out, and a
gone process's files are removed. Bounded: a snapshot holds what its registry
holds (label values are bounded by configuration); a file over
``MAX_SNAPSHOT_BYTES`` is ignored.

Nothing here runs per request. ``WorkerDir`` is the only I/O; no timers
(``Metrics`` schedules the snapshots).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterable

import msgspec
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

__all__ = [
    "ENV_METRICS_DIR",
    "MAX_SNAPSHOT_BYTES",
    "SNAPSHOT_SECONDS",
    "Family",
    "Sample",
    "Snapshot",
    "WorkerDir",
    "merge",
    "render",
    "take",
]

log = logging.getLogger("flatgate.metrics")

ENV_METRICS_DIR = "FLATGATE_METRICS_DIR"
# How often each worker rewrites its snapshot: the most another worker's
# figures lag in a scrape.
SNAPSHOT_SECONDS = 1.0
MAX_SNAPSHOT_BYTES = 4 << 20
_SUFFIX = ".snap"
_TYPES = frozenset(
    ("counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset", "unknown")
)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*").fullmatch
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*").fullmatch
_FILE = re.compile(r"([1-9][0-9]{0,8})\.snap").fullmatch  # <pid>.snap


class Sample(msgspec.Struct, array_like=True, frozen=True):
    name: str
    labels: dict[str, str]
    value: float


class Family(msgspec.Struct, array_like=True, frozen=True):
    name: str
    type: str
    help: str
    unit: str
    samples: list[Sample]


class Snapshot(msgspec.Struct, array_like=True, frozen=True):
    """One worker's samples, by family, in its registry's order."""

    pid: int
    families: list[Family]


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Snapshot).decode


def take(collector: Collector, pid: int | None = None) -> Snapshot:
    """Every sample ``collector`` yields now (timestamps and exemplars dropped:
    flatgate sets none)."""
    families = [
        Family(
            m.name,
            m.type,
            m.documentation,
            m.unit,
            [Sample(s.name, s.labels, float(s.value)) for s in m.samples],
        )
        for m in collector.collect()
    ]
    return Snapshot(os.getpid() if pid is None else pid, families)


class _Series:
    __slots__ = ("labels", "name", "value")

    def __init__(self, name: str, labels: dict[str, str], value: float) -> None:
        self.name = name
        self.labels = labels
        self.value = value


class _Merged:
    __slots__ = ("created", "family", "series")

    def __init__(self, family: Family) -> None:
        self.family = family
        self.created = family.name + "_created"
        self.series: dict[tuple[str, tuple[tuple[str, str], ...]], _Series] = {}

    def add(self, samples: Iterable[Sample]) -> None:
        series = self.series
        for s in samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            known = series.get(key)
            if known is None:
                series[key] = _Series(s.name, dict(s.labels), s.value)
            elif s.name == self.created:
                known.value = min(known.value, s.value)
            else:
                known.value += s.value

    def metric(self) -> Metric:
        f = self.family
        out = Metric(f.name, f.help, f.type, f.unit)
        for s in self.series.values():
            out.add_sample(s.name, s.labels, s.value)
        return out


def merge(snapshots: Iterable[Snapshot]) -> list[Metric]:
    """The snapshots' families as one: each sample (name and label set) summed
    over the snapshots holding it, ``*_created`` the earliest. Every metric
    flatgate defines is a counter, a gauge or a histogram, for which the sum
    is the whole's figure. Families keep the order they are first seen in; a
    family whose type differs from its first sighting is left out."""
    merged: dict[str, _Merged] = {}
    for snapshot in snapshots:
        for family in snapshot.families:
            m = merged.get(family.name)
            if m is None:
                m = merged[family.name] = _Merged(family)
            elif m.family.type != family.type:
                continue
            m.add(family.samples)
    return [m.metric() for m in merged.values()]


class _Families:
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics


def render(metrics: list[Metric]) -> bytes:
    """Prometheus text format (what ``generate_latest`` writes for a registry)."""
    return generate_latest(_Families(metrics))


def _valid(snapshot: Snapshot) -> bool:
    """Names a renderer accepts, and samples inside their family."""
    for f in snapshot.families:
        if f.type not in _TYPES or not _NAME(f.name):
            return False
        if f.unit and not (_LABEL(f.unit) and f.name.endswith("_" + f.unit)):
            return False
        for s in f.samples:
            if not s.name.startswith(f.name) or not _NAME(s.name):
                return False
            if not all(_LABEL(k) for k in s.labels):
                return False
    return True


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (POSIX; elsewhere every pid is taken as alive)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: not a worker, but alive
        return True
    return True


class WorkerDir:
    """A server's snapshot directory, seen from the worker ``pid`` (default:
    this process, whatever it is when asked: made before a fork, it still
    names the child)."""

    def __init__(self, path: str, pid: int | None = None) -> None:
        self.path = path
        self._pid = pid

    @property
    def pid(self) -> int:
        return os.getpid() if self._pid is None else self._pid

    def write(self, snapshot: Snapshot) -> None:
        """Replace this worker's snapshot, atomically; ``OSError`` if it cannot."""
        pid = self.pid
        tmp = os.path.join(self.path, f".{pid}.tmp")
        with open(tmp, "wb") as f:
            f.write(_encode(snapshot))
        os.replace(tmp, os.path.join(self.path, f"{pid}{_SUFFIX}"))

    def others(self) -> list[Snapshot]:
        """The snapshots of the other live workers, by pid; a gone worker's
        files are removed, a file that does not decode is skipped."""
        try:
            names = os.listdir(self.path)
        except OSError as exc:
            log.warning("metrics: cannot list %s: %s", self.path, exc)
            return []
        pids = sorted(int(m[1]) for m in map(_FILE, names) if m is not None)
        found = []
        me = self.pid
        for pid in pids:
            if pid == me:
                continue
            path = os.path.join(self.path, f"{pid}{_SUFFIX}")
            if not _alive(pid):
                for gone in (path, os.path.join(self.path, f".{pid}.tmp")):
                    with contextlib.suppress(OSError):
                        os.remove(gone)
                continue
            snapshot = _read(path, pid)
            if snapshot is not None:
                found.append(snapshot)
        return found


def _read(path: str, pid: int) -> Snapshot | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError:  # removed since the listing: that worker is gone
        return None
    if len(data) > MAX_SNAPSHOT_BYTES:
        log.warning("metrics: %s is over %d bytes; left out", path, MAX_SNAPSHOT_BYTES)
        return None
    try:
        snapshot = _decode(data)
    except msgspec.DecodeError as exc:
        log.warning("metrics: %s is not a snapshot (%s); left out", path, exc)
        return None
    if snapshot.pid != pid or not _valid(snapshot):
        log.warning("metrics: %s is not a snapshot of worker %d; left out", path, pid)
        return None
    return snapshot
