"""The soak test's sampler: what each server holds, every few seconds.

Owns ``Sampler``, a thread that reads, for every watched server (the edge,
the proxy and the stubs, each a process tree: granian's main process and its
worker), every ``every`` seconds:

- the resident set and the open file descriptors of the tree, from ``/proc``
  (``benchmarks.servers``);
- its gauges: from the edge's and the proxy's ``/metrics`` the upstream pool
  (``<prefix>_upstream_pool_open`` / ``_idle`` / ``_waiting``), the requests
  in flight (``<prefix>_in_flight``) and the streams being answered
  (``<prefix>_active_streams``); from a stub's ``/stats`` its active streams.
  A gauge a server does not export (a pool's, until its first request) is
  recorded as 0; those it never exported are named in ``absent``.

Also ``requests_by_status``: a service's own count of the requests it
answered, by status, for the soak's accounting. Reads only; loopback only.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from benchmarks.servers import Server, tree_open_fds, tree_rss_kib

__all__ = [
    "GAUGES",
    "Sample",
    "Sampler",
    "Usage",
    "Watched",
    "describe",
    "fetch",
    "parse_gauges",
    "read_gauges",
    "requests_by_status",
]

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


def parse_gauges(text: str, prefix: str) -> dict[str, float]:
    """The ``GAUGES`` a Prometheus text page has (unlabelled lines), by sample key."""
    out: dict[str, float] = {}
    pattern = re.compile(rf"^{re.escape(prefix)}_(\w+)\s+(\S+)$", re.MULTILINE)
    for m in pattern.finditer(text):
        key = GAUGES.get(m.group(1))
        if key is not None:
            out[key] = float(m.group(2))
    return out


def requests_by_status(text: str, prefix: str, route: str) -> dict[int, int]:
    """``<prefix>_requests_total{route=..., status=...}`` of one route, by status."""
    pattern = re.compile(
        rf'^{re.escape(prefix)}_requests_total\{{route="{re.escape(route)}",'
        r'status="(\d+)"\}\s+(\S+)$',
        re.MULTILINE,
    )
    out: dict[int, int] = {}
    for m in pattern.finditer(text):
        out[int(m.group(1))] = out.get(int(m.group(1)), 0) + round(float(m.group(2)))
    return out


def fetch(url: str) -> str | None:
    """A page's text; ``None`` when the server does not answer 200 in time."""
    try:
        with urllib.request.urlopen(url, timeout=_SCRAPE_TIMEOUT) as r:
            return str(r.read().decode("utf-8", "replace")) if r.status == 200 else None
    except (OSError, urllib.error.URLError):
        return None


def read_gauges(w: Watched) -> dict[str, float] | None:
    """The server's gauges, every key of ``GAUGES`` present only if exported."""
    if w.prefix:
        text = fetch(w.server.url + "/metrics")
        return None if text is None else parse_gauges(text, w.prefix)
    text = fetch(w.server.url + "/stats")
    if text is None:
        return None
    try:
        return {"active_streams": float(json.loads(text)["active"])}
    except (ValueError, KeyError, TypeError):
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
        if every <= 0:
            raise ValueError("every must be > 0")
        self.watched = watched
        self.progress = progress
        self.state = state
        self.every = every
        self.log = log
        self.samples: list[Sample] = []
        # "service:key" of every gauge looked for, and of those found once;
        # scrapes (or whole samples) that failed.
        self._wanted: set[str] = set()
        self._found: set[str] = set()
        self.failed_scrapes = 0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self, *, final: bool = False) -> Sample:
        """Every watched server now; ``final``: the sample after the traffic."""
        phase, epoch = self.state()
        services: dict[str, Usage] = {}
        for name, w in self.watched().items():
            pid = w.server.proc.pid
            rss, fds = tree_rss_kib(pid), tree_open_fds(pid)
            gauges = read_gauges(w)
            if gauges is None:
                self.failed_scrapes += 1
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

    def _loop(self) -> None:
        tick = 0
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # a missed sample must not end the sampling
                self.failed_scrapes += 1
                self.log(f"sample failed: {exc!r}")
            tick += 1
            self._stop.wait(max(0.0, self.started + tick * self.every - time.monotonic()))

    def start(self) -> None:
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # One sample scrapes up to four servers.
            self._thread.join(timeout=4 * _SCRAPE_TIMEOUT + 5)


def describe(s: Sample) -> str:
    """One progress line: every server's RSS, descriptors and pool."""
    parts = [f"{s.phase} t={s.t:6.1f}s {s.finished}/{s.sent} done"]
    for name, u in s.services.items():
        g = u.gauges
        pool = f" pool {g['pool_open']:.0f}/{g['pool_idle']:.0f}" if "pool_open" in g else ""
        parts.append(f"{name} {u.rss_kib / 1024:.0f} MiB {u.fds} fds{pool}")
    return " | ".join(parts)
