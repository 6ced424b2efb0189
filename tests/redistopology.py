"""Real Redis topologies for tests: a Redis Cluster and a Sentinel setup.

Built from ``tests.redisserver.RedisServer`` processes (Debian's
``redis-server``; Sentinel is the same binary with ``--sentinel``): free
loopback ports, no persistence, a temporary directory, a process group each,
all stopped at teardown, also when start-up fails halfway. Nothing here
knows flatgate. The topology is asked of the servers on every call (``CLUSTER
NODES``, ``SENTINEL``), never cached, so it stays true across failovers.

- ``ClusterTopology``: N masters (3) with one replica each, node timeout 1 s,
  made by ``redis-cli --cluster create``; ready when every node says
  ``cluster_state:ok``, all agree on the slot map and every replica is in
  sync. ``key_on_node``; ``kill``, ``failover``, ``wait_promoted``, ``restart``.
- ``SentinelTopology``: a primary, a replica, three sentinels (quorum 2, down
  after 1 s); ready when each sentinel sees the replica and the two others.
  ``primary``, ``kill_primary``, ``wait_failover``.
- ``password``: ``requirepass``/``masterauth`` on data nodes (and ``sentinel
  auth-pass``); ``sentinel_password``: ``requirepass`` on the sentinels.

Fixtures (import them into a ``conftest.py``): ``redis_cluster`` (one per
session: fail over if you must, never kill), ``own_redis_cluster`` and
``redis_sentinel`` (one per test: kill freely).
"""

from __future__ import annotations

import binascii
import contextlib
import enum
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from tests.redisserver import RedisServer
from tests.servers import free_port

__all__ = [
    "HOST",
    "SLOTS",
    "ClusterNode",
    "ClusterTopology",
    "Role",
    "SentinelTopology",
    "command",
    "key_slot",
    "own_redis_cluster",
    "redis_cluster",
    "redis_sentinel",
    "running_cluster",
    "running_sentinel",
    "wait_for",
]

HOST = "127.0.0.1"
SLOTS = 16384
MASTER_NAME = "mymaster"
# A replica's first sync is diskless and would wait 5 s for more replicas.
FAST_SYNC = ("--repl-diskless-sync-delay", "0")
# A short node timeout, so that a dead master is failed over in about 2 s.
CLUSTER_ARGS = (
    "--cluster-enabled yes --cluster-config-file nodes-{port}.conf"
    " --cluster-port {bus} --cluster-node-timeout 1000"
)
T = TypeVar("T")


def key_slot(key: str | bytes) -> int:
    """The cluster slot of ``key``, the Redis way: CRC16 (XMODEM) of the
    hash tag (the text between the first ``{`` and the next ``}``, when that
    is not empty) or of the whole key, modulo 16384."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


def wait_for(what: str, check: Callable[[], T | None], timeout: float) -> T:
    """Poll ``check`` (errors count as "not yet") until it returns something
    other than None or False; fail with the last error after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            result = check()
        except (redis.RedisError, OSError) as exc:
            last, result = exc, None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout}s (last error: {last!r})")
        time.sleep(0.05)


def _client(port: int, password: str | None) -> redis.Redis:
    return redis.Redis(
        host=HOST,
        port=port,
        password=password,
        decode_responses=True,
        socket_timeout=2,
        socket_connect_timeout=2,
    )


def command(port: int, *args: str | int, password: str | None = None) -> object:
    """One command to one server, on a connection of its own, closed after."""
    with _client(port, password) as client:
        return client.execute_command(*args)


def _info(port: int, section: str, password: str | None) -> dict[str, Any]:
    """``INFO section``, parsed by redis-py (``slave0`` is a dict)."""
    with _client(port, password) as client:
        info: dict[str, Any] = client.info(section)
        return info


def stop_all(servers: list[RedisServer]) -> None:
    """SIGTERM to every server at once, then wait for each (SIGKILL after 5 s)."""
    for server in servers:
        if server.proc is not None and server.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.proc.pid, signal.SIGTERM)
    for server in servers:
        server.stop()


S = TypeVar("S", bound=RedisServer)


def _retried(make: Callable[[], tuple[S, list[str]]], tries: int = 3) -> tuple[S, list[str]]:
    """``make()`` a server on a free port and start it with its arguments;
    another port is tried when that one was taken meanwhile."""
    for attempt in range(tries):
        server, args = make()
        try:
            server.start(*args)
        except RuntimeError:
            server.stop()
            if attempt == tries - 1:
                raise
        else:
            return server, args
    raise AssertionError("unreachable")


def _start(directory: Path, args: list[str]) -> tuple[RedisServer, list[str]]:
    """A started data node; ``{port}`` and ``{bus}`` in ``args`` name its ports."""

    def make() -> tuple[RedisServer, list[str]]:
        server, bus = RedisServer(directory), str(free_port())
        return server, [a.replace("{port}", str(server.port)).replace("{bus}", bus) for a in args]

    return _retried(make)


class Role(enum.Enum):
    MASTER = "master"
    REPLICA = "replica"


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One node as the cluster saw it when asked (``ClusterTopology.nodes``)."""

    host: str
    port: int
    node_id: str
    role: Role
    slots: tuple[tuple[int, int], ...]  # inclusive ranges; empty for a replica
    master_id: str | None  # a replica's master
    failed: bool  # down (``fail``) or suspected down (``fail?``)

    def holds(self, slot: int) -> bool:
        return any(low <= slot <= high for low, high in self.slots)


def _parse_nodes(text: str) -> list[ClusterNode]:
    """``CLUSTER NODES``: ``id ip:port@bus flags master-id ping pong epoch
    link slot...``; importing/migrating entries (``[...]``) are skipped."""
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        node_id, address, flags, master = fields[:4]
        host, port = address.split("@", 1)[0].rsplit(":", 1)
        flag_set = set(flags.split(","))
        ranges = []
        for spec in fields[8:]:
            if spec.startswith("["):
                continue
            low, _, high = spec.partition("-")
            ranges.append((int(low), int(high or low)))
        nodes.append(
            ClusterNode(
                host=host or HOST,
                port=int(port),
                node_id=node_id,
                role=Role.REPLICA if "slave" in flag_set else Role.MASTER,
                slots=tuple(sorted(ranges)),
                master_id=None if master == "-" else master,
                failed=bool(flag_set & {"fail", "fail?"}),
            )
        )
    return nodes


class ClusterTopology:
    """A Redis Cluster of ``masters`` masters with one replica each."""

    def __init__(self, directory: Path, masters: int = 3, password: str | None = None) -> None:
        assert masters >= 3, "redis-cli --cluster create wants 3 masters at least"
        self.directory = directory
        self.masters_count = masters
        self.password = password
        self.servers: dict[int, RedisServer] = {}
        self.args: dict[int, list[str]] = {}

    def start(self, timeout: float = 30.0) -> None:
        args = [*CLUSTER_ARGS.split(), *FAST_SYNC]
        if self.password is not None:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        for _ in range(2 * self.masters_count):
            server, self.args[server.port] = _start(self.directory, args)
            self.servers[server.port] = server
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        env = dict(os.environ)
        if self.password is not None:
            env["REDISCLI_AUTH"] = self.password  # not -a: that warns on stderr
        addresses = [f"{HOST}:{port}" for port in self.servers]
        created = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout[-3000:]}")
        wait_for("the cluster to be ready", self._ready, timeout)

    def stop(self) -> None:
        stop_all(list(self.servers.values()))

    def nodes(self) -> list[ClusterNode]:
        """Every node, as the first live node that answers sees them."""
        last: Exception | None = None
        for port in self.live_ports():
            try:
                return _parse_nodes(str(self._command(port, "CLUSTER", "NODES")))
            except (redis.RedisError, OSError) as exc:
                last = exc
        raise RuntimeError(f"no cluster node answers CLUSTER NODES: {last!r}")

    def masters(self) -> list[ClusterNode]:
        """The live masters that hold slots, by their first slot."""
        found = [n for n in self.nodes() if n.role is Role.MASTER and n.slots and not n.failed]
        return sorted(found, key=lambda n: n.slots[0])

    def replica_of(self, master: ClusterNode) -> ClusterNode:
        for node in self.nodes():
            if node.master_id == master.node_id and not node.failed:
                return node
        raise LookupError(f"no live replica of {master.port}")

    def node(self, port: int) -> ClusterNode:
        return next(n for n in self.nodes() if n.port == port)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """Every node's address (for a cluster client's ``startup_nodes``)."""
        return [(HOST, port) for port in self.servers]

    def live_ports(self) -> list[int]:
        return [p for p, s in self.servers.items() if s.proc is not None and s.proc.poll() is None]

    def tag_on_node(self, master: ClusterNode, start: int = 0) -> str:
        """A hash tag (``t<n>``, the smallest n >= start) whose slot ``master`` holds."""
        n = start
        while not master.holds(key_slot(f"t{n}")):
            n += 1
        return f"t{n}"

    def key_on_node(self, master: ClusterNode, name: str = "k") -> str:
        """``{tag}:name``, a key whose slot ``master`` holds."""
        return f"{{{self.tag_on_node(master)}}}:{name}"

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL the node's process (its group), as a crash would."""
        self.servers[node.port].kill()

    def restart(self, node: ClusterNode) -> None:
        """Start a killed node again, on its ports and with its nodes.conf:
        it rejoins, as a replica of whoever took its slots (``wait_ready``)."""
        self.servers[node.port].start(*self.args[node.port])

    def failover(self, replica: ClusterNode) -> None:
        """``CLUSTER FAILOVER`` on the replica: the coordinated kind while
        its master is alive (no write lost), ``TAKEOVER`` once it is dead.
        Returns at once; ``wait_promoted`` waits for the cluster to agree."""
        assert replica.role is Role.REPLICA and replica.master_id is not None
        master = next(n for n in self.nodes() if n.node_id == replica.master_id)
        alive = master.port in self.live_ports()
        args = ("CLUSTER", "FAILOVER") if alive else ("CLUSTER", "FAILOVER", "TAKEOVER")
        try:
            self._command(replica.port, *args)
        except redis.ResponseError:
            # The replica may have promoted itself (a dead master is failed
            # over automatically after about two node timeouts): that is fine.
            role = self._command(replica.port, "ROLE")
            if not (isinstance(role, list) and role[0] == "master"):
                raise

    def wait_promoted(self, replica: ClusterNode, timeout: float = 30.0) -> ClusterNode:
        """Poll until ``replica`` is a master holding slots and every live
        node agrees (``cluster_state:ok``, one slot map); the node, as now."""

        def promoted() -> ClusterNode | None:
            role = self._command(replica.port, "ROLE")
            if not isinstance(role, list) or role[0] != "master":
                return None
            if not self._agreed():
                return None
            now = self.node(replica.port)
            return now if now.role is Role.MASTER and now.slots else None

        return wait_for(f"{replica.port} promoted", promoted, timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll until the cluster is as ``start`` left it: every master with
        a replica in sync (after a kill: once the node is ``restart``-ed)."""
        wait_for("the cluster to be ready", self._ready, timeout)

    def _command(self, port: int, *args: str | int) -> object:
        return command(port, *args, password=self.password)

    def _slot_map(self, port: int) -> frozenset[tuple[int, int, int, tuple[int, ...]]]:
        """``CLUSTER SLOTS`` as this node sees it: (low, high, master, replicas)."""
        answer = self._command(port, "CLUSTER", "SLOTS")
        assert isinstance(answer, list)
        entries = []
        for low, high, master, *replicas in answer:
            entries.append(
                (int(low), int(high), int(master[1]), tuple(sorted(int(r[1]) for r in replicas)))
            )
        return frozenset(entries)

    def _agreed(self) -> bool:
        """Every live node: ``cluster_state:ok``, all slots, the same map."""
        maps = set()
        for port in self.live_ports():
            info = self._command(port, "CLUSTER INFO")  # one word: redis-py parses it
            if (
                not isinstance(info, dict)
                or info.get("cluster_state") != "ok"
                or info.get("cluster_slots_ok") != str(SLOTS)
            ):
                return False
            maps.add(self._slot_map(port))
        return len(maps) == 1

    def _ready(self) -> bool:
        """Agreed, every master with a replica, every replica in sync."""
        if not self._agreed():
            return False
        ports = self.live_ports()
        for port in ports:
            info = _info(port, "replication", self.password)
            if info.get("role") == "master":
                if info.get("connected_slaves") != 1 or info["slave0"]["state"] != "online":
                    return False
            elif info.get("master_link_status") != "up":
                return False
        return len(self.masters()) == self.masters_count


class SentinelTopology:
    """A primary, a replica and three sentinels monitoring ``mymaster``."""

    master_name = MASTER_NAME

    def __init__(
        self,
        directory: Path,
        password: str | None = None,
        sentinel_password: str | None = None,
        sentinels: int = 3,
    ) -> None:
        self.directory = directory
        self.password = password
        self.sentinel_password = sentinel_password
        self.sentinel_count = sentinels
        self.data: list[RedisServer] = []  # primary first, as started
        self.sentinels: list[RedisServer] = []

    def start(self, timeout: float = 30.0) -> None:
        auth = [*FAST_SYNC]
        if self.password is not None:
            auth += ["--requirepass", self.password, "--masterauth", self.password]
        first, _ = _start(self.directory, auth)
        self.data.append(first)
        second, _ = _start(self.directory, [*auth, "--replicaof", HOST, str(first.port)])
        self.data.append(second)
        for _ in range(self.sentinel_count):
            self.sentinels.append(self._start_sentinel(first.port))
        wait_for("the sentinels to be ready", self._ready, timeout)

    def stop(self) -> None:
        stop_all([*self.sentinels, *self.data])

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(HOST, s.port) for s in self.sentinels]

    def primary(self) -> tuple[str, int]:
        """The primary's address, as the first sentinel that answers names it."""
        last: Exception | None = None
        for sentinel in self.sentinels:
            try:
                return self._named(sentinel.port)
            except (redis.RedisError, OSError) as exc:
                last = exc
        raise RuntimeError(f"no sentinel answers: {last!r}")

    def replica(self) -> tuple[str, int]:
        """The data node that is not the primary now."""
        primary = self.primary()
        return next((HOST, s.port) for s in self.data if (HOST, s.port) != primary)

    def kill_primary(self) -> tuple[str, int]:
        """SIGKILL the primary the sentinels name; its address."""
        address = self.primary()
        next(s for s in self.data if s.port == address[1]).kill()
        return address

    def wait_failover(self, timeout: float = 30.0) -> tuple[str, int]:
        """Poll until every sentinel names a live data node as the primary
        and that node says it is one; its address."""
        live = {s.port for s in self.data if s.proc is not None and s.proc.poll() is None}

        def switched() -> tuple[str, int] | None:
            named = {self._named(s.port) for s in self.sentinels}
            if len(named) != 1:
                return None
            (address,) = named
            if address[1] not in live:
                return None
            role = command(address[1], "ROLE", password=self.password)
            return address if isinstance(role, list) and role[0] == "master" else None

        return wait_for("the sentinels to fail over", switched, timeout)

    def _named(self, port: int) -> tuple[str, int]:
        ask = ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
        answer = command(port, *ask, password=self.sentinel_password)
        assert isinstance(answer, list | tuple) and len(answer) == 2, answer
        return (str(answer[0]), int(answer[1]))

    def _start_sentinel(self, primary_port: int) -> RedisServer:
        def make() -> tuple[RedisServer, list[str]]:
            server = _SentinelServer(self.directory)
            name = MASTER_NAME
            config = (
                f"port {server.port}\nbind {HOST}\ndir {self.directory}\n"
                f"sentinel monitor {name} {HOST} {primary_port} 2\n"
                f"sentinel down-after-milliseconds {name} 1000\n"
                f"sentinel failover-timeout {name} 5000\n"
            )
            if self.password is not None:
                config += f"sentinel auth-pass {name} {self.password}\n"
            if self.sentinel_password is not None:
                config += f"requirepass {self.sentinel_password}\n"
                config += f"sentinel sentinel-pass {self.sentinel_password}\n"
            server.config.write_text(config)
            return server, []

        return _retried(make)[0]

    def _ready(self) -> bool:
        """Every sentinel: the primary up, one replica with its link up, and
        the other sentinels (without them there is no quorum to fail over)."""
        for sentinel in self.sentinels:
            with _client(sentinel.port, self.sentinel_password) as client:
                master = client.sentinel_master(MASTER_NAME)
                replicas = client.sentinel_slaves(MASTER_NAME)
            if not master["is_master"] or master["is_sdown"] or master["is_odown"]:
                return False
            if int(master["num-other-sentinels"]) != self.sentinel_count - 1:
                return False
            if len(replicas) != 1 or replicas[0]["is_sdown"]:
                return False
            if replicas[0]["master-link-status"] != "ok":
                return False
        return True


class _SentinelServer(RedisServer):
    """``redis-server <config> --sentinel``: the config file comes first,
    and Sentinel rewrites it (so each sentinel has one of its own)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.config = directory / f"sentinel-{self.port}.conf"
        self.log = directory / f"sentinel-{self.port}.log"

    def start(self, *extra: str, seconds: float = 10.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [self.binary, str(self.config), "--sentinel", *extra],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,
            )
        proc = self.proc

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"sentinel exited early:\n{self.log.read_text()[-2000:]}")
            return self._pings()

        try:
            wait_for("sentinel to answer PING", up, seconds)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"sentinel not ready:\n{self.log.read_text()[-2000:]}") from None


@contextlib.contextmanager
def running_cluster(
    directory: Path, masters: int = 3, password: str | None = None
) -> Iterator[ClusterTopology]:
    """A ready cluster, stopped when the block ends (or start-up fails)."""
    cluster = ClusterTopology(directory, masters=masters, password=password)
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
    with running_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture
def own_redis_cluster(tmp_path: Path) -> Iterator[ClusterTopology]:
    """A cluster of this test's own: kill, fail over."""
    with running_cluster(tmp_path) as cluster:
        yield cluster


@pytest.fixture
def redis_sentinel(tmp_path: Path) -> Iterator[SentinelTopology]:
    """A Sentinel setup of this test's own."""
    with running_sentinel(tmp_path) as topology:
        yield topology
