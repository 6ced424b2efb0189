"""``flatgate``: the command line (``flatgate proxy|stub|gateway|edge|up|check|reload``).

Owns turning flags into settings and starting granian. Flags become
``FLATGATE_<SERVICE>_<KEY>`` environment variables, so the worker processes
granian spawns read the very same settings through ``service.settings`` /
``stub.settings`` / ``edge_translator.settings`` / ``gateway.document`` (one
path for flags, environment and file).

The file is read once per command: every problem of the config is found
before anything starts (``gateway.check``, the same code ``flatgate check``
runs), listed one per line, and the command exits 2; the document it gives
is what the command starts with. Each service runs under
``gateway.server.DrainingServer``: SIGTERM or SIGINT drains it
(docs/operations.md, "Graceful restarts"). The proxy's and the edge's
workers share their metrics through a directory made per server
(``_shared_metrics``), so that any worker's ``/metrics`` answers for all.

``up`` runs stub, proxy and edge as child processes with one config and stops
them together on Ctrl-C or SIGTERM: each is sent SIGTERM and given its
``drain_seconds`` (and a margin) to finish; what is left then is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from flatgate.proxy.backends.dialect import FAULTS, TOOL_MODES
from flatgate.proxy.backends.registry import PROTOCOLS
from flatgate.proxy.gateway.check import checked, file_problems
from flatgate.proxy.gateway.document import SERVICE_SCOPES, Scope
from flatgate.proxy.gateway.effective import effective_document, startup_line
from flatgate.proxy.plumbing.config import ENV_CONFIG, env_name
from flatgate.proxy.plumbing.metrics import ENV_METRICS_DIR
from flatgate.proxy.plumbing.server_section import ServerSection, ServiceSection

__all__ = ["main"]

# The listen queue (the kernel caps it at net.core.somaxconn).
LISTEN_BACKLOG = 4096
# Connections a stub worker serves at once (it has no admission control).
STUB_CONNECTIONS = 10_000
# HTTP/2 streams a stub connection may have open (granian's default; the
# services' is [edge]/[proxy] http2_max_streams).
STUB_HTTP2_STREAMS = 200
# Connections granian serves past max_in_flight: enough for the excess to be
# answered 503 (and for /healthz) rather than queued unanswered.
ADMISSION_MARGIN = 1024

SERVICES = {
    "gateway": "flatgate.proxy.gateway.onebox:create_app",
    "proxy": "flatgate.proxy.service.app:create_app",
    "stub": "flatgate.proxy.stub:create_app",
    "edge": "flatgate.edge_translator.app:create_app",
}


def _common(p: argparse.ArgumentParser, default_iface: str | None = None) -> None:
    p.add_argument("--config", help="TOML config file (default: the embedded default config)")
    p.add_argument("--host", help="listen address")
    p.add_argument("--port", type=int, help="listen port")
    p.add_argument("--workers", type=int, help="granian worker processes")
    if default_iface is not None:
        p.add_argument(
            "--interface",
            choices=("asgi", "rsgi"),
            help="granian interface (asgi has backpressure for slow readers; rsgi is leaner)",
        )
    p.add_argument("--log-level", default="warning", help="granian log level (default: warning)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flatgate",
        description="flatgate: a zero-copy FlatBuffers ingress proxy for LLM traffic",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    proxy = sub.add_parser("proxy", help="the internal .fbs proxy")
    _common(proxy, "asgi")
    proxy.add_argument("--transport", choices=("fast", "httpx"), help="upstream HTTP client")
    stub = sub.add_parser(
        "stub",
        help="the built-in model server (fbs, openai, openai-responses, anthropic, bedrock, "
        "gemini or vertex)",
    )
    _common(stub, "asgi")
    stub.add_argument(
        "--protocol",
        choices=tuple(PROTOCOLS),
        help="the API it serves: fbs (CompletionRequest, default), openai (Chat Completions), "
        "openai-responses (the Responses API), anthropic (Messages), bedrock (Bedrock "
        "Runtime: Converse, and InvokeModel for Claude and embeddings), gemini (the Gemini "
        "API) or vertex (Vertex AI: Claude's rawPredict, Gemini's generateContent)",
    )
    stub.add_argument("--ttft-ms", type=float, help="time to first token, ms")
    stub.add_argument("--itl-ms", type=float, help="inter-token delay, ms")
    stub.add_argument(
        "--canned", type=int, help="answer N fixed deltas without reading the body (benchmarks)"
    )
    stub.add_argument("--fault", choices=FAULTS, help="inject a fault in every request")
    stub.add_argument(
        "--tools",
        choices=TOOL_MODES,
        help="when it calls a tool: named (only the one tool_choice names, default) or "
        "offered (also the one function tool a request offers)",
    )
    stub.add_argument(
        "--api-key",
        help="require this key (openai: Authorization: Bearer or Azure's api-key, anthropic: "
        "x-api-key, bedrock: a Bedrock API key or the SigV4 secret access key, any access key "
        "id, gemini: x-goog-api-key, vertex: a bearer token that is the key or <key>.<any>)",
    )
    gateway = sub.add_parser(
        "gateway",
        help="edge and proxy in one process: the OpenAI API, routed in process ([edge] address)",
    )
    _common(gateway, "asgi")
    edge = sub.add_parser("edge", help="the OpenAI-compatible JSON edge")
    _common(edge, "asgi")
    edge.add_argument("--proxy-url", help="where the proxy listens, e.g. http://127.0.0.1:8081")
    up = sub.add_parser("up", help="the stubs and the gateway together on one config")
    up.add_argument("--config", help="TOML config file (default: the embedded default config)")
    up.add_argument(
        "--split",
        action="store_true",
        help="run the edge and the proxy as two services (HTTP between them) instead of "
        "the one-process gateway",
    )
    up.add_argument("--log-level", default="warning")
    check = sub.add_parser(
        "check",
        help="validate a config without starting anything; lists every problem, exits 2 if any",
    )
    check.add_argument("--config", help="TOML config file (default: the embedded default config)")
    check.add_argument(
        "--up",
        action="store_true",
        help="also check what clashes when flatgate up runs every service on one host",
    )
    check.add_argument("--split", action="store_true", help="with --up: for flatgate up --split")
    check.add_argument(
        "--effective",
        action="store_true",
        help="print the whole effective document (file, environment and defaults; "
        "secrets masked) as JSON",
    )
    reload = sub.add_parser(
        "reload",
        help="check a config file and have every running worker that reads it apply it "
        "(keys, limits, models, routes; no restart, no connection dropped)",
    )
    reload.add_argument("--config", help="TOML config file (default: $FLATGATE_CONFIG)")
    return parser


def _report(command: str, problems: list[str]) -> int:
    """Print a config's problems, one per line; the exit status (2)."""
    head = f"flatgate {command}: bad config"
    if len(problems) == 1:
        print(f"{head}: {problems[0]}", file=sys.stderr)
    else:
        print(f"{head}, {len(problems)} problems:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
    return 2


def _check(args: argparse.Namespace) -> int:
    path = os.path.abspath(args.config) if args.config else None
    scope: Scope = ("split" if args.split else "up") if args.up else "all"
    if args.effective:
        doc, problems = checked(path, scope=scope)
        if doc is None:
            return _report("check", problems)
        print(json.dumps(effective_document(doc), indent=2))
        return 0
    problems = file_problems(path, scope=scope)
    if problems:
        return _report("check", problems)
    print(f"flatgate check: {path or os.environ.get(ENV_CONFIG) or 'the embedded default'}: ok")
    return 0


def _reload(args: argparse.Namespace) -> int:
    """Check the file, then touch it: each worker watching it (``[edge]`` /
    ``[proxy]`` ``reload_seconds``) re-reads it within that interval. A bad
    file is not touched (the workers would reject it too)."""
    path = args.config or os.environ.get(ENV_CONFIG)
    if not path:
        print(
            "flatgate reload: no config file: pass --config or set FLATGATE_CONFIG "
            "(the embedded default cannot change)",
            file=sys.stderr,
        )
        return 2
    path = os.path.abspath(path)
    problems = file_problems(path, scope="all")
    if problems:
        return _report("reload", problems)
    os.utime(path)
    print(f"flatgate reload: {path}: ok; workers apply it within their reload_seconds")
    return 0


def _export(service: str, args: argparse.Namespace, keys: Sequence[str]) -> None:
    """Flags that were given become FLATGATE_<SERVICE>_<KEY> variables."""
    if args.config:
        os.environ[ENV_CONFIG] = os.path.abspath(args.config)
    for key in keys:
        value = getattr(args, key, None)
        if value is not None:
            raw = f'"{value}"' if isinstance(value, str) else str(value)
            os.environ[env_name(service, key)] = raw


def _serve(service: str, args: argparse.Namespace) -> int:
    from granian.constants import Interfaces, Loops
    from granian.http import HTTP2Settings

    from flatgate.proxy.gateway.server import DrainingServer

    keys = ["host", "port", "workers", "interface"]
    if service == "proxy":
        keys.append("transport")
    elif service == "stub":
        keys += ["protocol", "ttft_ms", "itl_ms", "canned", "fault", "tools", "api_key"]
    elif service == "edge":
        keys = ["host", "port", "workers", "interface", "proxy_url"]
    # The gateway listens where the edge would: its flags set [edge] keys.
    _export("edge" if service == "gateway" else service, args, keys)
    doc, problems = checked(None, scope=SERVICE_SCOPES[service])
    if doc is None:
        return _report(service, problems)
    # What matters of what it runs with: where it listens, what it serves.
    print(startup_line(service, doc), file=sys.stderr, flush=True)
    section: ServerSection
    tls: dict[str, Path] = {}
    if service in ("edge", "gateway"):
        section = doc.edge
        if doc.edge.tls_cert_file:
            tls = {"ssl_cert": Path(doc.edge.tls_cert_file), "ssl_key": Path(doc.edge.tls_key_file)}
    else:
        section = doc.proxy if service == "proxy" else doc.stub
    in_flight, streams = STUB_CONNECTIONS, STUB_HTTP2_STREAMS
    if isinstance(section, ServiceSection):
        in_flight, streams = section.max_in_flight, section.http2_max_streams
    server = DrainingServer(
        SERVICES[service],
        grace=section.drain_grace_seconds,
        seconds=section.drain_seconds,
        address=section.host,
        port=section.port,
        workers=section.workers,
        interface=Interfaces.RSGI if section.interface == "rsgi" else Interfaces.ASGI,
        factory=True,
        loop=Loops.auto,
        log_level=args.log_level,
        log_access=False,
        # granian serves at most `backpressure` connections per worker at once
        # (by default backlog / workers = 1,024): each token stream holds one
        # for its whole life, so admission control (max_in_flight) bounds
        # instead, and the listen queue is as deep as the kernel allows.
        backlog=LISTEN_BACKLOG,
        backpressure=in_flight + ADMISSION_MARGIN,
        http2_settings=HTTP2Settings(max_concurrent_streams=streams),
        **tls,
    )
    with _shared_metrics(service):
        server.serve()
    return 0


@contextlib.contextmanager
def _shared_metrics(service: str) -> Iterator[None]:
    """A directory the service's workers share their metrics through
    (``plumbing.aggregate``), named to them in ``$FLATGATE_METRICS_DIR``,
    removed when the server stops. Not for the stub (no metrics), nor off
    POSIX (no check that a worker is alive): there, each worker answers alone."""
    if service == "stub" or os.name != "posix":
        os.environ.pop(ENV_METRICS_DIR, None)
        yield
        return
    path = tempfile.mkdtemp(prefix=f"flatgate-{service}-metrics-")
    os.environ[ENV_METRICS_DIR] = path
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


# Health probes of the children on this host: their certificates are not the point.
_PROBE_TLS = ssl.create_default_context()
_PROBE_TLS.check_hostname, _PROBE_TLS.verify_mode = False, ssl.CERT_NONE


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1, context=_PROBE_TLS) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.1)
    return False


EXAMPLE = """\
flatgate is up: {middle}  ->  stubs: {stubs}
Models: {models}

Try it with curl:
  curl -s {es}://{eh}:{ep}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "hello flatgate"}}]}}'

Or with the openai SDK (pip install openai):
  from openai import OpenAI
  client = OpenAI(base_url="{es}://{eh}:{ep}/v1", api_key="unused")
  stream = client.chat.completions.create(model="{model}", stream=True,
      messages=[{{"role": "user", "content": "hello flatgate, word by word"}}])
  print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))

Ctrl-C stops them all.
"""


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


# What flatgate up gives a child past its own drain_seconds before killing it.
STOP_MARGIN = 2.0


class _Child:
    """One service ``up`` runs: its command, its health URL, its drain time."""

    def __init__(self, command: list[str], health: str, drain_seconds: float) -> None:
        self.command = command
        self.health = health
        self.budget = drain_seconds + STOP_MARGIN
        self.proc: subprocess.Popen[bytes] | None = None


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux ``/proc``; elsewhere none known)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stop_children(children: list[_Child]) -> bool:
    """SIGTERM to every child at once (each drains), then wait for each up to
    its drain time and a margin; kill what is left, workers included (a second
    Ctrl-C or SIGTERM kills at once). Whether all stopped by themselves."""
    hurry = False

    def hurry_up(*_: object) -> None:
        nonlocal hurry
        hurry = True

    signal.signal(signal.SIGINT, hurry_up)
    signal.signal(signal.SIGTERM, hurry_up)
    started = time.monotonic()
    running = [c for c in children if c.proc is not None and c.proc.poll() is None]
    for child in running:
        assert child.proc is not None
        child.proc.send_signal(signal.SIGTERM)
    clean = True
    while running:
        now = time.monotonic()
        for child in list(running):
            assert child.proc is not None
            if child.proc.poll() is not None:
                running.remove(child)
                clean = clean and child.proc.returncode == 0
            elif hurry or now - started > child.budget:
                print(
                    f"flatgate up: killing {child.command[0]}, still running after "
                    f"{now - started:.1f}s",
                    file=sys.stderr,
                )
                for pid in [*_descendants(child.proc.pid), child.proc.pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                child.proc.wait()
                running.remove(child)
                clean = False
        time.sleep(0.05)
    return clean


def _up(args: argparse.Namespace) -> int:
    config_path = os.path.abspath(args.config) if args.config else None
    doc, problems = checked(config_path, scope="split" if args.split else "up")
    if doc is None:
        return _report("up", problems)
    base = [sys.executable, "-m", "flatgate.proxy.gateway.cli"]
    extra = (["--config", config_path] if config_path else []) + ["--log-level", args.log_level]
    e, p, s = doc.edge, doc.proxy, doc.stub
    edge_scheme = "https" if e.tls_cert_file else "http"
    children = [
        _Child(
            ["stub", "--protocol", protocol, "--port", str(s.port + i)],
            f"http://{s.host}:{s.port + i}/healthz",
            s.drain_seconds,
        )
        for i, protocol in enumerate(s.up)
    ]
    front = f"{edge_scheme}://{e.host}:{e.port}/healthz"
    if args.split:
        children += [
            _Child(["proxy"], f"http://{p.host}:{p.port}/healthz", p.drain_seconds),
            _Child(["edge"], front, e.drain_seconds),
        ]
        middle = f"edge {edge_scheme}://{e.host}:{e.port}  ->  proxy http://{p.host}:{p.port}"
    else:
        children.append(_Child(["gateway"], front, e.drain_seconds))
        middle = f"gateway (edge and proxy in one process) {edge_scheme}://{e.host}:{e.port}"
    signal.signal(signal.SIGTERM, _interrupt)
    code = 1
    try:
        for child in children:
            child.proc = subprocess.Popen([*base, *child.command, *extra])
            if not _wait_healthy(child.health, child.proc):
                print(
                    f"flatgate up: {child.command[0]} did not become healthy at {child.health}",
                    file=sys.stderr,
                )
                return 1
        model = doc.models[0].name if doc.models else "flatgate-echo"
        stubs = ", ".join(f"{pr} http://{s.host}:{s.port + i}" for i, pr in enumerate(s.up))
        models = ", ".join(m.name for m in doc.models)
        print(
            EXAMPLE.format(
                es=edge_scheme,
                eh=e.host,
                ep=e.port,
                middle=middle,
                stubs=stubs,
                model=model,
                models=models,
            ),
            flush=True,
        )
        while all(c.proc is not None and c.proc.poll() is None for c in children):
            time.sleep(0.2)
        print("flatgate up: a service exited; stopping the others", file=sys.stderr)
    except KeyboardInterrupt:
        code = 0
    finally:
        if not _stop_children(children):
            code = 1
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        return _up(args)
    if args.command == "check":
        return _check(args)
    if args.command == "reload":
        return _reload(args)
    return _serve(args.command, args)


if __name__ == "__main__":
    sys.exit(main())
