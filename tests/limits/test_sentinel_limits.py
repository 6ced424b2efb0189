"""Tenants' limits in a Redis primary that Sentinel watches (``[state] store =
"redis+sentinel://<sentinels>/mymaster"``), served by a real ``flatgate
gateway``: the primary killed mid-count, the sentinels fail over, and the
same gateway process (its worker never restarted) counts on in the promoted
replica from what it held; also with passwords on the data nodes
(``password_env``) and on the sentinels (``sentinel_password_env``)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.limits.test_cluster_limits import assert_policy, keys_on, until_limited
from tests.limits.test_shared_limits import ACME, gateway_config, post, stub
from tests.redisfixtures import running_sentinel
from tests.redisserver import unique_prefix
from tests.redistopology import SentinelTopology, command
from tests.servers import Server, running
from tests.stacks import Fields

__all__ = ["stub"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RPM = 3  # acme's requests_per_minute: 20 s per request refilled
DATA_PASSWORD = "sentinel-data-secret"
SENTINEL_PASSWORD = "sentinel-own-secret"
# The environment variables the gateway reads the passwords from.
DATA_ENV = "LIMITS_TEST_DATA_PASSWORD"
SENTINEL_ENV = "LIMITS_TEST_SENTINEL_PASSWORD"


def worker_pids(server: Server) -> list[str]:
    """The server's worker processes (granian's children; Linux ``/proc``)."""
    pid = server.proc.pid
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


async def failover_keeps_the_count(
    topology: SentinelTopology, stub: Server, tmp_path: Path, *, passwords: bool
) -> None:
    """Two of acme's three requests a minute spent (WAIT: the replica holds
    them); the primary killed: 503 ``limits_unavailable`` until the sentinels
    have promoted the replica, then the limits apply again by themselves,
    from the replica's count, in the same gateway process."""
    prefix = unique_prefix()
    names = ",".join(f"{host}:{port}" for host, port in topology.sentinel_addresses)
    state: dict[str, object] = {
        "store": f"redis+sentinel://{names}/{topology.master_name}",
        "key_prefix": prefix,
        "on_store_error": "closed",
        "timeout_ms": 1000,
    }
    env: dict[str, str] = {}
    if passwords:
        state |= {"password_env": DATA_ENV, "sentinel_password_env": SENTINEL_ENV}
        env = {DATA_ENV: DATA_PASSWORD, SENTINEL_ENV: SENTINEL_PASSWORD}
    password = topology.password
    limits: list[Fields] = [{"tenant": "acme", "requests_per_minute": RPM}]
    cfg = gateway_config(tmp_path / "g.toml", stub, state, limits)
    with running("gateway", ["--config", cfg, "--workers", "1"], tmp_path, env=env) as gw:
        workers = worker_pids(gw)
        async with httpx.AsyncClient(timeout=30) as client:
            spent = [await post(client, gw.url, ACME) for _ in range(2)]
            assert [(s.status, s.headers["x-ratelimit-remaining-requests"]) for s in spent] == [
                (200, "2"),
                (200, "1"),
            ]
            old, replica = topology.primary(), topology.replica()
            assert keys_on(old[1], f"{prefix}:{{acme}}:*", password)
            assert command(old[1], "WAIT", 1, 5000, password=password) == 1

            assert topology.kill_primary() == old
            killed = time.time()
            # The sentinels call it down after a second: these see it out.
            gap = [await post(client, gw.url, ACME) for _ in range(3)]
            for s in gap:
                assert_policy(s, "closed")
            assert topology.wait_failover(timeout=30) == replica
            back = await until_limited(client, gw.url, ACME, "closed", gap=gap, seconds=30)
            print(
                f"sentinel: limits back {back.answered - killed:.2f} s after the kill "
                f"({len(gap)} answers in the gap), remaining "
                f"{back.headers['x-ratelimit-remaining-requests']}"
            )
            # A fresh count would say 2; the replica's says 0 (1 once 20 s
            # have passed since the first request).
            assert back.status == 200
            assert int(back.headers["x-ratelimit-remaining-requests"]) < RPM - 1
        assert gw.proc.poll() is None and worker_pids(gw) == workers
        assert DATA_PASSWORD not in gw.log.read_text()
    assert keys_on(replica[1], f"{prefix}:{{acme}}:*", password)


async def test_the_primary_killed_mid_count_and_the_sentinels_failing_over(
    redis_sentinel: SentinelTopology, stub: Server, tmp_path: Path
) -> None:
    await failover_keeps_the_count(redis_sentinel, stub, tmp_path, passwords=False)


async def test_the_same_with_passwords_on_data_nodes_and_sentinels(
    stub: Server, tmp_path: Path
) -> None:
    with running_sentinel(
        tmp_path, password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD
    ) as topology:
        await failover_keeps_the_count(topology, stub, tmp_path, passwords=True)
