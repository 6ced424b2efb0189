"""What the edge's hardening tests share: a stack's config and its start and
stop, and a client's view of it (SSE bodies, the stub's counts, metrics, waits).

Each stack is one config file holding ``[proxy]``, ``[stub]``, ``[[backends]]``,
``[[routes]]``, ``[edge]`` and ``[[models]]`` (stub -> proxy -> edge, each a
``flatgate`` subprocess started by the CLI); the edges that differ only in
their ``[edge]`` table read files of their own, in front of the same proxy.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tests.servers import Server

MODEL = "flatgate-echo"
COMPLETIONS = "/v1/chat/completions"


@dataclass(frozen=True)
class Ports:
    stub: int
    proxy: int
    edge: int


def stack_toml(
    ports: Ports,
    *,
    stub: str = "",
    backend: str = "",
    proxy: str = "",
    edge: str = "",
    access_log: bool = False,
    keys: str = "",
) -> str:
    """One stack's config: stub, proxy, one backend and route, edge, one model."""
    return f"""
[proxy]
port = {ports.proxy}
cooldown_seconds = 0
access_log = false
{proxy}

[stub]
port = {ports.stub}
{stub}

[[backends]]
name = "stub"
url = "http://127.0.0.1:{ports.stub}"
{backend}

[[routes]]
model = "{MODEL}"
provider = "SelfHosted"
backends = ["stub"]

[edge]
port = {ports.edge}
proxy_url = "http://127.0.0.1:{ports.proxy}"
access_log = {"true" if access_log else "false"}
{edge}

[[models]]
name = "{MODEL}"
provider = "SelfHosted"
{keys}
"""


def start_all(servers: list[Server], wait: Callable[[Server], None] | None = None) -> None:
    """Wait for each to be healthy; stop them all if one is not."""
    try:
        for s in servers:
            (wait or Server.wait_healthy)(s)
    except BaseException:
        for s in reversed(servers):
            s.stop()
        raise


def stop_all(servers: list[Server]) -> None:
    for s in reversed(servers):
        s.stop()


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def sse_events(raw: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order (comments skipped)."""
    out = []
    for event in raw.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(line[6:].decode())
    return out


def streamed_text(events: list[str]) -> str:
    assert events[-1] == "[DONE]"
    parts = []
    for data in events[:-1]:
        chunk = json.loads(data)
        for choice in chunk["choices"]:
            parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


def stub_stats(stub: Server) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(f"{stub.url}/stats").json()
    return stats


def wait_for(predicate: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def await_for(predicate: Callable[[], Awaitable[bool]], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not await predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def ametric(client: httpx.AsyncClient, url: str, name: str) -> float:
    """``metric``, without blocking the loop the requests under test run on."""
    text = (await client.get(f"{url}/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )
