"""The load bench's servers: start, watch and stop the processes it runs.

Owns every process the load bench starts (flatgate stub/proxy/edge through the
``flatgate`` CLI, the baselines through ``benchmarks.load.launch``, nginx with
a config written to a temporary directory) and what is read from them:

- each server is started in a new session (its own process group), so granian's
  worker children and nginx's worker are stopped with it: SIGINT to the group,
  then SIGKILL to the group after a grace period, by the group id this module
  started and never by name;
- CPU seconds (``utime + stime`` of every process in the tree, from
  ``/proc/<pid>/stat``) and peak RSS (``VmHWM`` of the largest process in the
  tree: the granian worker) are read from ``/proc``;
- GC collections and pause seconds come from the server's ``/metrics``
  (``<prefix>_gc_collections_total`` / ``<prefix>_gc_pause_seconds_total``).

Only loopback addresses. Must not touch processes it did not start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CLK_TCK",
    "GcSample",
    "Server",
    "ServerGroup",
    "find_tool",
    "free_port",
    "nginx_config",
    "parse_gc",
    "tree_cpu_seconds",
    "tree_peak_rss_kib",
    "tree_pids",
]

HOST = "127.0.0.1"
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")
CLK_TCK = os.sysconf("SC_CLK_TCK")
_GC_LINE = re.compile(
    r'^(?P<name>\w+_gc_(?:collections|pause_seconds))_total\{generation="(?P<gen>\d)"\}\s+'
    r"(?P<value>\S+)",
    re.MULTILINE,
)


def find_tool(name: str, without: Collection[str] = ()) -> str | None:
    """The path of an external tool (``wrk``, ``nginx``), also in the sbin
    directories a non-root ``PATH`` lacks; ``None`` if absent or in ``without``."""
    if name in without:
        return None
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def tree_pids(root: int) -> list[int]:
    """``root`` and every live descendant."""
    children = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0
    # After the command: state(0) ppid(1) ... utime(11) stime(12).
    return int(fields[11]) + int(fields[12])


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and its live descendants."""
    return sum(_cpu_ticks(pid) for pid in tree_pids(root)) / CLK_TCK


def _hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_peak_rss_kib(root: int) -> int:
    """The largest ``VmHWM`` in the tree: the worker's peak resident set."""
    return max((_hwm_kib(pid) for pid in tree_pids(root)), default=0)


@dataclass(frozen=True, slots=True)
class GcSample:
    collections: tuple[float, float, float]
    pause_seconds: tuple[float, float, float]


def parse_gc(metrics_text: str) -> GcSample | None:
    """GC counters from a Prometheus text page; ``None`` when it has none."""
    coll = [0.0, 0.0, 0.0]
    pause = [0.0, 0.0, 0.0]
    found = False
    for m in _GC_LINE.finditer(metrics_text):
        gen = int(m["gen"])
        if gen > 2:
            continue
        found = True
        target = coll if m["name"].endswith("collections") else pause
        target[gen] += float(m["value"])
    if not found:
        return None
    return GcSample(
        (coll[0], coll[1], coll[2]),
        (pause[0], pause[1], pause[2]),
    )


class Server:
    """One server process group the bench started."""

    def __init__(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        port: int,
        log: Path,
        *,
        health: str = "/healthz",
        metrics: bool = False,
    ) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.log = log
        self.health = health
        self.has_metrics = metrics
        self.url = f"http://{HOST}:{port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.health, timeout=1) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def peak_rss_kib(self) -> int:
        return tree_peak_rss_kib(self.proc.pid)

    def gc(self) -> GcSample | None:
        if not self.has_metrics:
            return None
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
                return parse_gc(r.read().decode("utf-8", "replace"))
        except (OSError, urllib.error.URLError):
            return None

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> None:
        """SIGINT to the group this bench started, SIGKILL after ``grace``."""
        if self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class ServerGroup:
    """Every server of one run; ``stop_all`` ends them (also on errors)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: dict[str, Server] = {}

    def _env(self, extra: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLATGATE_")}
        env.update(extra)
        return env

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        port: int,
        *,
        env: Mapping[str, str] | None = None,
        metrics: bool = False,
        health: str = "/healthz",
    ) -> Server:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env(env or {}),
                start_new_session=True,
            )
        server = Server(name, proc, port, log, health=health, metrics=metrics)
        self.servers[name] = server
        return server

    def flatgate(
        self, name: str, service: str, args: Sequence[str], *, metrics: bool = False
    ) -> Server:
        """``flatgate <service> --port P <args>`` (the product's own CLI)."""
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "flatgate.proxy.gateway.cli",
            service,
            "--port",
            str(port),
            *args,
        ]
        return self.spawn(name, argv, port, metrics=metrics)

    def granian(
        self, name: str, target: str, interface: str, config: Path, transport: str = "fast"
    ) -> Server:
        """A granian factory target with the proxy CLI's settings (the baselines)."""
        port = free_port()
        argv = [sys.executable, "-m", "benchmarks.load.launch", target, interface, str(port)]
        env = {"FLATGATE_CONFIG": str(config), "FLATGATE_PROXY_TRANSPORT": f'"{transport}"'}
        return self.spawn(name, argv, port, env=env, metrics=True)

    def nginx(self, name: str, upstream_port: int, binary: str) -> Server:
        """Debian's nginx as a plain reverse proxy in front of ``upstream_port``."""
        # nginx's worker runs as an unprivileged user when started by root: it
        # must be able to reach its temp directories under the prefix.
        self.workdir.chmod(0o755)
        prefix = self.workdir / name
        prefix.mkdir(mode=0o755)
        port = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_config(prefix, port, upstream_port))
        argv = [binary, "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")]
        return self.spawn(name, argv, port)

    def wait_healthy(self, seconds: float = 60.0) -> dict[str, str]:
        """Wait for every server; the ones that failed, with the reason."""
        deadline = time.monotonic() + seconds
        pending = dict(self.servers)
        failed: dict[str, str] = {}
        while pending and time.monotonic() < deadline:
            for name, server in list(pending.items()):
                if not server.alive():
                    failed[name] = f"exited early: {server.log_tail(600).strip()}"
                    del pending[name]
                elif server.healthy():
                    del pending[name]
            if pending:
                time.sleep(0.1)
        for name in pending:
            failed[name] = f"not healthy in {seconds:.0f} s: {self.servers[name].log_tail(600)}"
        return failed

    def stop_all(self) -> None:
        for server in reversed(list(self.servers.values())):
            with contextlib.suppress(Exception):
                server.stop()


def nginx_config(prefix: Path, port: int, upstream_port: int) -> str:
    """One worker, loopback only, keep-alive upstream, no response buffering,
    request bodies held in memory, every file under ``prefix``."""
    return f"""daemon off;
master_process on;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    client_max_body_size 8m;
    client_body_buffer_size 1m;
    keepalive_requests 1000000;
    upstream backend {{
        server {HOST}:{upstream_port};
        keepalive 256;
        keepalive_requests 1000000;
    }}
    server {{
        listen {HOST}:{port};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""
