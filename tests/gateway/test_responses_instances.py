"""Stored responses across two ``flatgate gateway`` instances: on one Redis
(``[state] store``) they are shared, on the memory store they are not.

Two real gateways (granian, two workers each on Redis) read one config, in
front of one ``flatgate stub``, and are spoken to with the official
``openai`` SDK. A response stored on one instance chains, is read, listed and
deleted on the other, for its own tenant only; ``store: false`` is stored
nowhere. The stub echoes the last user message and counts every word it was
sent as input tokens, so a chain is seen reaching the backend. With the
memory store (per worker process, as documented) the other instance does not
find it: the Redis test does not pass by accident.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import redis

from tests.redisserver import RedisServer, running_redis
from tests.servers import Server, spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

MODEL = "echo"
ACME = "sk-instances-acme"
GLOBEX = "sk-instances-globex"
KEYS = {ACME: "acme", GLOBEX: "globex"}
PREFIX = "fg-instances"


class Clients:
    """One SDK client per instance and key, closed at the test's end."""

    def __init__(self) -> None:
        self.made: dict[tuple[str, str], openai.OpenAI] = {}

    def __call__(self, gateway: Server, key: str = ACME) -> openai.OpenAI:
        found = self.made.get((gateway.url, key))
        if found is None:
            found = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
            self.made[gateway.url, key] = found
        return found

    def close(self) -> None:
        for made in self.made.values():
            made.close()


def two_gateways(d: Path, stub: Server, store: str, workers: int) -> list[Server]:
    """Two gateways with one config (its ``[state] store`` is ``store``), started."""
    config = write_stack(
        d / "gateway.toml",
        proxy={**QUIET, "cooldown_seconds": 0},
        backends={"stub": stub.url},
        routes={MODEL: "stub"},
        edge=QUIET,
        models={MODEL: "SelfHosted"},
        keys=KEYS,
        state={"store": store, "key_prefix": PREFIX},
    )
    gateways = [spawn("gateway", ["--config", config, "--workers", str(workers)], d) for _ in "12"]
    start_all(gateways)
    return gateways


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("stub")
    server = spawn("stub", [], d)
    start_all([server])
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def on_redis(
    tmp_path_factory: pytest.TempPathFactory, stub: Server
) -> Iterator[tuple[RedisServer, Server, Server]]:
    d = tmp_path_factory.mktemp("instances-redis")
    with running_redis(d) as server:
        gateways = two_gateways(d, stub, server.url, workers=2)
        try:
            yield server, gateways[0], gateways[1]
        finally:
            stop_all(gateways)


@pytest.fixture
def client() -> Iterator[Clients]:
    clients = Clients()
    try:
        yield clients
    finally:
        clients.close()


def stored_blobs(server: RedisServer) -> int:
    """The stored-response blobs in the Redis (``<key_prefix>:blob:...``)."""
    with redis.Redis.from_url(server.url) as r:
        return sum(1 for _ in r.scan_iter(match=f"{PREFIX}:blob:*"))


def not_found(call: Any, code: str, param: str | None = None) -> None:
    """``call()`` is a 404 with ``code`` (and ``param``)."""
    with pytest.raises(openai.NotFoundError) as info:
        call()
    assert info.value.status_code == 404
    assert info.value.code == code
    assert info.value.param == param


def test_a_chain_crosses_instances_on_one_redis(
    client: Clients,
    on_redis: tuple[RedisServer, Server, Server],
) -> None:
    server, one, two = on_redis
    blobs = stored_blobs(server)
    first = client(one).responses.create(model=MODEL, input="first question asked")
    assert first.output_text == "first question asked"
    assert stored_blobs(server) == blobs + 2  # its input and its output, in this Redis

    second = client(two).responses.create(
        model=MODEL, input="and a second one", previous_response_id=first.id
    )
    assert second.output_text == "and a second one"
    assert second.previous_response_id == first.id
    # The backend was sent the first turn's input and output before the new input.
    assert first.usage is not None and second.usage is not None
    assert first.usage.input_tokens == 3
    assert second.usage.input_tokens == 3 + 3 + 4
    items: list[Any] = list(client(one).responses.input_items.list(second.id, order="asc").data)
    assert [(i.type, i.role, i.content[0].text) for i in items] == [
        ("message", "user", "first question asked"),
        ("message", "assistant", "first question asked"),
        ("message", "user", "and a second one"),
    ]

    # Streamed, back on the first instance, chained on the second's response.
    with client(one).responses.stream(
        model=MODEL, input="third", previous_response_id=second.id
    ) as stream:
        third = stream.get_final_response()
    assert third.output_text == "third"
    assert third.usage is not None and third.usage.input_tokens == 3 + 3 + 4 + 4 + 1
    assert client(two).responses.retrieve(third.id).output_text == "third"

    # Each instance reads what the other stored.
    for gateway in (one, two):
        again = client(gateway).responses.retrieve(first.id)
        assert (again.id, again.output_text) == (first.id, "first question asked")
        assert client(gateway).responses.retrieve(second.id).previous_response_id == first.id


def test_another_tenant_finds_nothing_on_either_instance(
    client: Clients,
    on_redis: tuple[RedisServer, Server, Server],
) -> None:
    _, one, two = on_redis
    mine = client(one).responses.create(model=MODEL, input="only for acme")
    for gateway in (one, two):
        theirs = client(gateway, GLOBEX)
        not_found(lambda t=theirs: t.responses.retrieve(mine.id), "response_not_found")
        not_found(lambda t=theirs: t.responses.input_items.list(mine.id), "response_not_found")
        not_found(lambda t=theirs: t.responses.delete(mine.id), "response_not_found")
        not_found(
            lambda t=theirs: t.responses.create(
                model=MODEL, input="x", previous_response_id=mine.id
            ),
            "previous_response_not_found",
            "previous_response_id",
        )
    # Its own tenant still has it, on both (the other tenant's delete took nothing).
    for gateway in (one, two):
        assert client(gateway).responses.retrieve(mine.id).output_text == "only for acme"


def test_a_delete_on_one_instance_is_seen_on_the_other(
    client: Clients,
    on_redis: tuple[RedisServer, Server, Server],
) -> None:
    server, one, two = on_redis
    r = client(one).responses.create(model=MODEL, input="soon gone")
    assert client(two).responses.retrieve(r.id).output_text == "soon gone"
    blobs = stored_blobs(server)
    client(two).responses.delete(r.id)
    assert stored_blobs(server) == blobs - 2
    for gateway in (one, two):
        c = client(gateway)
        not_found(lambda c=c: c.responses.retrieve(r.id), "response_not_found")
        not_found(lambda c=c: c.responses.input_items.list(r.id), "response_not_found")
        not_found(lambda c=c: c.responses.delete(r.id), "response_not_found")
        not_found(
            lambda c=c: c.responses.create(model=MODEL, input="x", previous_response_id=r.id),
            "previous_response_not_found",
            "previous_response_id",
        )


def test_store_false_is_stored_nowhere(
    client: Clients, on_redis: tuple[RedisServer, Server, Server]
) -> None:
    server, one, two = on_redis
    blobs = stored_blobs(server)
    r = client(one).responses.create(model=MODEL, input="not kept", store=False)
    assert r.output_text == "not kept"
    assert stored_blobs(server) == blobs
    for gateway in (one, two):
        c = client(gateway)
        not_found(lambda c=c: c.responses.retrieve(r.id), "response_not_found")
        not_found(
            lambda c=c: c.responses.create(model=MODEL, input="x", previous_response_id=r.id),
            "previous_response_not_found",
            "previous_response_id",
        )


def test_the_memory_store_is_not_shared_between_instances(
    client: Clients, tmp_path: Path, stub: Server
) -> None:
    # One worker each, so that an instance finds what it stored itself.
    one, two = two_gateways(tmp_path, stub, "memory", workers=1)
    try:
        r = client(one).responses.create(model=MODEL, input="kept here only")
        assert client(one).responses.retrieve(r.id).output_text == "kept here only"
        chained = client(one).responses.create(model=MODEL, input="next", previous_response_id=r.id)
        assert chained.usage is not None and chained.usage.input_tokens == 3 + 3 + 1
        not_found(lambda: client(two).responses.retrieve(r.id), "response_not_found")
        not_found(
            lambda: client(two).responses.create(model=MODEL, input="x", previous_response_id=r.id),
            "previous_response_not_found",
            "previous_response_id",
        )
    finally:
        stop_all([one, two])
