"""The servers a bench or a test starts: start them, wait for them, stop them.

One implementation for both (``tests/servers.py`` re-exports its test API):

- every server is a child process in a new session (its own process group),
  on a loopback port, without the caller's ``FLATGATE_*`` settings, its
  output in a log file; stopped by that group: SIGINT to the group, then
  SIGKILL to the group after a grace period, by the group id started here and
  never by name, so granian's workers and nginx's worker go with it;
- ``spawn`` / ``running`` (the tests' API): one ``flatgate <service>`` on a
  free port (or the one given), polled on ``/healthz``
  (``Server.wait_healthy``); ``free_port``, ``closed_port``, ``write_config``;
- ``ServerGroup`` (the benches'): every server of one run, by name:
  ``flatgate`` (the product's own CLI), ``granian`` (a factory target served
  as the ``flatgate`` CLI serves the proxy), ``nginx`` (Debian's, with the
  config ``nginx_config`` writes), ``redis`` (``redis-server``, no
  persistence); ``wait_healthy`` waits for all and says which failed, and
  ``stop_all`` stops them together (also on errors); ``gateway_config``: the
  TOML a run's flatgate servers read;
- ``find_tool`` / ``tool_version``: the external tools (wrk, nginx,
  redis-server), also in the sbin directories a non-root ``PATH`` lacks;
  ``gateway_available``: whether ``flatgate gateway`` runs here.

What is read from a running server is ``benchmarks.harness.sampling``'s.
Only loopback addresses. Must not touch processes it did not start.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.harness.results import ROOT

__all__ = [
    "HOST",
    "NO_NGINX",
    "Server",
    "ServerGroup",
    "TcpServer",
    "closed_port",
    "find_tool",
    "flatgate_argv",
    "free_port",
    "gateway_available",
    "gateway_config",
    "nginx_config",
    "running",
    "spawn",
    "start",
    "tool_version",
    "urlopen",
    "write_config",
]

HOST = "127.0.0.1"
_CLI = "flatgate.proxy.gateway.cli"  # the ``flatgate`` command
NO_NGINX = "nginx is not installed (benchmarks/setup_tools.sh installs it)"
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")
# Loopback only: never through a proxy the environment names.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def urlopen(url: str, timeout: float) -> Any:
    """``GET url`` directly (no proxy); raises ``OSError`` (``URLError``) on failure."""
    return _OPENER.open(url, timeout=timeout)


# The ports free_port handed out lately: a server started on one may not
# have bound it yet when the next is asked for (two servers, one port: the
# second fails to start, and the first answers its health checks).
_HANDED: collections.deque[int] = collections.deque(maxlen=4096)


def _lane() -> tuple[int, int]:
    """(this process's lane, lanes): under pytest-xdist each worker takes
    ports of its own lane, so that two workers never pick one port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        return int(worker[2:]) % int(count), int(count)
    return 0, 1


def free_port() -> int:
    """A loopback port free now, in this process's lane, not handed out lately."""
    lane, lanes = _lane()
    for _ in range(10_000):
        with socket.socket() as s:
            s.bind((HOST, 0))
            port: int = s.getsockname()[1]
        # By the port's halves: Linux hands bind(0) ports of one parity.
        if (port >> 1) % lanes == lane and port not in _HANDED:
            _HANDED.append(port)
            return port
    raise RuntimeError("no free loopback port in this process's lane")


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the block
    runs: bound, never listening, so no server started meanwhile (by this
    test or another) can take it, as it could a ``free_port``."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        yield port


def write_config(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


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


class Server:
    """One server process group: its leader ``proc``, ``port``, ``url`` and
    ``log``; ``metrics``: it serves ``/metrics``; ``health``: the path that
    answers 200 once it serves."""

    def __init__(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        port: int,
        log: Path,
        *,
        metrics: bool = False,
        health: str = "/healthz",
    ) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.log = log
        self.metrics = metrics
        self.health = health
        self.url = f"http://{HOST}:{port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def healthy(self) -> bool:
        try:
            with urlopen(self.url + self.health, timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def wait_healthy(self, seconds: float = 30.0) -> None:
        """Until it answers; ``RuntimeError`` (with its log) if it exits or
        ``seconds`` pass first."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not healthy in {seconds}s:\n{self.log_tail()}")

    def stop(self, grace: float = 10.0) -> None:
        """SIGINT to the group started here, SIGKILL after ``grace``."""
        self.interrupt()
        self.finish(time.monotonic() + grace)

    def interrupt(self) -> None:
        """SIGINT to the group started here (the first half of ``stop``)."""
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


def start(
    name: str,
    argv: Sequence[str],
    port: int,
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    drop_env: Sequence[str] = (),
    cwd: Path | None = None,
    metrics: bool = False,
    health: str = "/healthz",
    kind: type[Server] = Server,
) -> Server:
    """``argv`` in a session of its own, its output in ``log``, without the
    caller's ``FLATGATE_*`` settings nor any variable starting with one of
    ``drop_env``, with ``env`` on top; not yet healthy."""
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
    return kind(name, proc, port, log, metrics=metrics, health=health)


def flatgate_argv(service: str, port: int, args: Sequence[str]) -> list[str]:
    """``flatgate <service> --port P <args>``, run by this Python."""
    return [sys.executable, "-m", _CLI, service, "--port", str(port), *args]


def gateway_available(run: Callable[..., Any] = subprocess.run) -> tuple[bool, str]:
    """``(True, its help text)`` when ``flatgate gateway --help`` succeeds (the
    one-process gateway is there), else ``(False, why)``."""
    argv = [sys.executable, "-m", _CLI, "gateway", "--help"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLATGATE_")}
    try:
        done = run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"`flatgate gateway --help` failed: {exc}"
    if done.returncode == 0:
        return True, str(done.stdout)
    last = (str(done.stderr).strip().splitlines() or [""])[-1]
    return False, f"not available yet: `flatgate gateway --help` exited {done.returncode}: {last}"


def spawn(
    service: str,
    args: Sequence[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Server:
    """Start ``flatgate <service> --port P <args>``; not yet healthy."""
    port = port or free_port()
    argv = flatgate_argv(service, port, args)
    return start(service, argv, port, log_dir / f"{service}-{port}.log", env=env)


@contextmanager
def running(
    service: str,
    args: Sequence[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Iterator[Server]:
    """Run ``flatgate <service> --port P <args>`` until the block ends."""
    server = spawn(service, args, log_dir, env, port)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


class ServerGroup:
    """Every server of one run, by name, with their logs in ``workdir``;
    ``stop_all`` ends them (also on errors)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: dict[str, Server] = {}

    def spawn(self, name: str, argv: Sequence[str], port: int, **options: Any) -> Server:
        """``start`` as ``name``, logging to ``<workdir>/<name>.log``, in the
        repository (where ``benchmarks`` imports from) unless ``cwd`` is given."""
        options.setdefault("cwd", ROOT)
        self.servers[name] = start(name, argv, port, self.workdir / f"{name}.log", **options)
        return self.servers[name]

    def flatgate(
        self,
        name: str,
        service: str,
        args: Sequence[str],
        *,
        metrics: bool = False,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Server:
        """``flatgate <service> --port P <args>`` (the product's own CLI), on
        ``port`` (a restart's) or a free one, with ``env`` over the caller's."""
        port = free_port() if port is None else port
        argv = flatgate_argv(service, port, args)
        return self.spawn(name, argv, port, metrics=metrics, env=env)

    def granian(
        self,
        name: str,
        target: str,
        interface: str,
        *,
        env: Mapping[str, str],
        port: int | None = None,
        extra: Sequence[str] = (),
        metrics: bool = True,
    ) -> Server:
        """A granian factory ``target`` served as the ``flatgate`` CLI serves
        the proxy (one worker, warnings only, no access log), ``extra`` flags
        after those, with ``env`` (its ``FLATGATE_CONFIG``)."""
        port = free_port() if port is None else port
        argv = [sys.executable, "-m", "granian", "--interface", interface, "--host", HOST]
        argv += ["--port", str(port), "--workers", "1", "--factory", "--loop", "auto"]
        argv += ["--log-level", "warning", "--no-access-log", "--workers-kill-timeout", "3"]
        return self.spawn(name, [*argv, *extra, target], port, env=env, metrics=metrics)

    def nginx(
        self,
        name: str,
        upstream_port: int,
        binary: str,
        worker_connections: int = 4096,
        max_body: str = "8m",
    ) -> Server:
        """Debian's nginx as a plain reverse proxy in front of ``upstream_port``
        (``worker_connections`` counts both sides of every proxied request;
        ``max_body``: its ``client_max_body_size``, bodies up to it held in memory)."""
        # nginx's worker runs as an unprivileged user when started by root: it
        # must be able to reach its temp directories under the prefix.
        self.workdir.chmod(0o755)
        prefix = self.workdir / name
        prefix.mkdir(mode=0o755)
        port = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_config(prefix, port, upstream_port, worker_connections, max_body))
        argv = [binary, "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")]
        return self.spawn(name, argv, port)

    def nginx_in_front(
        self, upstreams: Mapping[str, int], without: Collection[str] = ()
    ) -> str | None:
        """An nginx in front of each upstream port, by name; why not (``None``: started)."""
        binary = find_tool("nginx", without)
        if binary is None:
            return NO_NGINX
        for name, port in upstreams.items():
            self.nginx(name, port, binary)
        return None

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


def gateway_config(
    backends: Mapping[str, tuple[str, str]],
    routes: Mapping[str, Sequence[str]],
    models: Mapping[str, str] | None = None,
    *,
    before: str = "",
    edge: str = f'host = "{HOST}"\n',
) -> str:
    """The one TOML config a run's flatgate servers read: ``before`` (sections
    of their own, ``[proxy]`` or ``[stub]``), each backend ``name: (url,
    protocol)``, each route ``model: backend names`` (in order), the
    ``[edge]`` section's ``edge`` and the edge's ``models`` (``name: provider``)."""
    out = [before] if before else []
    for name, (url, protocol) in backends.items():
        out.append(f'[[backends]]\nname = "{name}"\nurl = "{url}"\nprotocol = "{protocol}"\n')
    for model, names in routes.items():
        listed = ", ".join(f'"{n}"' for n in names)
        out.append(f'[[routes]]\nmodel = "{model}"\nbackends = [{listed}]\n')
    out.append(f"[edge]\n{edge}")
    for name, provider in (models or {}).items():
        out.append(f'[[models]]\nname = "{name}"\nprovider = "{provider}"\n')
    return "\n".join(out)


def nginx_config(
    prefix: Path,
    port: int,
    upstream_port: int,
    worker_connections: int = 4096,
    max_body: str = "8m",
) -> str:
    """One worker, loopback only, keep-alive upstream, no response buffering,
    request bodies held in memory (up to 2 MiB: the load bench's 1 MB prompt;
    up to ``max_body`` when it is not the default 8m), every file under ``prefix``."""
    buffer = "2m" if max_body == "8m" else max_body
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
    client_max_body_size {max_body};
    client_body_buffer_size {buffer};
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
