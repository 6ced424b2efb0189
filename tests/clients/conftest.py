"""The stack the real Responses API clients run against (Codex CLI, the Agents
SDK, the openai SDK's ``responses``): the stub in every protocol it speaks,
each behind a backend of that protocol, and one ``flatgate gateway`` (one
worker, so that a memory-stored response is there for the next request) in
front of them, every one a ``flatgate`` subprocess on a loopback port.

Models: ``echo-<protocol>`` reaches the stub speaking ``<protocol>`` (one of
``PROTOCOLS``), and so does ``gpt-5.5-echo-<protocol>``: Codex knows a model
by its name's prefix, and sends a ``gpt-5.5`` model other tools (a freeform
``custom`` tool, ``tool_search``) and settings (``reasoning.effort``,
``text.verbosity``) than one it does not know; ``claude-opus-5-5-echo-<protocol>``
too: Claude Code knows a model by its name's prefix, and sends its default
model, ``claude-opus-5-5``, a per-message effort. ``dropping(<protocol>)``
reaches the stub speaking ``<protocol>`` (one of ``DROPPING``) through a
second backend, one with ``drop_unsupported = true`` (a field it can neither
carry nor map is dropped and named in ``x-flatgate-dropped-fields``, not
refused). The gateway's ``[[keys]]``:
one tenant per key of ``KEYS``. Its access log is JSON lines in its log file.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from flatgate.proxy.backends.registry import PROTOCOLS as STUB_PROTOCOLS
from tests.servers import Server, spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served on a loopback port, in a thread, for the block: the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


__all__ = ["DROPPING", "KEYS", "PROTOCOLS", "ClientStack", "dropping", "model", "stack"]

ROOT = Path(__file__).resolve().parents[2]
# The backend protocols a Responses client is tested through: every one the
# stub speaks (``openai-responses`` once it does).
PROTOCOLS = tuple(
    p for p in ("openai", "anthropic", "fbs", "openai-responses") if p in STUB_PROTOCOLS
)
# The key in clear -> its tenant.
KEYS = {
    "sk-flatgate-codex": "codex",
    "sk-flatgate-agents": "agents",
    "sk-flatgate-claude": "claude",
    "sk-flatgate-acme": "acme",
    "sk-flatgate-globex": "globex",
}
# The protocols also reached through a backend that drops what it cannot take.
DROPPING = tuple(p for p in ("openai", "openai-responses") if p in PROTOCOLS)
_UPSTREAM_KEY = "sk-flatgate-upstream"
_PROVIDERS = {"openai": "OpenAI", "openai-responses": "OpenAI", "anthropic": "Anthropic"}


def model(protocol: str, codex_family: str = "") -> str:
    """The model name that reaches ``protocol``'s stub (``gpt-5.5``: the name
    Codex gives that model's tools and settings)."""
    return f"{codex_family}-echo-{protocol}" if codex_family else f"echo-{protocol}"


def dropping(protocol: str) -> str:
    """The model name that reaches ``protocol``'s stub through a backend with
    ``drop_unsupported = true``."""
    return f"echo-{protocol}-dropping"


class ClientStack:
    """The running gateway, its clients and what it logged."""

    def __init__(self, gateway: Server) -> None:
        self.gateway = gateway
        self.url = gateway.url
        self.base_url = f"{gateway.url}/v1"
        # Every client made, closed with the stack: one left to the garbage
        # collector unclosed raises a ResourceWarning in whichever test the
        # collection lands in.
        self._clients: list[openai.OpenAI] = []

    def client(self, key: str = "sk-flatgate-acme") -> openai.OpenAI:
        """A new client (its own connections) for ``key``."""
        made = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0)
        self._clients.append(made)
        return made

    def close(self) -> None:
        for made in self._clients:
            made.close()

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def responses_served(self) -> int:
        """``flatgate_edge_requests_total`` on ``/v1/responses`` with status 200."""
        total = 0.0
        for line in self.metrics().splitlines():
            m = re.match(r"flatgate_edge_requests_total\{([^}]*)\} (\S+)$", line)
            if m and 'route="/v1/responses"' in m[1] and 'status="200"' in m[1]:
                total += float(m[2])
        return int(total)

    def access(
        self, where: Callable[[dict[str, Any]], bool], at_least: int = 1, seconds: float = 5.0
    ) -> list[dict[str, Any]]:
        """The edge's access-log entries ``where`` holds for, once there are
        ``at_least`` of them or ``seconds`` have passed (lines are written in
        batches, within half a second)."""
        deadline = time.monotonic() + seconds
        while True:
            entries = [e for e in _json_lines(self.gateway.log) if where(e)]
            if len(entries) >= at_least or time.monotonic() > deadline:
                return entries
            time.sleep(0.1)


def _json_lines(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "service" in entry:
                out.append(entry)
    return out


def _backend(protocol: str, port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}"
    if protocol == "fbs":
        return {"url": url}
    return {"url": f"{url}/v1", "protocol": protocol, "api_key": _UPSTREAM_KEY}


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientStack]:
    d = tmp_path_factory.mktemp("clients")
    stubs = {
        p: spawn(
            "stub",
            ["--protocol", p] + ([] if p == "fbs" else ["--api-key", _UPSTREAM_KEY]),
            d,
        )
        for p in PROTOCOLS
    }
    names = {p: (model(p), model(p, "gpt-5.5"), model(p, "claude-opus-5-5")) for p in PROTOCOLS}
    config = write_stack(
        d / "gateway.toml",
        proxy={**QUIET, "cooldown_seconds": 0},
        backends={
            **{f"stub-{p}": _backend(p, s.port) for p, s in stubs.items()},
            **{
                f"stub-{p}-dropping": {**_backend(p, stubs[p].port), "drop_unsupported": True}
                for p in DROPPING
            },
        },
        routes={
            **{name: f"stub-{p}" for p in PROTOCOLS for name in names[p]},
            **{dropping(p): f"stub-{p}-dropping" for p in DROPPING},
        },
        edge={"log_format": "json"},
        models={
            **{name: _PROVIDERS.get(p, "SelfHosted") for p in PROTOCOLS for name in names[p]},
            **{dropping(p): _PROVIDERS[p] for p in DROPPING},
        },
        keys=KEYS,
    )
    gateway = spawn("gateway", ["--config", config, "--workers", "1"], d)
    servers = [*stubs.values(), gateway]
    start_all(servers)
    stack = ClientStack(gateway)
    try:
        yield stack
    finally:
        stack.close()
        stop_all(servers)
