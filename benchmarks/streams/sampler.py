"""The streams bench's readings of the processes, every second and at the window's ends.

Owns ``Sampler``: a ``benchmarks.harness.sampling.Ticker`` that, at ``t0 + k
* every`` and at the two ends of the measurement window, records the
client's running counts (tokens and streams so far) and, for every charged
server (``Proc``: its process tree, whose pids are listed once, when the row
is up), CPU seconds, the resident set and, from a flatgate server's
``/metrics``, its GC collections and pause. The client's own CPU is its event
loop's thread, so the sampler's reads are not charged to it. Reads only;
loopback only.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from benchmarks.harness.sampling import (
    GcSample,
    Ticker,
    cpu_seconds,
    parse_gc,
    rss_kib,
    thread_cpu_seconds,
    tree_pids,
)
from benchmarks.harness.servers import HOST, Server

__all__ = ["Proc", "Sample", "Sampler"]

_SCRAPE_TIMEOUT = 3.0


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
        if self.server.metrics:
            self.gc()  # opens the connection, and takes the first reading

    def gc(self) -> GcSample | None:
        """The GC counters from ``/metrics``; ``None`` when it does not answer
        (the connection is made again for the next reading)."""
        if not self.server.metrics:
            return None
        if self._conn is None:
            self._conn = http.client.HTTPConnection(HOST, self.server.port, timeout=_SCRAPE_TIMEOUT)
        try:
            self._conn.request("GET", "/metrics")
            r = self._conn.getresponse()
            text = r.read().decode("utf-8", "replace")
            return parse_gc(text) if r.status == 200 else None
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
    gc: dict[str, GcSample | None]


class Sampler:
    """Samples on a thread of its own from ``start(t0)`` (the client's
    ``perf_counter``) until ``stop``; made on the client's thread."""

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
        self.samples: list[Sample] = []
        self._tid = threading.get_native_id()  # the caller's thread: the client's loop
        self._ticker = Ticker(
            self.sample, every, marks=marks, clock=time.perf_counter, name="streams-sampler"
        )

    @property
    def failed(self) -> int:
        return self._ticker.failed

    def sample(self, mark: str = "") -> Sample:
        tokens, finished = self.counts()
        s = Sample(
            t=round(time.perf_counter() - self._ticker.t0, 3),
            mark=mark,
            tokens=tokens,
            finished=finished,
            client_cpu=thread_cpu_seconds(self._tid),
            cpu={n: cpu_seconds(p.pids) for n, p in self.procs.items()},
            rss_kib={n: rss_kib(p.pids) for n, p in self.procs.items()},
            gc={n: p.gc() for n, p in self.procs.items()},
        )
        self.samples.append(s)
        return s

    def start(self, t0: float) -> None:
        self._ticker.start(t0)

    def stop(self) -> Sample:
        """Stop sampling; one last sample, marked ``end``; the scrapes' connections closed."""
        self._ticker.stop(timeout=len(self.procs) * _SCRAPE_TIMEOUT + 5)
        try:
            return self.sample("end")
        finally:
            for p in self.procs.values():
                p.close()

    def at(self, mark: str) -> Sample | None:
        return next((s for s in self.samples if s.mark == mark), None)
