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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from tests.servers import Server
from tests.stacks import QUIET, Fields, loopback, stack_config, start_all, stop_all, toml

__all__ = [
    "COMPLETIONS",
    "MODEL",
    "Ports",
    "ametric",
    "await_for",
    "sse_events",
    "stack_toml",
    "start_all",  # tests.stacks', as test_readme imports them from here
    "stop_all",
    "streamed_text",
    "stub_stats",
    "user",
    "wait_for",
]

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
    stub: Fields | None = None,
    backend: Fields | None = None,
    proxy: Fields | None = None,
    edge: Fields | None = None,
    access_log: bool = False,
    keys: Mapping[str, str] | None = None,
) -> str:
    """One stack's config: stub, proxy, one backend and route, edge, one
    model; each table with the fields given added (``keys``: key -> tenant)."""
    return toml(
        stack_config(
            proxy={"port": ports.proxy, "cooldown_seconds": 0, **QUIET, **(proxy or {})},
            stub={"port": ports.stub, **(stub or {})},
            backends={"stub": {"url": loopback(ports.stub), **(backend or {})}},
            routes={MODEL: {"provider": "SelfHosted", "backends": ["stub"]}},
            edge={
                "port": ports.edge,
                "proxy_url": loopback(ports.proxy),
                "access_log": access_log,
                **(edge or {}),
            },
            models={MODEL: "SelfHosted"},
            keys=keys,
        )
    )


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
