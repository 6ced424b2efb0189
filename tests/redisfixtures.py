"""Pytest fixtures over ``tests.redistopology``'s real Redis topologies.

``running_cluster`` and ``running_sentinel`` start one and stop it when the
block ends (also when start-up fails halfway). Fixtures (import them into a
``conftest.py`` or a test module): ``redis_cluster`` (one per session, with
a long node timeout: fail over if you must, never kill), ``own_redis_cluster``
and ``redis_sentinel`` (one per test: kill freely), ``healed_redis_cluster``
(one per module, made whole again before each test: kill freely; import
``module_redis_cluster`` with it). A cluster takes about 2 s to start (a
Redis master is not writable sooner), so tests that kill share one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redistopology import (
    LONG_NODE_TIMEOUT_MS,
    SHORT_NODE_TIMEOUT_MS,
    ClusterTopology,
    SentinelTopology,
)

__all__ = [
    "healed_redis_cluster",
    "module_redis_cluster",
    "own_redis_cluster",
    "redis_cluster",
    "redis_sentinel",
    "running_cluster",
    "running_sentinel",
]


@contextlib.contextmanager
def running_cluster(
    directory: Path,
    masters: int = 3,
    password: str | None = None,
    node_timeout_ms: int = SHORT_NODE_TIMEOUT_MS,
) -> Iterator[ClusterTopology]:
    """A ready cluster, stopped when the block ends (or start-up fails)."""
    cluster = ClusterTopology(
        directory, masters=masters, password=password, node_timeout_ms=node_timeout_ms
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@contextlib.contextmanager
def running_sentinel(
    directory: Path, password: str | None = None, sentinel_password: str | None = None
) -> Iterator[SentinelTopology]:
    """A ready Sentinel setup, stopped when the block ends (or start-up fails)."""
    topology = SentinelTopology(directory, password=password, sentinel_password=sentinel_password)
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTopology]:
    """One cluster for the session: keep to keys of your own; never kill."""
    path = tmp_path_factory.mktemp("cluster")
    with running_cluster(path, node_timeout_ms=LONG_NODE_TIMEOUT_MS) as cluster:
        yield cluster


@pytest.fixture
def own_redis_cluster(tmp_path: Path) -> Iterator[ClusterTopology]:
    """A cluster of this test's own: kill, fail over."""
    with running_cluster(tmp_path) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def module_redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTopology]:
    """One cluster for the module; its tests take it as ``healed_redis_cluster``."""
    with running_cluster(tmp_path_factory.mktemp("module-cluster")) as cluster:
        yield cluster


@pytest.fixture
def healed_redis_cluster(module_redis_cluster: ClusterTopology) -> ClusterTopology:
    """The module's cluster, every node up and the cluster ready (``heal``:
    what a test before killed is restarted): kill, fail over. Who is whose
    replica is what earlier tests left, so ask (``masters``, ``replica_of``)."""
    module_redis_cluster.heal()
    return module_redis_cluster


@pytest.fixture
def redis_sentinel(tmp_path: Path) -> Iterator[SentinelTopology]:
    """A Sentinel setup of this test's own."""
    with running_sentinel(tmp_path) as topology:
        yield topology
