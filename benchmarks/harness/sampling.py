"""What is read of the servers while a bench runs, and the thread that reads it.

- from ``/proc``, for a process tree (``tree_pids``: a server's leader and
  every live descendant, so granian's worker counts with its main process):
  CPU seconds (``utime + stime``, also apart with the minor page faults:
  ``usage``; of a server's tree: ``server_usage``), the resident set now
  (``rss_kib``, ``VmRSS`` summed), its peak (``peak_rss_kib``: the largest
  ``VmHWM``, the worker's), open file descriptors (``open_fds``), and one
  thread of this process (``thread_cpu_seconds``);
- from a server's ``/metrics`` (Prometheus text): GC collections and pause
  by generation (``parse_gc``; ``gc_of`` scrapes one), its unlabelled gauges
  (``parse_gauges``), a route's requests by status (``requests_by_status``);
  ``fetch`` (``fetch_json``) reads any page on loopback;
- ``Ticker``: a thread that takes a sample every few seconds (and at given
  marks) until stopped; a sample that fails is counted, never the end of
  the sampling.

Reads only, and only on loopback.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.harness.servers import Server, urlopen

__all__ = [
    "CLK_TCK",
    "CpuUsage",
    "GcSample",
    "Ticker",
    "cpu_seconds",
    "fetch",
    "fetch_json",
    "gc_of",
    "open_fds",
    "parse_gauges",
    "parse_gc",
    "peak_rss_kib",
    "requests_by_status",
    "rss_kib",
    "server_usage",
    "thread_cpu_seconds",
    "tree_pids",
    "usage",
]

CLK_TCK = os.sysconf("SC_CLK_TCK")


# /proc ------------------------------------------------------------------------


def _proc(path: str) -> str:
    """A ``/proc`` file; empty once the process is gone."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _stat(path: str) -> list[str]:
    """A ``stat`` file after the command: state(0) ppid(1) ... minflt(7) ...
    utime(11) stime(12); empty once gone."""
    fields = _proc(path).rpartition(")")[2].split()
    return fields if len(fields) > 12 else []


def tree_pids(root: int) -> list[int]:
    """``root`` and every live descendant, ``root`` first."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        if stat := _stat(f"/proc/{entry}/stat"):
            children.setdefault(int(stat[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """What processes have used so far: CPU seconds in user space and in
    the kernel, and minor page faults (fresh memory touched)."""

    user: float
    system: float
    minor_faults: int


def usage(pids: Iterable[int]) -> CpuUsage:
    """User and system CPU seconds and minor page faults of ``pids``."""
    user = system = faults = 0
    for pid in pids:
        if stat := _stat(f"/proc/{pid}/stat"):
            faults += int(stat[7])
            user += int(stat[11])
            system += int(stat[12])
    return CpuUsage(user / CLK_TCK, system / CLK_TCK, faults)


def server_usage(server: Server) -> CpuUsage:
    """``usage`` of a server's process tree now (its worker with its main process)."""
    return usage(tree_pids(server.proc.pid))


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of ``pids``."""
    u = usage(pids)
    return u.user + u.system


def thread_cpu_seconds(tid: int) -> float:
    """User + system CPU seconds of one thread of this process."""
    stat = _stat(f"/proc/self/task/{tid}/stat")
    return (int(stat[11]) + int(stat[12])) / CLK_TCK if stat else 0.0


def _status_kib(pid: int, key: str) -> int:
    for line in _proc(f"/proc/{pid}/status").splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def rss_kib(pids: Iterable[int]) -> int:
    """The resident set now, summed over ``pids``."""
    return sum(_status_kib(pid, "VmRSS:") for pid in pids)


def peak_rss_kib(pids: Iterable[int]) -> int:
    """The largest ``VmHWM`` of ``pids``: a server's worker's peak resident set."""
    return max((_status_kib(pid, "VmHWM:") for pid in pids), default=0)


def open_fds(pids: Iterable[int]) -> int:
    """Open file descriptors, summed over ``pids``."""
    total = 0
    for pid in pids:
        try:
            total += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:  # gone, or not ours to read
            continue
    return total


# /metrics ---------------------------------------------------------------------

_GC_LINE = re.compile(
    r'^(?P<prefix>\w+)_gc_(?P<what>collections|pause_seconds)_total\{generation="(?P<gen>\d)"\}'
    r"\s+(?P<value>\S+)",
    re.MULTILINE,
)
_SCRAPE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class GcSample:
    """A process's GC counters so far, by generation."""

    collections: tuple[float, float, float]
    pause_seconds: tuple[float, float, float]

    @property
    def total_collections(self) -> float:
        return sum(self.collections)

    @property
    def total_pause(self) -> float:
        return sum(self.pause_seconds)


def parse_gc(text: str) -> GcSample | None:
    """GC counters from a Prometheus text page; ``None`` when it has none. A
    page with several prefixes (the one-process gateway's edge and proxy
    metrics both count the one process) gives the one that counted most, not
    their sum."""
    found: dict[str, tuple[list[float], list[float]]] = {}
    for m in _GC_LINE.finditer(text):
        gen = int(m["gen"])
        if gen > 2:
            continue
        coll, pause = found.setdefault(m["prefix"], ([0.0] * 3, [0.0] * 3))
        (coll if m["what"] == "collections" else pause)[gen] += float(m["value"])
    if not found:
        return None
    coll, pause = max(found.values(), key=lambda cp: (sum(cp[0]), sum(cp[1])))
    return GcSample((coll[0], coll[1], coll[2]), (pause[0], pause[1], pause[2]))


def fetch(url: str, timeout: float = _SCRAPE_TIMEOUT) -> str | None:
    """A page's text; ``None`` when the server does not answer 200 in time."""
    try:
        with urlopen(url, timeout=timeout) as r:
            return str(r.read().decode("utf-8", "replace")) if r.status == 200 else None
    except OSError:
        return None


def fetch_json(url: str) -> Any:
    """A page's JSON; ``None`` when it does not answer 200 in time or is not JSON."""
    text = fetch(url)
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return None


def gc_of(server: Server) -> GcSample | None:
    """``server``'s GC counters, when it serves ``/metrics`` and answers."""
    if not server.metrics:
        return None
    text = fetch(server.url + "/metrics")
    return None if text is None else parse_gc(text)


def parse_gauges(text: str, prefix: str, names: Mapping[str, str]) -> dict[str, float]:
    """The unlabelled ``<prefix>_<name>`` lines of a page whose name is a key
    of ``names``, under the value it maps to."""
    out: dict[str, float] = {}
    pattern = re.compile(rf"^{re.escape(prefix)}_(\w+)\s+(\S+)$", re.MULTILINE)
    for m in pattern.finditer(text):
        key = names.get(m.group(1))
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


# The sampling thread ----------------------------------------------------------


class Ticker:
    """Calls ``take(mark)`` on a thread of its own, from ``start(t0)`` until
    ``stop``: at ``t0 + k * every`` with ``mark == ""``, and at ``t0 + s``
    for each ``mark: s`` of ``marks``, on ``clock``'s time. A ``take`` that
    raises is counted in ``failed`` and handed to ``on_error``."""

    def __init__(
        self,
        take: Callable[[str], object],
        every: float,
        *,
        marks: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        name: str = "sampler",
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        if every <= 0:
            raise ValueError("every must be > 0")
        self.take = take
        self.every = every
        self.marks = dict(marks or {})
        self.clock = clock
        self.name = name
        self.on_error = on_error
        self.failed = 0
        self.t0 = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
            wait = self.t0 + at - self.clock()
            if wait > 0 and self._stop.wait(wait):
                return
            try:
                self.take(mark)
            except Exception as exc:  # a missed sample must not end the sampling
                self.failed += 1
                if self.on_error is not None:
                    self.on_error(exc)

    def start(self, t0: float | None = None) -> None:
        """Tick from ``t0`` (``clock``'s time; now if not given)."""
        self.t0 = self.clock() if t0 is None else t0
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """No more ticks; waits up to ``timeout`` for the one under way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
