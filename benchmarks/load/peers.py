"""The load bench's peers: the Portkey gateway, the LiteLLM proxy and vllm-router.

Owns finding the peers where ``benchmarks/peers/setup_peers.sh`` installed
them (a scratch directory outside the repository: ``peers_dir``), checking
that what is installed is what ``benchmarks/peers/`` pins (``find_portkey``,
``find_litellm``, ``find_vllm_router``: the install, or why there is none),
their configuration (``litellm_config``, ``litellm_log_config``,
``portkey_headers``, ``vllm_router_argv``) and starting them on loopback ports
(``start_portkey``, ``start_litellm``, ``start_vllm_router``) in front of the
bench's OpenAI stubs:

- Portkey: ``node build/start-server.js --port=P --headless`` with
  ``NODE_ENV=production`` (no UI), bound to 127.0.0.1 by a preload
  (``LOOPBACK_JS``: the gateway itself listens on every address); the provider
  and the stub's URL travel in each request's headers (``x-portkey-provider:
  openai`` or ``anthropic``, ``x-portkey-custom-host``);
- LiteLLM: ``litellm --config F --num_workers 1`` in its own virtual
  environment, each model an ``openai/<model>`` entry whose ``api_base`` is a
  stub; no database, no master key, no callbacks, no retries, no cooldowns,
  telemetry off, the local model cost map (no fetch at start), logs at ERROR
  and no access log;
- vllm-router (the vLLM project's router, Rust, in its own virtual
  environment): ``vllm-router --worker-urls <stub> --policy round_robin``, one
  router per stub (it routes by worker, not by model), its Prometheus
  listener on a loopback port of its own, logs at ``warning``. It waits for
  ``GET /health`` on its worker to answer 200 before it listens (whatever
  ``--health-check-endpoint`` says): ``worker_problem`` asks first, so that a
  stub without it skips the row with the reason instead of a timeout.

Installs nothing, and never runs a peer from the project's virtual
environment. Must not listen or send beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.results import ROOT
from benchmarks.harness.servers import HOST, Server, ServerGroup, find_tool, free_port

__all__ = [
    "LITELLM_HEALTH",
    "LOOPBACK_JS",
    "PEERS",
    "PINS",
    "VLLM_ROUTER",
    "VLLM_ROUTER_HEALTH",
    "Litellm",
    "Portkey",
    "VllmRouter",
    "find_litellm",
    "find_portkey",
    "find_vllm_router",
    "litellm_config",
    "litellm_log_config",
    "npm_pins",
    "peers_dir",
    "peers_requested",
    "pip_pins",
    "portkey_headers",
    "start_litellm",
    "start_portkey",
    "start_vllm_router",
    "vllm_router_argv",
    "worker_problem",
]

VLLM_ROUTER = "vllm-router"
PEERS = ("portkey", "litellm", VLLM_ROUTER)
PINS = ROOT / "benchmarks" / "peers"
_SETUP = "BENCH_PEERS=1 sh benchmarks/setup_tools.sh"
PORTKEY_PACKAGE = "@portkey-ai/gateway"
# The gateway's own lockfile resolves @hono/node-server to this version.
HONO_SERVER = "@hono/node-server"
LITELLM_HEALTH = "/health/liveliness"
# The router's own liveness; the path it asks its worker is WORKER_HEALTH.
VLLM_ROUTER_HEALTH = "/liveness"
WORKER_HEALTH = "/health"
# Requests that never reach a model: the stub's canned answer needs no key,
# but the peers want one to pass on.
DUMMY_KEY = "sk-bench-dummy"


def peers_requested(flag: bool = False, env: Mapping[str, str] | None = None) -> bool:
    """``--peers`` given, or ``BENCH_PEERS`` set to anything but ``0``."""
    value = (os.environ if env is None else env).get("BENCH_PEERS", "")
    return flag or value not in ("", "0")


def peers_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where setup_peers.sh installs: ``$BENCH_PEERS_DIR``, else
    ``${XDG_CACHE_HOME:-~/.cache}/flatgate-bench``."""
    e = os.environ if env is None else env
    if e.get("BENCH_PEERS_DIR"):
        return Path(e["BENCH_PEERS_DIR"])
    cache = e.get("XDG_CACHE_HOME") or str(Path(e.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "flatgate-bench"


def _lines(text: str) -> list[str]:
    return [x.strip() for x in text.splitlines() if x.strip() and not x.lstrip().startswith("#")]


def npm_pins(text: str) -> dict[str, str]:
    """``name@version`` lines (scoped names too) as ``{name: version}``."""
    out = {}
    for line in _lines(text):
        name, at, version = line.rpartition("@")
        if not at or not name:
            raise ValueError(f"not name@version: {line!r}")
        out[name] = version
    return out


_PIP_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def pip_pins(text: str) -> dict[str, str]:
    """``name==version`` requirement lines (hash continuations skipped) as
    ``{normalised name: version}``."""
    out = {}
    for line in _lines(text):
        if m := _PIP_PIN.match(line):
            out[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[2]
    return out


def _json_version(path: Path) -> str | None:
    try:
        version = json.loads(path.read_text()).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


@dataclass(frozen=True, slots=True)
class Portkey:
    node: str
    entry: Path  # build/start-server.js
    versions: dict[str, str]


@dataclass(frozen=True, slots=True)
class Litellm:
    executable: Path
    version: str


@dataclass(frozen=True, slots=True)
class VllmRouter:
    executable: Path
    version: str


def find_portkey(root: Path, without: Collection[str] = ()) -> Portkey | str:
    """The Portkey install under ``root``, or why it cannot run (the reason names
    no path: it may end up in committed results)."""
    if "portkey" in without:
        return "portkey is treated as absent (--without)"
    node = find_tool("node", without)
    if node is None:
        return "node is not installed"
    modules = root / "portkey" / "node_modules"
    entry = modules / PORTKEY_PACKAGE / "build" / "start-server.js"
    if not entry.is_file():
        return f"not installed (run {_SETUP})"
    pins = npm_pins((PINS / "portkey-packages.txt").read_text())
    found: dict[str, str] = {}
    for name, want in pins.items():
        got = _json_version(modules / name / "package.json")
        if got != want:
            return f"{name} is {got or 'missing'}, pinned {want} (run {_SETUP})"
        found[name] = got
    # A copy nested under another package would be the one the gateway loads.
    for nested in modules.glob(f"**/node_modules/{HONO_SERVER}/package.json"):
        got = _json_version(nested)
        if got != pins.get(HONO_SERVER):
            where = nested.parent.relative_to(modules)
            return f"a nested {HONO_SERVER} {got} ({where}); pinned {pins[HONO_SERVER]}"
    return Portkey(node, entry, found)


def find_litellm(root: Path, without: Collection[str] = ()) -> Litellm | str:
    """The LiteLLM install under ``root`` (its own virtual environment), or why
    it cannot run."""
    if "litellm" in without:
        return "litellm is treated as absent (--without)"
    venv = root / "litellm" / "venv"
    exe = venv / "bin" / "litellm"
    if not exe.is_file():
        return f"not installed (run {_SETUP})"
    want = pip_pins((PINS / "litellm-hashed.txt").read_text())["litellm"]
    infos = sorted(venv.glob("lib/python*/site-packages/litellm-*.dist-info"))
    got = [p.name.removeprefix("litellm-").removesuffix(".dist-info") for p in infos]
    if got != [want]:
        return f"litellm {', '.join(got) or 'missing'} installed, pinned {want} (run {_SETUP})"
    return Litellm(exe, want)


def find_vllm_router(root: Path, without: Collection[str] = ()) -> VllmRouter | str:
    """The vllm-router install under ``root`` (its own virtual environment), or
    why it cannot run."""
    if VLLM_ROUTER in without:
        return "vllm-router is treated as absent (--without)"
    venv = root / VLLM_ROUTER / "venv"
    exe = venv / "bin" / VLLM_ROUTER
    if not exe.is_file():
        return f"not installed (run {_SETUP})"
    want = pip_pins((PINS / "vllm-router-hashed.txt").read_text())[VLLM_ROUTER]
    infos = sorted(venv.glob("lib/python*/site-packages/vllm_router-*.dist-info"))
    got = [p.name.removeprefix("vllm_router-").removesuffix(".dist-info") for p in infos]
    if got != [want]:
        return f"vllm-router {', '.join(got) or 'missing'} installed, pinned {want} (run {_SETUP})"
    return VllmRouter(exe, want)


# node: bind every listening socket the gateway opens to loopback.
LOOPBACK_JS = """\
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number') {
    if (args[1] === undefined || args[1] === null) args[1] = '127.0.0.1';
    else if (typeof args[1] === 'function') args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};
"""


def portkey_headers(base_url: str, provider: str = "openai") -> tuple[tuple[str, str], ...]:
    """The headers that route a request through Portkey to ``base_url``, as
    ``provider`` (``openai``; ``anthropic`` on Portkey's ``/v1/messages``,
    which sends the request on to ``<base_url>/messages`` with the key
    Portkey was given as ``x-api-key``)."""
    return (("x-portkey-provider", provider), ("x-portkey-custom-host", base_url))


def start_portkey(group: ServerGroup, install: Portkey) -> Server:
    preload = group.workdir / "portkey-loopback.cjs"
    preload.write_text(LOOPBACK_JS)
    port = free_port()
    argv = [install.node, "--require", str(preload), str(install.entry)]
    argv += [f"--port={port}", "--headless"]
    env = {"NODE_ENV": "production", "TRUSTED_CUSTOM_HOSTS": HOST}
    drop = ("REDIS_", "NODE_OPTIONS")
    return group.spawn("portkey", argv, port, env=env, health="/", drop_env=drop, cwd=group.workdir)


def litellm_config(models: Mapping[str, str]) -> dict[str, Any]:
    """The proxy config: each model name to an OpenAI-compatible ``api_base``."""
    return {
        "model_list": [
            {
                "model_name": name,
                "litellm_params": {
                    "model": f"openai/{name}",
                    "api_base": base,
                    "api_key": DUMMY_KEY,
                },
            }
            for name, base in models.items()
        ],
        "litellm_settings": {
            "telemetry": False,
            "num_retries": 0,
            "request_timeout": 30,
            "callbacks": [],
            "success_callback": [],
            "failure_callback": [],
            "set_verbose": False,
            "json_logs": False,
            "turn_off_message_logging": True,
            "cache": False,
        },
        "router_settings": {"num_retries": 0, "disable_cooldowns": True},
        "general_settings": {"disable_spend_logs": True, "disable_error_logs": True},
    }


def litellm_log_config() -> dict[str, Any]:
    """uvicorn's logging: errors only, no access log."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"stderr": {"class": "logging.StreamHandler", "level": "ERROR"}},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": "ERROR", "propagate": False},
            "uvicorn.error": {"level": "ERROR"},
            "uvicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
        },
    }


def start_litellm(group: ServerGroup, install: Litellm, models: Mapping[str, str]) -> Server:
    # JSON is YAML: the config loader reads it as is.
    config = group.workdir / "litellm.yaml"
    config.write_text(json.dumps(litellm_config(models), indent=2))
    log_config = group.workdir / "litellm-log.json"
    log_config.write_text(json.dumps(litellm_log_config(), indent=2))
    port = free_port()
    argv = [str(install.executable), "--config", str(config), "--host", HOST]
    argv += ["--port", str(port), "--num_workers", "1", "--telemetry", "False"]
    argv += ["--log_config", str(log_config)]
    env = {
        "LITELLM_LOG": "ERROR",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the cost map at start
        "NO_PROXY": f"{HOST},localhost",
        "no_proxy": f"{HOST},localhost",
    }
    # No database, master key, cache or provider settings from the caller's shell.
    drop = ("DATABASE_", "DIRECT_URL", "LITELLM_", "REDIS_", "OPENAI_", "STORE_MODEL_IN_DB")
    return group.spawn(
        "litellm",
        argv,
        port,
        env=env,
        health=LITELLM_HEALTH,
        drop_env=drop,
        cwd=group.workdir,
    )


def vllm_router_argv(install: VllmRouter, port: int, worker: str, metrics_port: int) -> list[str]:
    """The router on ``port`` in front of the one ``worker`` (a base URL, no
    ``/v1``), round robin (over one worker: no choice to make), Prometheus on
    ``metrics_port``, everything on loopback."""
    argv = [str(install.executable), "--host", HOST, "--port", str(port)]
    argv += ["--worker-urls", worker, "--policy", "round_robin"]
    argv += ["--prometheus-host", HOST, "--prometheus-port", str(metrics_port)]
    return [*argv, "--log-level", "warning"]


# Loopback only: never through a proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def worker_problem(worker: str, seconds: float = 30.0) -> str | None:
    """``None`` once ``GET <worker>/health`` answers 200 (what vllm-router waits
    for before it listens); else why not, at once for an answer that is not
    200, after ``seconds`` for a worker that does not answer."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with _DIRECT.open(worker + WORKER_HEALTH, timeout=2) as answer:
                if answer.status == 200:
                    return None
                status = answer.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError as exc:
            if time.monotonic() > deadline:
                return f"its worker does not answer GET {WORKER_HEALTH}: {exc}"
            time.sleep(0.1)
            continue
        return (
            f"its worker answers GET {WORKER_HEALTH} with {status}: vllm-router waits for a "
            "200 there before it listens"
        )


def start_vllm_router(group: ServerGroup, install: VllmRouter, name: str, worker: str) -> Server:
    port = free_port()
    argv = vllm_router_argv(install, port, worker, free_port())
    # No settings from the caller's shell (a Rust log filter, vLLM's variables).
    drop = ("RUST_LOG", "VLLM_", "HF_")
    return group.spawn(
        name, argv, port, health=VLLM_ROUTER_HEALTH, drop_env=drop, cwd=group.workdir
    )
