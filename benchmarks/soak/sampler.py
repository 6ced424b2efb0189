"""The soak test's sampler: what each server holds, every few seconds.

Owns ``Sampler``, a ``benchmarks.harness.sampling.Ticker`` that reads, for
every watched server (the edge, the proxy and the stubs, each a process tree:
granian's main process and its worker), every ``every`` seconds:

- the resident set and the open file descriptors of the tree, from ``/proc``;
- its gauges (``GAUGES``): from the edge's and the proxy's ``/metrics`` the
  upstream pool (``<prefix>_upstream_pool_open`` / ``_idle`` / ``_waiting``),
  the requests in flight (``<prefix>_in_flight``) and the streams being
  answered (``<prefix>_active_streams``); from a stub's ``/stats`` its
  active streams. A gauge a server does not export (a pool's, until its
  first request) is recorded as 0; those it never exported are named in
  ``absent``.

Reads only; loopback only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from benchmarks.harness.sampling import (
    Ticker,
    fetch,
    fetch_json,
    open_fds,
    parse_gauges,
    rss_kib,
    tree_pids,
)
from benchmarks.harness.servers import Server

__all__ = ["GAUGES", "Sample", "Sampler", "Usage", "Watched", "describe", "read_gauges"]

# Gauge name after the service's prefix -> the key a sample keeps it under.
GAUGES = {
    "upstream_pool_open": "pool_open",
    "upstream_pool_idle": "pool_idle",
    "upstream_pool_waiting": "pool_waiting",
    "in_flight": "in_flight",
    "active_streams": "active_streams",
}
_SCRAPE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Watched:
    """One server to sample: its process group, and the ``/metrics`` prefix
    (``""``: a stub, read through ``/stats``)."""

    server: Server
    prefix: str


@dataclass(frozen=True, slots=True)
class Usage:
    rss_kib: int
    fds: int
    gauges: dict[str, float]


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # seconds since the traffic began
    # "traffic"; "restart" while the backend restarts; "after" once every
    # request has ended.
    phase: str
    epoch: int  # 1, then 2 from the backend restart on
    sent: int
    finished: int
    services: dict[str, Usage]


def read_gauges(w: Watched) -> dict[str, float] | None:
    """The server's gauges, every key of ``GAUGES`` present only if exported."""
    if w.prefix:
        text = fetch(w.server.url + "/metrics")
        return None if text is None else parse_gauges(text, w.prefix, GAUGES)
    try:
        return {"active_streams": float(fetch_json(w.server.url + "/stats")["active"])}
    except (ValueError, KeyError, TypeError):  # no answer (None), or not the stub's
        return None


class Sampler:
    """Samples every watched server now (``sample``) or every ``every`` seconds
    on a thread of its own (``start`` / ``stop``).

    ``watched()`` names the servers at each tick (a restarted stub is a new
    server); ``progress()`` is ``(sent, finished)``; ``state()`` the phase
    and the epoch of the run (a restart begins the next)."""

    def __init__(
        self,
        watched: Callable[[], Mapping[str, Watched]],
        progress: Callable[[], tuple[int, int]],
        every: float,
        log: Callable[[str], None] = print,
        state: Callable[[], tuple[str, int]] = lambda: ("traffic", 1),
    ) -> None:
        self.watched = watched
        self.progress = progress
        self.state = state
        self.log = log
        self.samples: list[Sample] = []
        # "service:key" of every gauge looked for, and of those found once.
        self._wanted: set[str] = set()
        self._found: set[str] = set()
        self._scrapes_failed = 0
        self._ticker = Ticker(
            lambda mark: self.sample(), every, name="soak-sampler", on_error=self._failed
        )

    def _failed(self, exc: Exception) -> None:
        self.log(f"sample failed: {exc!r}")

    @property
    def started(self) -> float:
        """When the sampling began (``time.monotonic``)."""
        return self._ticker.t0

    @property
    def failed_scrapes(self) -> int:
        """Scrapes, or whole samples, that failed."""
        return self._scrapes_failed + self._ticker.failed

    def sample(self, *, final: bool = False) -> Sample:
        """Every watched server now; ``final``: the sample after the traffic."""
        phase, epoch = self.state()
        services: dict[str, Usage] = {}
        for name, w in self.watched().items():
            pids = tree_pids(w.server.proc.pid)
            rss, fds = rss_kib(pids), open_fds(pids)
            gauges = read_gauges(w)
            if gauges is None:
                self._scrapes_failed += 1
                gauges = {}
            wanted = GAUGES.values() if w.prefix else ("active_streams",)
            self._wanted.update(f"{name}:{key}" for key in wanted)
            self._found.update(f"{name}:{key}" for key in gauges)
            full = {key: gauges.get(key, 0.0) for key in wanted}
            services[name] = Usage(rss, fds, full)
        sent, finished = self.progress()
        t = round(time.monotonic() - self.started, 2)
        s = Sample(t, "after" if final else phase, epoch, sent, finished, services)
        self.samples.append(s)
        self.log(describe(s))
        return s

    @property
    def absent(self) -> set[str]:
        """``service:key`` of the gauges never exported (a pool's appear once
        the server has made its upstream client, at its first request)."""
        return self._wanted - self._found

    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        # One sample scrapes up to four servers.
        self._ticker.stop(timeout=4 * _SCRAPE_TIMEOUT + 5)


def describe(s: Sample) -> str:
    """One progress line: every server's RSS, descriptors and pool."""
    parts = [f"{s.phase} t={s.t:6.1f}s {s.finished}/{s.sent} done"]
    for name, u in s.services.items():
        g = u.gauges
        pool = f" pool {g['pool_open']:.0f}/{g['pool_idle']:.0f}" if "pool_open" in g else ""
        parts.append(f"{name} {u.rss_kib / 1024:.0f} MiB {u.fds} fds{pool}")
    return " | ".join(parts)
