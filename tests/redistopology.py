"""Real Redis topologies for tests: a Redis Cluster and a Sentinel setup.

Built from ``tests.redisserver.RedisServer`` processes (Debian's
``redis-server``; Sentinel is the same binary with ``--sentinel``): free
loopback ports, no persistence, a temporary directory, a process group each,
all stopped at teardown, also when start-up fails halfway. Nothing here
knows flatgate. The topology is asked of the servers on every call, never
cached, so it stays true across failovers.

- ``ClusterTopology``: N masters (3), node ``i + N`` the replica of node
  ``i``; node timeout 1 s, or a longer one (15 s for a cluster nobody kills)
  set once it is ready. ``key_on_node``; ``kill``, ``failover``,
  ``wait_promoted``, ``restart``, ``heal``; ``describe`` (the live ports,
  each live node's ``CLUSTER NODES``, a dead node's log tail) is in every
  failure's message.
- ``SentinelTopology``: a primary, a replica, three sentinels (quorum 2, down
  after 1 s); ready when each sentinel sees the replica and the two others.
  ``primary``, ``kill_primary``, ``wait_failover``.
- ``password``: ``requirepass``/``masterauth`` on data nodes (and ``sentinel
  auth-pass``); ``sentinel_password``: ``requirepass`` on the sentinels.

A cluster is ready when every node is up and tells the same roles, masters
and slots in ``CLUSTER NODES``, no node in doubt, and each master has one
replica in sync by both sides' ``INFO replication``. Not by ``CLUSTER
SLOTS``: a node learns that another became a replica only from that one's
own ping or pong, which may take T/2 (T the node timeout: 7.5 s at 15 s),
and until then every node agrees on a map of masters with no replicas. Hence
the short timeout until ready. Started and stopped by ``tests.redisfixtures``.
"""

from __future__ import annotations

import binascii
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import redis

from tests.redisserver import RedisServer, command, connect, server_info, stop_all, wait_for
from tests.servers import free_port

__all__ = [
    "HOST",
    "LONG_NODE_TIMEOUT_MS",
    "SHORT_NODE_TIMEOUT_MS",
    "SLOTS",
    "ClusterNode",
    "ClusterTopology",
    "Role",
    "SentinelTopology",
    "command",
    "key_slot",
    "wait_for",
]

HOST = "127.0.0.1"
SLOTS = 16384
MASTER_NAME = "mymaster"
# A replica's first sync is diskless and would wait 5 s for more replicas.
FAST_SYNC = ("--repl-diskless-sync-delay", "0")
# No replica moves to another master on its own: each master keeps the one
# it was given (a restarted old master still follows its promoted replica).
CLUSTER_ARGS = (
    "--cluster-enabled yes --cluster-config-file nodes-{port}.conf --cluster-port {bus} "
    "--cluster-allow-replica-migration no"
)
# A short node timeout, so that a dead master is failed over in about 2 s; a
# cluster nobody kills (the session's) gets a long one, so that a busy
# machine's late pings never fail a master over on their own.
SHORT_NODE_TIMEOUT_MS = 1000
LONG_NODE_TIMEOUT_MS = 15000
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


S = TypeVar("S", bound=RedisServer)


def _retried(make: Callable[[], tuple[S, list[str]]], tries: int = 3) -> tuple[S, list[str]]:
    """``make()`` a server on a free port and start it with its arguments;
    other ports are tried when one was taken meanwhile (the server exits:
    Redis does not run without its port, nor a cluster node without its bus
    port)."""
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
        server, bus = RedisServer(directory), free_port()
        while bus == server.port:  # both were free when asked: they may match
            bus = free_port()
        return server, [
            a.replace("{port}", str(server.port)).replace("{bus}", str(bus)) for a in args
        ]

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


# Flags of a node some other node is not yet (or no longer) sure about.
UNSETTLED_FLAGS = frozenset({"fail", "fail?", "handshake", "noaddr"})


def _lines(text: str) -> list[tuple[ClusterNode, set[str]]]:
    """``CLUSTER NODES``: ``id ip:port@bus flags master-id ping pong epoch
    link slot...``; importing/migrating entries (``[...]``) are skipped.
    Each node with its flags."""
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
        node = ClusterNode(
            host=host or HOST,
            port=int(port),
            node_id=node_id,
            role=Role.REPLICA if "slave" in flag_set else Role.MASTER,
            slots=tuple(sorted(ranges)),
            master_id=None if master == "-" else master,
            failed=bool(flag_set & {"fail", "fail?"}),
        )
        nodes.append((node, flag_set))
    return nodes


class ClusterTopology:
    """A Redis Cluster of ``masters`` masters with one replica each."""

    def __init__(
        self,
        directory: Path,
        masters: int = 3,
        password: str | None = None,
        node_timeout_ms: int = SHORT_NODE_TIMEOUT_MS,
    ) -> None:
        assert masters >= 3, "a cluster that can elect wants 3 masters at least"
        self.directory = directory
        self.node_timeout_ms = node_timeout_ms
        self.masters_count = masters
        self.password = password
        self.servers: dict[int, RedisServer] = {}
        self.args: dict[int, list[str]] = {}  # each node's, for ``restart``
        self.bus: dict[int, int] = {}
        self.killed: set[int] = set()  # by ``kill``, not yet restarted
        self.unready = "not asked yet"  # why the last check said "not yet"

    def start(self, timeout: float = 30.0) -> None:
        """Start the nodes, make the cluster, wait until it is ready."""
        args = [*CLUSTER_ARGS.split(), "--cluster-node-timeout", str(self.node_timeout_ms)]
        args += FAST_SYNC
        if self.password is not None:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        # The short timeout until ready (the later flag wins).
        first = [*args, "--cluster-node-timeout", str(SHORT_NODE_TIMEOUT_MS)]
        for _ in range(2 * self.masters_count):
            server, used = _start(self.directory, first)
            self.servers[server.port] = server
            self.args[server.port] = used[: len(args)]
            self.bus[server.port] = int(used[used.index("--cluster-port") + 1])
        deadline = time.monotonic() + timeout
        self._create(timeout)
        self.wait_ready(max(1.0, deadline - time.monotonic()))
        for port in self.servers:
            self._command(port, "CONFIG", "SET", "cluster-node-timeout", self.node_timeout_ms)

    def _create(self, timeout: float) -> None:
        """``redis-cli --cluster create`` without its 1 s sleeps and shuffles."""
        ports, n = list(self.servers), self.masters_count
        for epoch, port in enumerate(ports, start=1):
            self._command(port, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
        for i, port in enumerate(ports[:n]):
            self._command(
                port, "CLUSTER", "ADDSLOTSRANGE", i * SLOTS // n, (i + 1) * SLOTS // n - 1
            )
        for port in ports[1:]:
            self._command(ports[0], "CLUSTER", "MEET", HOST, port, self.bus[port])

        def met() -> bool:
            for port in ports:
                seen = _lines(str(self._command(port, "CLUSTER", "NODES")))
                if {n.port for n, flags in seen if not flags & UNSETTLED_FLAGS} != set(ports):
                    return self._no(f"{port} does not know every node yet")
            return True

        self._wait("the nodes to meet", met, timeout)
        for master, replica in zip(ports[:n], ports[n:], strict=True):
            self._command(replica, "CLUSTER", "REPLICATE", self._myself(master).node_id)

    def stop(self) -> None:
        stop_all(list(self.servers.values()))

    def nodes(self) -> list[ClusterNode]:
        """Every node, as the first live node that answers sees them."""
        last: Exception | None = None
        for port in self.live_ports():
            try:
                return self.nodes_seen_by(port)
            except (redis.RedisError, OSError) as exc:
                last = exc
        raise RuntimeError(f"no cluster node answers CLUSTER NODES: {last!r}\n{self.describe()}")

    def nodes_seen_by(self, port: int) -> list[ClusterNode]:
        """Every node, as the node at ``port`` sees them."""
        return [node for node, _ in _lines(str(self._command(port, "CLUSTER", "NODES")))]

    def masters(self) -> list[ClusterNode]:
        """The live masters that hold slots, by their first slot."""
        found = [n for n in self.nodes() if n.role is Role.MASTER and n.slots and not n.failed]
        return sorted(found, key=lambda n: n.slots[0])

    def replica_of(self, master: ClusterNode, timeout: float = 20.0) -> ClusterNode:
        """``master``'s live replica, as the two of them tell (not a third
        node's gossip): one the master's ``INFO replication`` has online and
        whose own ``CLUSTER NODES`` line names the master; as it sees itself."""

        def live() -> ClusterNode | None:
            for port in self._online_replicas(master.port):
                own = self._myself(port)
                if own.role is Role.REPLICA and own.master_id == master.node_id:
                    return own
            return None

        try:
            return self._wait(f"a live replica of {master.port}", live, timeout)
        except TimeoutError as exc:
            raise LookupError(f"no live replica of {master.port}: {exc}") from None

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
        self.killed.add(node.port)
        self.servers[node.port].kill()

    def restart(self, node: ClusterNode, tries: int = 3) -> None:
        """Start a killed node again, on its ports and with its nodes.conf:
        it rejoins, as a replica of whoever took its slots (``wait_ready``).
        Tried again if it exits at once (a port taken for a moment)."""
        for attempt in range(tries):
            try:
                self.servers[node.port].start(*self.args[node.port])
                self.killed.discard(node.port)
                return
            except RuntimeError:
                if attempt == tries - 1:
                    raise
                time.sleep(0.5)

    def heal(self, timeout: float = 30.0) -> None:
        """``restart`` every node that is down, then ``wait_ready``."""
        for port in set(self.servers) - set(self.live_ports()):
            self.restart(self.node(port))
        self.wait_ready(timeout)

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
                self._no(f"{replica.port}'s ROLE: {role!r}")
                return None
            if self._agreed(self.live_ports()) is None:
                return None
            now = self.node(replica.port)
            return now if now.role is Role.MASTER and now.slots else None

        return self._wait(f"{replica.port} promoted", promoted, timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll until the cluster is as ``start`` left it, but for who is
        whose replica (see the module's docstring). Every node must run: a
        killed one ``restart``-ed, and any that is down fails this at once."""
        self._wait("the cluster to be ready", self._ready, timeout)

    def describe(self) -> str:
        """The state of things, for a failure's message: the live ports,
        each live node's replication and ``CLUSTER NODES``, each dead node's
        exit code and log tail."""
        live = self.live_ports()
        out = [f"live ports: {live}; killed: {sorted(self.killed)}; last: {self.unready}"]
        for port in live:
            try:
                text = str(self._command(port, "CLUSTER", "NODES")).strip()
                info = server_info(port, "replication", self.password)
                keys = ("role", "connected_slaves", "slave0", "master_port", "master_link_status")
                text = f"{ {k: info[k] for k in keys if k in info} }\n{text}"
            except (redis.RedisError, OSError) as exc:
                text = f"(no answer: {exc!r})"
            out.append(f"-- {port} (bus {self.bus.get(port)}): {text}")
        for port, server in self.servers.items():
            if port not in live:
                code = server.proc.returncode if server.proc is not None else None
                out.append(f"-- {port} is down (exit {code}); its log ends:\n{server.log_tail()}")
        return "\n".join(out)

    def _no(self, reason: str) -> bool:
        """Not yet, and why (for ``describe``)."""
        self.unready = reason
        return False

    def _wait(self, what: str, check: Callable[[], T | None], timeout: float) -> T:
        return wait_for(what, check, timeout, explain=self.describe)

    def _command(self, port: int, *args: str | int) -> object:
        return command(port, *args, password=self.password)

    def _myself(self, port: int) -> ClusterNode:
        """The node at ``port``, as it sees itself."""
        text = str(self._command(port, "CLUSTER", "NODES"))
        return next(node for node, flags in _lines(text) if "myself" in flags)

    def _online_replicas(self, master: int) -> list[int]:
        """The live replicas ``master``'s ``INFO replication`` has online."""
        info = server_info(master, "replication", self.password)
        links = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        online = [int(v["port"]) for v in links if v.get("state") == "online"]
        found = [p for p in online if p in self.live_ports()]
        if info.get("role") != "master" or not found:
            self._no(f"{master} is a {info.get('role')} with replicas {links}")
        return found if info.get("role") == "master" else []

    def _agreed(self, ports: list[int]) -> list[list[tuple[ClusterNode, set[str]]]] | None:
        """Every node at ``ports`` says ``cluster_state:ok`` with all slots and
        tells the same ids, addresses, masters and slots (so the same
        ``CLUSTER SLOTS``); their ``CLUSTER NODES``, or None."""
        views = []
        for port in ports:
            info = self._command(port, "CLUSTER INFO")  # one word: redis-py parses it
            state = ("cluster_state", "cluster_slots_ok")
            if not isinstance(info, dict) or [info.get(k) for k in state] != ["ok", str(SLOTS)]:
                self._no(f"{port}'s CLUSTER INFO: {info!r}")
                return None
            views.append(_lines(str(self._command(port, "CLUSTER", "NODES"))))
        told = {frozenset((n.port, n.node_id, n.master_id, n.slots) for n, _ in v) for v in views}
        if len(told) != 1:
            self._no(f"the nodes tell {len(told)} different maps")
            return None
        return views

    def _ready(self) -> bool:
        """All up and agreed, no node in doubt; N masters, each with one
        replica that both have in sync."""
        down = set(self.servers) - set(self.live_ports())
        if down:
            raise RuntimeError(f"cluster nodes {sorted(down)} are down\n{self.describe()}")
        views = self._agreed(list(self.servers))
        if views is None:
            return False
        for port, seen in zip(self.servers, views, strict=True):
            doubted = [f"{n.port} {f & UNSETTLED_FLAGS}" for n, f in seen if f & UNSETTLED_FLAGS]
            if doubted or {n.port for n, _ in seen} != set(self.servers):
                return self._no(f"{port} sees {doubted or sorted(n.port for n, _ in seen)}")
        nodes = [n for n, _ in views[0]]
        masters = [n for n in nodes if n.role is Role.MASTER and n.slots]
        if len(masters) != self.masters_count:
            return self._no(f"{len(masters)} masters hold slots")
        for master in masters:
            replicas = [n.port for n in nodes if n.master_id == master.node_id]
            if len(replicas) != 1 or self._online_replicas(master.port) != replicas:
                return self._no(f"{master.port}'s replicas: {replicas}, {self.unready}")
            own = server_info(replicas[0], "replication", self.password)
            if own.get("master_port") != master.port or own.get("master_link_status") != "up":
                return self._no(f"{replicas[0]} replicates {own.get('master_port')}: {own!r}")
        return True


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
        wait_for("the sentinels to be ready", self._ready, timeout, explain=self.describe)

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

        return wait_for("the sentinels to fail over", switched, timeout, explain=self.describe)

    def describe(self) -> str:
        """Each data node's and sentinel's port, exit code and log tail."""
        servers = [*self.data, *self.sentinels]
        return "\n".join(
            f"-- {s.port} ({s.proc and s.proc.poll()}):\n{s.log_tail(800)}" for s in servers
        )

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
            with connect(sentinel.port, self.sentinel_password) as client:
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

    def argv(self, *extra: str) -> list[str]:
        return [self.binary, str(self.config), "--sentinel", *extra]
