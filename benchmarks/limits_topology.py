"""The Redis topologies the limits bench runs on besides one ``redis-server``:
a Redis Cluster and a Sentinel setup, built with the bench's own harness
(``ServerGroup``: a process group each, on free loopback ports, no
persistence, all stopped together at the end, also when start-up fails).

- ``running_cluster``: 3 masters with one replica each
  (``--cluster-enabled yes --cluster-node-timeout 1000``, a bus port of its
  own, ``--repl-diskless-sync-delay 0``), made by ``redis-cli --cluster
  create ... --cluster-replicas 1 --cluster-yes``; ready when every node
  says ``cluster_state:ok`` and each node's own ``ROLE`` is what every
  node's ``CLUSTER NODES`` says of it (a fresh cluster's gossip lists
  replicas as slotless masters for a while). ``Cluster.master_of(slot)``,
  ``replica_of``, ``kill`` (SIGKILL), ``takeover`` (``CLUSTER FAILOVER
  TAKEOVER``).
- ``running_sentinel``: a primary, a replica and ``sentinels`` sentinels
  (``redis-server <conf> --sentinel``; quorum ``sentinels // 2 + 1``,
  down-after-milliseconds 1000, failover-timeout 5000) monitoring
  ``SERVICE``; ready when every sentinel sees the primary up, its replica
  in sync and the other sentinels. ``Sentinels.kill_primary``.

Administration goes through redis-py's synchronous client. Nothing here
knows flatgate; only processes started here are signalled, by their group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from benchmarks.harness.servers import HOST, Server, ServerGroup, TcpServer, find_tool, free_port

__all__ = ["SERVICE", "Cluster", "Sentinels", "running_cluster", "running_sentinel"]

SERVICE = "mymaster"
NODE_TIMEOUT_MS = 1000
FAST_SYNC = ("--repl-diskless-sync-delay", "0")


def _binary(name: str) -> str:
    path = find_tool(name)
    if path is None:
        raise SystemExit(f"{name} is not installed (tests/setup_tools.sh installs it)")
    return path


def _command(port: int, *args: Any) -> Any:
    """One command to the server at ``port``, on a connection of its own."""
    with redis.Redis(HOST, port, socket_timeout=5, decode_responses=True) as client:
        return client.execute_command(*args)


def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError) as exc:
            last = repr(exc)
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what} {last}".strip())


def _kill(server: Server) -> None:
    """SIGKILL to the group started for ``server``, as a crash would."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.proc.pid, signal.SIGKILL)  # the group id is the leader's pid
    server.proc.wait(timeout=5)


def _data_node(group: ServerGroup, name: str, binary: str, extra: list[str]) -> Server:
    """A ``redis-server`` on a free port, no persistence, in a directory of its own."""
    prefix = group.workdir / name
    prefix.mkdir()
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"]
    argv += [*FAST_SYNC, *(a.replace("{port}", str(port)) for a in extra)]
    return group.spawn(name, argv, port, cwd=prefix, kind=TcpServer)


def _started(group: ServerGroup, seconds: float = 10.0) -> None:
    failed = group.wait_healthy(seconds=seconds)
    if failed:
        raise RuntimeError(f"redis did not start: {failed}")


class Cluster:
    """A started Redis Cluster: its nodes by port; ``url`` is its
    ``redis+cluster://`` URL (every node a seed)."""

    def __init__(self, nodes: dict[int, Server]) -> None:
        self.nodes = nodes
        self.url = "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in nodes)

    def live(self) -> list[int]:
        return [p for p, s in self.nodes.items() if s.alive()]

    def views(self) -> dict[int, list[list[str]]]:
        """Each live node's ``CLUSTER NODES``, split into fields."""
        out = {}
        for port in self.live():
            text = str(_command(port, "CLUSTER", "NODES"))
            out[port] = [line.split() for line in text.splitlines() if line.strip()]
        return out

    def ready(self) -> bool:
        """Every node ``cluster_state:ok``, and its own ``ROLE`` (master, or
        the replica of whom) what every node's ``CLUSTER NODES`` says."""
        roles: dict[int, str | int] = {}
        for port in self.nodes:
            info = _command(port, "CLUSTER", "INFO")
            if "cluster_state:ok" not in str(info) and not (
                isinstance(info, dict) and info.get("cluster_state") == "ok"
            ):
                return False
            role = _command(port, "ROLE")
            roles[port] = "master" if role[0] == "master" else int(role[2])
        for view in self.views().values():
            ids = {f[0]: int(f[1].split("@")[0].rsplit(":", 1)[1]) for f in view}
            for fields in view:
                port = ids[fields[0]]
                flags = set(fields[2].split(","))
                if flags & {"fail", "fail?", "handshake", "noaddr"}:
                    return False
                told: str | int = "master" if "master" in flags else ids.get(fields[3], -1)
                if told != roles.get(port):
                    return False
        return True

    def master_of(self, slot: int) -> int:
        """The port of the master holding ``slot``, by ``CLUSTER SLOTS``."""
        for entry in _command(self.live()[0], "CLUSTER", "SLOTS"):
            if int(entry[0]) <= slot <= int(entry[1]):
                return int(entry[2][1])
        raise LookupError(f"no master holds slot {slot}")

    def replica_of(self, master: int) -> int:
        """The port of ``master``'s replica, as its own ``ROLE`` tells."""
        for port in self.live():
            role = _command(port, "ROLE")
            if role[0] == "slave" and int(role[2]) == master:
                return port
        raise LookupError(f"no replica of {master}")

    def kill(self, port: int) -> None:
        _kill(self.nodes[port])

    def takeover(self, replica: int) -> None:
        """``CLUSTER FAILOVER TAKEOVER`` on ``replica``: it takes its dead
        master's slots without waiting for the other masters' votes."""
        _command(replica, "CLUSTER", "FAILOVER", "TAKEOVER")


@contextlib.contextmanager
def running_cluster(masters: int = 3, timeout: float = 60.0) -> Iterator[Cluster]:
    """A Redis Cluster of ``masters`` masters, each with one replica, for
    the block; stopped after."""
    binary, cli = _binary("redis-server"), _binary("redis-cli")
    with tempfile.TemporaryDirectory() as directory:
        group = ServerGroup(Path(directory))
        try:
            args = ["--cluster-enabled", "yes", "--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
            args += ["--cluster-config-file", "nodes-{port}.conf"]
            nodes = {}
            for i in range(2 * masters):
                bus = free_port()
                server = _data_node(group, f"node{i}", binary, [*args, "--cluster-port", str(bus)])
                nodes[server.port] = server
            _started(group)
            create = [cli, "--cluster", "create", *(f"{HOST}:{p}" for p in nodes)]
            create += ["--cluster-replicas", "1", "--cluster-yes"]
            done = subprocess.run(
                create, capture_output=True, text=True, timeout=timeout, check=False
            )
            if done.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]}")
            cluster = Cluster(nodes)
            _wait("the cluster to be ready", cluster.ready, timeout)
            yield cluster
        finally:
            group.stop_all(grace=5)


class Sentinels:
    """A started Sentinel setup: the data nodes (the primary first, as
    started) and the sentinels; ``url`` is its ``redis+sentinel://`` URL."""

    def __init__(self, data: list[Server], sentinels: list[Server]) -> None:
        self.data = data
        self.sentinels = sentinels
        self.quorum = len(sentinels) // 2 + 1
        addresses = ",".join(f"{HOST}:{s.port}" for s in sentinels)
        self.url = f"redis+sentinel://{addresses}/{SERVICE}"

    def primary(self) -> int:
        """The primary's port, as the first sentinel names it."""
        named = _command(self.sentinels[0].port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(named[1])

    def ready(self) -> bool:
        for sentinel in self.sentinels:
            with redis.Redis(HOST, sentinel.port, socket_timeout=5) as client:
                master = client.sentinel_master(SERVICE)
                replicas = client.sentinel_slaves(SERVICE)
            if not master["is_master"] or master["is_sdown"] or master["is_odown"]:
                return False
            if int(master["num-other-sentinels"]) != len(self.sentinels) - 1:
                return False
            if len(replicas) != 1 or replicas[0]["is_sdown"]:
                return False
            if replicas[0]["master-link-status"] != "ok":
                return False
        return True

    def kill_primary(self) -> int:
        """SIGKILL the primary; its port."""
        port = self.primary()
        _kill(next(s for s in self.data if s.port == port))
        return port


@contextlib.contextmanager
def running_sentinel(sentinels: int = 3, timeout: float = 60.0) -> Iterator[Sentinels]:
    """A primary, its replica and ``sentinels`` sentinels, for the block;
    stopped after."""
    binary = _binary("redis-server")
    with tempfile.TemporaryDirectory() as directory:
        group = ServerGroup(Path(directory))
        try:
            primary = _data_node(group, "primary", binary, [])
            replica = _data_node(group, "replica", binary, ["--replicaof", HOST, str(primary.port)])
            _started(group)
            watchers = []
            quorum = sentinels // 2 + 1
            for i in range(sentinels):
                prefix = group.workdir / f"sentinel{i}"
                prefix.mkdir()
                port = free_port()
                conf = prefix / "sentinel.conf"  # Sentinel rewrites it: one each
                conf.write_text(
                    f"port {port}\nbind {HOST}\ndir {prefix}\n"
                    f"sentinel monitor {SERVICE} {HOST} {primary.port} {quorum}\n"
                    f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                    f"sentinel failover-timeout {SERVICE} 5000\n"
                )
                argv = [binary, str(conf), "--sentinel"]
                watchers.append(group.spawn(f"sentinel{i}", argv, port, cwd=prefix, kind=TcpServer))
            _started(group)
            setup = Sentinels([primary, replica], watchers)
            _wait("the sentinels to be ready", setup.ready, timeout)
            yield setup
        finally:
            group.stop_all(grace=5)
