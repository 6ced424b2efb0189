"""The servers a benchmark starts: start, watch and stop the processes it runs.

Owns every process the benchmarks start (flatgate stub/proxy/edge through the
``flatgate`` CLI, the load bench's baselines through granian's own CLI with
the settings the ``flatgate`` CLI gives the proxy, nginx with a config written
to a temporary directory) and what is read from them:

- each server is started in a new session (its own process group), so granian's
  worker children and nginx's worker are stopped with it: SIGINT to the group,
  then SIGKILL to the group after a grace period, by the group id this module
  started and never by name;
- CPU seconds (``utime + stime`` of every process in the tree, from
  ``/proc/<pid>/stat``; also apart, with the minor page faults), peak RSS
  (``VmHWM`` of the largest process in the tree: the granian worker), and the
  tree's current RSS (``VmRSS``) and open file descriptors (``/proc/<pid>/fd``)
  are read from ``/proc``;
- GC collections and pause seconds come from the server's ``/metrics``
  (``<prefix>_gc_collections_total`` / ``<prefix>_gc_pause_seconds_total``).

Used by ``benchmarks.load``, ``benchmarks.relay`` and ``benchmarks.soak``. Only loopback
addresses. Must not touch processes it did not start.
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

from benchmarks.harness import ROOT

__all__ = [
    "CLK_TCK",
    "HOST",
    "CpuUsage",
    "GcSample",
    "Server",
    "ServerGroup",
    "TcpServer",
    "find_tool",
    "free_port",
    "nginx_config",
    "parse_gc",
    "tool_version",
    "tree_cpu_seconds",
    "tree_open_fds",
    "tree_peak_rss_kib",
    "tree_pids",
    "tree_rss_kib",
    "tree_usage",
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


def tool_version(name: str, without: Collection[str] = (), flag: str = "-v") -> str:
    """What ``<tool> -v`` says its version is; "absent" when it is not installed."""
    path = find_tool(name, without)
    if path is None:
        return "absent"
    try:
        done = subprocess.run([path, flag], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    found = re.search(r"\S*\d+\.\d+\S*", done.stdout + done.stderr)
    return found.group() if found else "unknown"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _proc(pid: int | str, name: str) -> str:
    """``/proc/<pid>/<name>``; empty once the process is gone."""
    try:
        with open(f"/proc/{pid}/{name}", encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _stat(pid: int | str) -> list[str]:
    """``/proc/<pid>/stat`` after the command: state(0) ppid(1) ... utime(11) stime(12)."""
    return _proc(pid, "stat").rpartition(")")[2].split()


def tree_pids(root: int) -> list[int]:
    """``root`` and every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        if stat := _stat(entry):
            children.setdefault(int(stat[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _cpu_ticks(pid: int) -> int:
    stat = _stat(pid)
    return int(stat[11]) + int(stat[12]) if stat else 0


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and its live descendants."""
    return sum(_cpu_ticks(pid) for pid in tree_pids(root)) / CLK_TCK


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """What a process tree has used so far: CPU seconds in user space and in
    the kernel, and minor page faults (fresh memory touched)."""

    user: float
    system: float
    minor_faults: int


def tree_usage(root: int) -> CpuUsage:
    """User and system CPU seconds and minor page faults of ``root`` and its
    live descendants."""
    user = system = faults = 0
    for pid in tree_pids(root):
        stat = _stat(pid)
        if stat:
            faults += int(stat[7])
            user += int(stat[11])
            system += int(stat[12])
    return CpuUsage(user / CLK_TCK, system / CLK_TCK, faults)


def _hwm_kib(pid: int) -> int:
    for line in _proc(pid, "status").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def tree_peak_rss_kib(root: int) -> int:
    """The largest ``VmHWM`` in the tree: the worker's peak resident set."""
    return max((_hwm_kib(pid) for pid in tree_pids(root)), default=0)


def _rss_kib(pid: int) -> int:
    for line in _proc(pid, "status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def tree_rss_kib(root: int) -> int:
    """The resident set now, summed over ``root`` and its live descendants."""
    return sum(_rss_kib(pid) for pid in tree_pids(root))


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # gone, or not ours to read
        return 0


def tree_open_fds(root: int) -> int:
    """Open file descriptors, summed over ``root`` and its live descendants."""
    return sum(_open_fds(pid) for pid in tree_pids(root))


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
    return GcSample((coll[0], coll[1], coll[2]), (pause[0], pause[1], pause[2])) if found else None


class Server:
    """One server process group the bench started."""

    def __init__(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        port: int,
        log: Path,
        metrics: bool,
        *,
        health: str = "/healthz",
    ) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.log = log
        self.has_metrics = metrics
        self.health = health
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

    def usage(self) -> CpuUsage:
        """User and system CPU seconds and minor page faults of the tree."""
        return tree_usage(self.proc.pid)

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
        self.interrupt()
        self.finish(time.monotonic() + grace)

    def interrupt(self) -> None:
        """SIGINT to the group this bench started (the first half of ``stop``)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGINT)  # the group id is the leader's pid

    def finish(self, deadline: float) -> None:
        """Wait for the group's leader until ``deadline`` (``time.monotonic``),
        then SIGKILL to the group (the second half of ``stop``)."""
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class TcpServer(Server):
    """A server that speaks no HTTP (redis-server): healthy once it accepts."""

    def healthy(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1):
                return True
        except OSError:
            return False


class ServerGroup:
    """Every server of one run; ``stop_all`` ends them (also on errors)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: dict[str, Server] = {}

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        port: int,
        *,
        env: Mapping[str, str] | None = None,
        metrics: bool = False,
        health: str = "/healthz",
        drop_env: Sequence[str] = (),
        cwd: Path = ROOT,
        kind: type[Server] = Server,
    ) -> Server:
        """``argv`` in a session of its own, without the caller's ``FLATGATE_*``
        settings nor any variable starting with one of ``drop_env``; ``health``:
        the path that answers 200 once it serves. ``cwd`` defaults to the
        repository, where ``benchmarks`` imports from (the baselines)."""
        log = self.workdir / f"{name}.log"
        drop = ("FLATGATE_", *drop_env)
        clean = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env={**clean, **(env or {})},
                start_new_session=True,
            )
        self.servers[name] = kind(name, proc, port, log, metrics, health=health)
        return self.servers[name]

    def flatgate(
        self,
        name: str,
        service: str,
        args: Sequence[str],
        *,
        metrics: bool = False,
        port: int | None = None,
    ) -> Server:
        """``flatgate <service> --port P <args>`` (the product's own CLI), on
        ``port`` (a restart's) or a free one."""
        port = free_port() if port is None else port
        argv = [sys.executable, "-m", "flatgate.proxy.gateway.cli", service, "--port", str(port)]
        return self.spawn(name, [*argv, *args], port, metrics=metrics)

    def granian(
        self, name: str, target: str, interface: str, config: Path, transport: str = "fast"
    ) -> Server:
        """A granian factory target, served as the ``flatgate`` CLI serves the proxy."""
        port = free_port()
        argv = [sys.executable, "-m", "granian", "--interface", interface, "--host", HOST]
        argv += ["--port", str(port), "--workers", "1", "--factory", "--loop", "auto"]
        argv += ["--log-level", "warning", "--no-access-log", "--workers-kill-timeout", "3"]
        env = {"FLATGATE_CONFIG": str(config), "FLATGATE_PROXY_TRANSPORT": f'"{transport}"'}
        return self.spawn(name, [*argv, target], port, env=env, metrics=True)

    def nginx(
        self, name: str, upstream_port: int, binary: str, worker_connections: int = 4096
    ) -> Server:
        """Debian's nginx as a plain reverse proxy in front of ``upstream_port``
        (``worker_connections`` counts both sides of every proxied request)."""
        # nginx's worker runs as an unprivileged user when started by root: it
        # must be able to reach its temp directories under the prefix.
        self.workdir.chmod(0o755)
        prefix = self.workdir / name
        prefix.mkdir(mode=0o755)
        port = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_config(prefix, port, upstream_port, worker_connections))
        argv = [binary, "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")]
        return self.spawn(name, argv, port)

    def redis(self, name: str, binary: str) -> Server:
        """A ``redis-server`` on loopback, without persistence, in a
        directory of its own; ``url`` is its ``redis://`` URL."""
        prefix = self.workdir / name
        prefix.mkdir()
        port = free_port()
        argv = [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"]
        server = self.spawn(name, argv, port, cwd=prefix, kind=TcpServer)
        server.url = f"redis://{HOST}:{port}/0"
        return server

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

    def stop_all(self, grace: float = 10.0) -> None:
        """Stop every server at once: SIGINT to all, then SIGKILL to what is
        left after ``grace`` (the stops overlap: a group of servers stopping
        with streams in flight takes one grace period, not one each)."""
        servers = list(reversed(self.servers.values()))
        for server in servers:
            with contextlib.suppress(Exception):
                server.interrupt()
        deadline = time.monotonic() + grace
        for server in servers:
            with contextlib.suppress(Exception):
                server.finish(deadline)


def nginx_config(
    prefix: Path, port: int, upstream_port: int, worker_connections: int = 4096
) -> str:
    """One worker, loopback only, keep-alive upstream, no response buffering,
    request bodies held in memory (up to 2 MiB: the load bench's 1 MB prompt),
    every file under ``prefix``."""
    return f"""daemon off;
master_process on;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{
    worker_connections {worker_connections};
}}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    client_max_body_size 8m;
    client_body_buffer_size 2m;
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
