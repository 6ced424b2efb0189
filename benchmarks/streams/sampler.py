"""The streams bench's readings of the processes, every second and at the window's ends.

Owns ``Sampler``: a thread that, at ``t0 + k * every`` and at the two ends of
the measurement window, records the client's running counts (tokens and
streams so far) and, for every charged server (its process tree, whose pids
are listed once, when the row is up), CPU seconds (``utime + stime`` from
``/proc/<pid>/stat``), the resident set (``VmRSS``) and, from a flatgate
server's ``/metrics``, its GC collections and pause. The client's own CPU is
its event loop's thread (``/proc/self/task/<tid>/stat``), so the sampler's
reads are not charged to it. Reads only; loopback only.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from benchmarks.servers import CLK_TCK, HOST, Server, tree_pids

__all__ = ["GC", "Proc", "Sample", "Sampler", "parse_gc_max", "thread_cpu_seconds"]

_GC_LINE = re.compile(
    r'^(?P<prefix>\w+)_gc_(?P<what>collections|pause_seconds)_total\{generation="(?P<gen>\d)"\}'
    r"\s+(?P<value>\S+)",
    re.MULTILINE,
)
_SCRAPE_TIMEOUT = 3.0


@dataclass(frozen=True, slots=True)
class GC:
    collections: float  # every generation
    pause_seconds: float


def parse_gc_max(text: str) -> GC | None:
    """GC counters from a ``/metrics`` page, all generations summed; a page
    with several prefixes (the one-process gateway's edge and proxy metrics
    both count the one process) gives the largest, not their sum."""
    by_prefix: dict[str, list[float]] = {}
    for m in _GC_LINE.finditer(text):
        slot = by_prefix.setdefault(m["prefix"], [0.0, 0.0])
        slot[0 if m["what"] == "collections" else 1] += float(m["value"])
    if not by_prefix:
        return None
    return GC(max(v[0] for v in by_prefix.values()), max(v[1] for v in by_prefix.values()))


def _ticks(path: str) -> int:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12]) if len(fields) > 12 else 0


def thread_cpu_seconds(tid: int) -> float:
    """CPU seconds of one thread of this process."""
    return _ticks(f"/proc/self/task/{tid}/stat") / CLK_TCK


def _status_kib(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Proc:
    """One charged server: its process tree as listed once, and a keep-alive
    connection to its ``/metrics`` made before the load (``refresh``).

    granian serves at most ``backpressure`` connections of a worker at once
    (1,024 unless told otherwise) and a keep-alive connection keeps its turn:
    a scrape on a new connection may wait behind the client's for good.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.name = server.name
        self.pids: list[int] = []
        self._conn: http.client.HTTPConnection | None = None

    def refresh(self) -> None:
        self.pids = tree_pids(self.server.proc.pid)
        if self.server.has_metrics:
            self.gc()  # opens the connection, and takes the first reading

    def cpu_seconds(self) -> float:
        return sum(_ticks(f"/proc/{pid}/stat") for pid in self.pids) / CLK_TCK

    def rss_kib(self) -> int:
        return sum(_status_kib(pid, "VmRSS:") for pid in self.pids)

    def peak_rss_kib(self) -> int:
        """The largest ``VmHWM`` in the tree: the worker's peak."""
        return max((_status_kib(pid, "VmHWM:") for pid in self.pids), default=0)

    def gc(self) -> GC | None:
        """The GC counters from ``/metrics``; ``None`` when it does not answer
        (the connection is made again for the next reading)."""
        if not self.server.has_metrics:
            return None
        if self._conn is None:
            self._conn = http.client.HTTPConnection(HOST, self.server.port, timeout=_SCRAPE_TIMEOUT)
        try:
            self._conn.request("GET", "/metrics")
            r = self._conn.getresponse()
            text = r.read().decode("utf-8", "replace")
            return parse_gc_max(text) if r.status == 200 else None
        except (OSError, http.client.HTTPException):
            self.close()
            return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # seconds since the client began
    mark: str  # "" (a tick), "from" or "to": the window's ends, "end"
    tokens: int  # the client's counts so far
    finished: int
    client_cpu: float
    cpu: dict[str, float]
    rss_kib: dict[str, int]
    gc: dict[str, GC | None]


class Sampler:
    """Samples on a thread of its own from ``start(t0)`` until ``stop``."""

    def __init__(
        self,
        procs: Mapping[str, Proc],
        counts: Callable[[], tuple[int, int]],
        *,
        marks: Mapping[str, float],
        every: float = 1.0,
    ) -> None:
        self.procs = procs
        self.counts = counts
        self.marks = dict(marks)  # name -> seconds after t0
        self.every = every
        self.samples: list[Sample] = []
        self.failed = 0
        self.t0 = 0.0
        self._tid = threading.get_native_id()  # the caller's thread: the client's loop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self, mark: str = "") -> Sample:
        tokens, finished = self.counts()
        t = time.perf_counter() - self.t0
        s = Sample(
            t=round(t, 3),
            mark=mark,
            tokens=tokens,
            finished=finished,
            client_cpu=thread_cpu_seconds(self._tid),
            cpu={n: p.cpu_seconds() for n, p in self.procs.items()},
            rss_kib={n: p.rss_kib() for n, p in self.procs.items()},
            gc={n: p.gc() for n, p in self.procs.items()},
        )
        self.samples.append(s)
        return s

    def _loop(self) -> None:
        pending = sorted(self.marks.items(), key=lambda kv: kv[1])
        k = 0
        while not self._stop.is_set():
            tick = k * self.every
            if pending and pending[0][1] <= tick:
                mark, at = pending.pop(0)
            else:
                mark, at = "", tick
                k += 1
            wait = self.t0 + at - time.perf_counter()
            if wait > 0 and self._stop.wait(wait):
                return
            try:
                self.sample(mark)
            except Exception:  # a missed sample must not end the sampling
                self.failed += 1

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread = threading.Thread(target=self._loop, name="streams-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> Sample:
        """Stop sampling; one last sample, marked ``end``; the scrapes' connections closed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=len(self.procs) * _SCRAPE_TIMEOUT + 5)
        try:
            return self.sample("end")
        finally:
            for p in self.procs.values():
                p.close()

    def at(self, mark: str) -> Sample | None:
        return next((s for s in self.samples if s.mark == mark), None)
