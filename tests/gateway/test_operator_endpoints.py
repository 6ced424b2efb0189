"""What only operators see, kept from everyone else on the public port by
default: ``/metrics`` (tenants, their token counts, routes and backends)
answers a caller on the loopback, or one with the metrics token when
``metrics_token_sha256`` is set, and 401 to any other; ``/readyz`` answers
everyone its status, naming routes and backends only to those same callers;
a 502 names the backend, never its address. The real gateway app in process,
called from a loopback and from another address (no socket)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flatgate.proxy.plumbing.auth import hash_key
from tests.gateway.inprocess_app import caller, gateway_app
from tests.servers import closed_port
from tests.stacks import QUIET, write_stack

KEY = "sk-operator"
TOKEN = "metrics-token"
ELSEWHERE = "10.1.2.3"


@pytest.fixture(autouse=True)
def refused() -> Iterator[None]:
    """The backend's port, refusing connections for the test."""
    global PORT
    with closed_port() as PORT:
        yield


PORT = 0


def config(d: Path, **edge: str) -> str:
    return write_stack(
        d / "gateway.toml",
        proxy=QUIET,
        backends={"hidden-backend": f"http://127.0.0.1:{PORT}"},
        routes={"echo": "hidden-backend"},
        edge={**QUIET, **edge},
        models={"echo": "SelfHosted"},
        keys={KEY: "secret-tenant"},
    )


async def test_without_a_token_only_the_loopback_reads_metrics(tmp_path: Path) -> None:
    app = gateway_app(config(tmp_path))
    async with caller(app, headers={"authorization": f"Bearer {KEY}"}) as local:
        r = await local.post("/v1/chat/completions", json={"model": "echo", "messages": []})
        assert r.status_code in (400, 502)  # a request, so a tenant is counted
        metrics = await local.get("/metrics")
        assert metrics.status_code == 200 and "flatgate_edge_" in metrics.text
    async with caller(app, ELSEWHERE) as stranger:
        refused = await stranger.get("/metrics")
        assert refused.status_code == 401
        assert "metrics_token_sha256" in refused.json()["error"]["message"]
        assert "secret-tenant" not in refused.text


async def test_readyz_names_routes_and_backends_to_operators_only(tmp_path: Path) -> None:
    app = gateway_app(config(tmp_path))
    async with caller(app) as local, caller(app, ELSEWHERE) as stranger:
        mine, theirs = await local.get("/readyz"), await stranger.get("/readyz")
    assert mine.status_code == theirs.status_code
    assert theirs.json() in ({"ready": True}, {"ready": False})
    assert "hidden-backend" not in theirs.text


async def test_with_a_token_every_address_needs_it(tmp_path: Path) -> None:
    app = gateway_app(config(tmp_path, metrics_token_sha256=hash_key(TOKEN)))
    async with caller(app) as local, caller(app, ELSEWHERE) as stranger:
        assert (await local.get("/metrics")).status_code == 401
        with_token = await stranger.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert with_token.status_code == 200


@pytest.mark.parametrize("stream", [False, True])
async def test_a_502_names_the_backend_not_its_address(tmp_path: Path, stream: bool) -> None:
    app = gateway_app(config(tmp_path))
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    async with caller(app, ELSEWHERE, headers={"authorization": f"Bearer {KEY}"}) as c:
        r = await c.post("/v1/chat/completions", json=body)
    assert r.status_code == 502
    message = r.json()["error"]["message"]
    assert "hidden-backend" in message and "127.0.0.1" not in message
