"""``flatgate``: the command line (``flatgate edge|proxy|stub|up``).

Owns turning flags into settings and starting granian. Flags become
``FLATGATE_<SERVICE>_<KEY>`` environment variables, so the worker processes
granian spawns read the very same settings through ``proxy.config`` /
``edge_translator.config`` (one path for flags, environment and file). The
config is validated here first, so a bad one fails at start-up with the key.

``up`` runs stub, proxy and edge as three child processes with one config and
stops them together on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence

from flatgate.proxy.plumbing.config import ENV_CONFIG, env_name
from flatgate.proxy.service.settings import FAULTS, STUB_PROTOCOLS

__all__ = ["main"]

SERVICES = {
    "proxy": "flatgate.proxy.service.app:create_app",
    "stub": "flatgate.proxy.service.stub:create_app",
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
    stub = sub.add_parser("stub", help="the built-in model server (fbs, openai or anthropic)")
    _common(stub, "asgi")
    stub.add_argument(
        "--protocol",
        choices=STUB_PROTOCOLS,
        help="the API it serves: fbs (CompletionRequest, default), openai (Chat Completions) "
        "or anthropic (Messages)",
    )
    stub.add_argument("--ttft-ms", type=float, help="time to first token, ms")
    stub.add_argument("--itl-ms", type=float, help="inter-token delay, ms")
    stub.add_argument(
        "--canned", type=int, help="answer N fixed deltas without reading the body (benchmarks)"
    )
    stub.add_argument("--fault", choices=FAULTS, help="inject a fault in every request")
    stub.add_argument(
        "--api-key", help="require this key (openai: Authorization: Bearer, anthropic: x-api-key)"
    )
    edge = sub.add_parser("edge", help="the OpenAI-compatible JSON edge")
    _common(edge)
    edge.add_argument("--proxy-url", help="where the proxy listens, e.g. http://127.0.0.1:8081")
    up = sub.add_parser("up", help="stub + proxy + edge together on one config")
    up.add_argument("--config", help="TOML config file (default: the embedded default config)")
    up.add_argument("--log-level", default="warning")
    return parser


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
    from granian import Granian
    from granian.constants import Interfaces, Loops

    keys = ["host", "port", "workers", "interface"]
    if service == "proxy":
        keys.append("transport")
    elif service == "stub":
        keys += ["protocol", "ttft_ms", "itl_ms", "canned", "fault", "api_key"]
    elif service == "edge":
        keys = ["host", "port", "workers", "proxy_url"]
    _export(service, args, keys)
    try:
        if service == "edge":
            from flatgate.edge_translator.config import load_edge_settings

            e = load_edge_settings(None).edge
            host, port, workers, iface = e.host, e.port, e.workers, "rsgi"
        else:
            from flatgate.proxy.service.settings import load_config

            config = load_config()
            section = config.proxy if service == "proxy" else config.stub
            host, port, workers = section.host, section.port, section.workers
            iface = config.proxy.interface if service == "proxy" else config.stub.interface
    except ValueError as exc:
        print(f"flatgate {service}: bad config: {exc}", file=sys.stderr)
        return 2
    Granian(
        SERVICES[service],
        address=host,
        port=port,
        workers=workers,
        interface=Interfaces.RSGI if iface == "rsgi" else Interfaces.ASGI,
        factory=True,
        loop=Loops.auto,
        log_level=args.log_level,
        log_access=False,
        # A worker that has not stopped this long after the signal is killed
        # (granian's ASGI worker can hang in shutdown after serving keep-alive
        # connections).
        workers_kill_timeout=3,
    ).serve()
    return 0


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.1)
    return False


EXAMPLE = """\
flatgate is up: edge http://{eh}:{ep}  ->  proxy http://{ph}:{pp}  ->  stubs: {stubs}
Models: {models}

Try it with curl:
  curl -s http://{eh}:{ep}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "hello flatgate"}}]}}'

Or with the openai SDK (pip install openai):
  from openai import OpenAI
  client = OpenAI(base_url="http://{eh}:{ep}/v1", api_key="unused")
  stream = client.chat.completions.create(model="{model}", stream=True,
      messages=[{{"role": "user", "content": "hello flatgate, word by word"}}])
  print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))

Ctrl-C stops them all.
"""


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _up(args: argparse.Namespace) -> int:
    from flatgate.edge_translator.config import load_edge_settings
    from flatgate.proxy.service.settings import load_config

    config_path = os.path.abspath(args.config) if args.config else None
    try:
        config = load_config(config_path)
        edge = load_edge_settings(config_path)
    except ValueError as exc:
        print(f"flatgate up: bad config: {exc}", file=sys.stderr)
        return 2
    base = [sys.executable, "-m", "flatgate.proxy.gateway.cli"]
    extra = (["--config", config_path] if config_path else []) + ["--log-level", args.log_level]
    e, p, s = edge.edge, config.proxy, config.stub
    plan: list[tuple[list[str], str]] = [
        (["stub", "--protocol", protocol, "--port", str(s.port + i)],
         f"http://{s.host}:{s.port + i}/healthz")
        for i, protocol in enumerate(s.up)
    ]  # fmt: skip
    plan += [
        (["proxy"], f"http://{p.host}:{p.port}/healthz"),
        (["edge"], f"http://{e.host}:{e.port}/healthz"),
    ]
    procs: list[subprocess.Popen[bytes]] = []

    def stop(*_: object) -> None:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in reversed(procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    signal.signal(signal.SIGTERM, _interrupt)
    try:
        for command, health in plan:
            proc = subprocess.Popen([*base, *command, *extra])
            procs.append(proc)
            if not _wait_healthy(health, proc):
                print(
                    f"flatgate up: {command[0]} did not become healthy at {health}",
                    file=sys.stderr,
                )
                stop()
                return 1
        model = edge.models[0].name if edge.models else "flatgate-echo"
        stubs = ", ".join(f"{pr} http://{s.host}:{s.port + i}" for i, pr in enumerate(s.up))
        models = ", ".join(m.name for m in edge.models)
        print(
            EXAMPLE.format(
                eh=e.host, ep=e.port, ph=p.host, pp=p.port, stubs=stubs, model=model, models=models
            ),
            flush=True,
        )
        while all(proc.poll() is None for proc in procs):
            time.sleep(0.2)
        print("flatgate up: a service exited; stopping the others", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        return _up(args)
    return _serve(args.command, args)


if __name__ == "__main__":
    sys.exit(main())
