"""A real stack for the Messages API's integration tests: the stub in its three
protocols, a one-process ``flatgate gateway`` in front of them, and a split
edge + proxy on the same config, every one a ``flatgate`` subprocess on a
loopback port.

Models (``[[models]]``, and routes to the stubs): ``echo`` and any
``echo@<fault>`` the tests use go to the fbs stub; ``echo-openai`` and
``echo-anthropic`` to the stub speaking that protocol; ``slow@stall`` to the
fbs stub through a backend that waits half a second for a first byte;
``closed`` to a port nothing listens on; ``busy`` and ``busy@hang:1`` to the
fbs stub through a backend that takes one request at a time. The gateway's ``[[keys]]`` hold one
key, ``KEY`` (tenant ``acme``); ``MAX_BODY`` is the edge's body limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.servers import Server, closed_port, free_port, spawn
from tests.stacks import QUIET, loopback, start_all, stop_all, write_stack

__all__ = ["BACKENDS", "KEY", "MAX_BODY", "MessagesStack", "messages_stack"]

KEY = "sk-ant-flatgate-test"
MAX_BODY = 65536
# The model that reaches each backend protocol.
BACKENDS = {"fbs": "echo", "openai": "echo-openai", "anthropic": "echo-anthropic"}
FAULT_MODELS = (
    "echo@rate_limit",
    "busy",
    "busy@hang:1",
    "echo@reject",
    "echo@die:2",
    "echo@error:2",
    "slow@stall",
    "closed",
)


class MessagesStack:
    def __init__(self, gateway: Server, edge: Server, proxy: Server, stubs: list[Server]) -> None:
        self.gateway, self.edge, self.proxy, self.stubs = gateway, edge, proxy, stubs


def _config(path: Path, *, fbs: int, oai: int, ant: int, proxy: int, closed: int) -> None:
    write_stack(
        path,
        proxy={"port": proxy, **QUIET, "cooldown_seconds": 0, "max_attempts": 1},
        backends={
            "fbs": loopback(fbs),
            "impatient": {"url": loopback(fbs), "first_byte_timeout": 0.5},
            "busy": {"url": loopback(fbs), "max_outstanding": 1},
            "closed": {"url": loopback(closed), "connect_timeout": 1.0},
            "oai": {"url": f"{loopback(oai)}/v1", "protocol": "openai"},
            "ant": {"url": f"{loopback(ant)}/v1", "protocol": "anthropic"},
        },
        routes={
            "echo-openai": "oai",
            "echo-anthropic": "ant",
            "echo*": "fbs",
            "busy*": "busy",
            "slow*": "impatient",
            "closed": "closed",
        },
        edge={"proxy_url": loopback(proxy), "max_body_bytes": MAX_BODY, **QUIET},
        models={
            "echo": "SelfHosted",
            "echo-openai": "OpenAI",
            "echo-anthropic": "Anthropic",
            **dict.fromkeys(FAULT_MODELS, "SelfHosted"),
        },
        keys={KEY: "acme"},
    )


@contextmanager
def messages_stack(d: Path) -> Iterator[MessagesStack]:
    """Start everything (stopped when the block ends)."""
    fbs, oai, ant, proxy = (free_port() for _ in range(4))
    with closed_port() as closed:
        config = d / "flatgate.toml"
        _config(config, fbs=fbs, oai=oai, ant=ant, proxy=proxy, closed=closed)
        args = ["--config", str(config)]
        servers = [
            spawn("stub", ["--protocol", "fbs"], d, port=fbs),
            spawn("stub", ["--protocol", "openai"], d, port=oai),
            spawn("stub", ["--protocol", "anthropic"], d, port=ant),
            spawn("proxy", args, d, port=proxy),
            spawn("edge", args, d),
            spawn("gateway", args, d),
        ]
        start_all(servers)
        try:
            stubs, (proxy_s, edge, gateway) = servers[:3], servers[3:]
            yield MessagesStack(gateway, edge, proxy_s, stubs)
        finally:
            stop_all(servers)
