"""The edge under hardening with requests in flight, through real servers on
loopback in front of the slow stack (a stub taking 3 s to the first token, an
edge admitting one request): a client leaving before the first token cancels
the stream through the edge and the proxy, and the edge refuses what comes past
``max_in_flight``.

The rest of the edge's hardening is ``test_edge_hardening``; the stacks' config
and the client's helpers are ``hardening_stack``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest

from tests.edge.hardening_stack import (
    COMPLETIONS,
    MODEL,
    Ports,
    ametric,
    await_for,
    stack_toml,
    user,
)
from tests.servers import Server, free_port, spawn
from tests.stacks import start_all, stop_all

pytestmark = pytest.mark.integration


# -- the slow stack: 3 s to the first token; an edge admitting one request ---


@dataclass
class Slow:
    stub: Server
    proxy: Server
    edge: Server


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slow]:
    d = tmp_path_factory.mktemp("edge-hardening-slow")
    ports = Ports(free_port(), free_port(), free_port())
    config = d / "slow.toml"
    config.write_text(
        stack_toml(
            ports,
            backend={"first_byte_timeout": 10.0},
            edge={"max_in_flight": 1},
        )
    )
    args = ["--config", str(config)]
    servers = [
        spawn("stub", [*args, "--ttft-ms", "3000"], d, port=ports.stub),
        spawn("proxy", args, d, port=ports.proxy),
        spawn("edge", args, d, port=ports.edge),
    ]
    start_all(servers)
    try:
        stub, proxy, edge = servers
        yield Slow(stub, proxy, edge)
    finally:
        stop_all(servers)


# -- 3. Leaving before the first token cancels upstream ------------------------


async def test_leaving_before_the_first_token_cancels_through_edge_and_proxy(slow: Slow) -> None:
    """The client leaves 0.5 s into a 3 s time to first token: the stub counts
    the stream cancelled within 1.5 s of the client leaving."""
    async with httpx.AsyncClient(timeout=30) as client:
        before = (await client.get(f"{slow.stub.url}/stats")).json()["cancelled"]
        async with httpx.AsyncClient(timeout=30) as leaver:
            task = asyncio.ensure_future(
                leaver.post(
                    f"{slow.edge.url}{COMPLETIONS}",
                    json={"model": MODEL, "stream": True, "messages": user("never read")},
                )
            )
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        left = time.monotonic()
        cancelled = before
        while time.monotonic() - left < 1.5:
            cancelled = (await client.get(f"{slow.stub.url}/stats")).json()["cancelled"]
            if cancelled > before:
                break
            await asyncio.sleep(0.05)
        assert cancelled == before + 1, "the stub did not see the stream cancelled in 1.5 s"

        async def settled() -> bool:
            active = await ametric(client, slow.proxy.url, "flatgate_active_streams")
            in_flight = await ametric(client, slow.edge.url, "flatgate_edge_in_flight")
            return active == 0 and in_flight == 0

        await await_for(settled)
        assert await ametric(client, slow.proxy.url, "flatgate_active_streams") == 0
        assert await ametric(client, slow.edge.url, "flatgate_edge_in_flight") == 0


# -- 4. Admission at the edge ---------------------------------------------------


async def test_edge_admission_refuses_past_max_in_flight(slow: Slow) -> None:
    sdk = openai.AsyncOpenAI(base_url=f"{slow.edge.url}/v1", api_key="unused", max_retries=0)
    async with httpx.AsyncClient(timeout=30) as client:
        edge = slow.edge.url

        async def in_flight(n: int) -> bool:
            return await ametric(client, edge, "flatgate_edge_in_flight") == n

        assert await await_for(lambda: in_flight(0))
        refused = await ametric(client, edge, "flatgate_edge_admission_refused_total")
        holder = asyncio.ensure_future(
            sdk.chat.completions.create(model=MODEL, messages=user("first in"))
        )
        try:
            assert await await_for(lambda: in_flight(1)), "the slow request never got in"
            with pytest.raises(openai.InternalServerError) as info:
                await sdk.chat.completions.create(model=MODEL, messages=user("second"))
            err = info.value
            assert err.status_code == 503
            assert err.code == "server_busy" and err.type == "api_error", err.body
            assert err.response.headers["retry-after"] == "1"
            # The one in flight is served all the same.
            done = await holder
            assert done.choices[0].message.content == "first in"
        finally:
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
            await sdk.close()
        assert await ametric(client, edge, "flatgate_edge_admission_refused_total") == refused + 1
        assert await await_for(lambda: in_flight(0))
