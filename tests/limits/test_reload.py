"""Live reload (``plumbing.reload``, ``flatgate reload``): a real ``flatgate
gateway`` rewritten under streaming load keeps its workers, its streams and
its memory store's counts, and applies a new key, limit, alias and route; a
bad file is refused by ``flatgate reload`` and by the workers. And, in
process, ``ConfigWatch.check`` and ``ProxyServer.reload``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from flatgate.proxy.plumbing.reload import ConfigWatch
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.wire.schema import Provider
from tests.servers import Server, running
from tests.stacks import QUIET, stack_config, toml

KEYS = {"load": "sk-load", "counted": "sk-counted", "limited": "sk-limited"}
NEWCOMER = "sk-newcomer"
WORDS = "one two three four five six seven eight"
REJECTED = "rejected; the config in force stays"


def replace(path: Path, text: str) -> None:
    """Write ``path`` whole, at once: a worker never reads half a file."""
    part = path.with_suffix(".part")
    part.write_text(text)
    os.replace(part, path)


def config(stub: Server, *, new: bool = False, bad: bool = False) -> str:
    """The gateway's config; ``new`` adds a key, an alias, a model and its
    route, and raises tenant limited's rate; ``bad`` breaks a limit."""
    keys = {**KEYS, "newcomer": NEWCOMER} if new else KEYS
    fresh = {"fresh": "SelfHosted"} if new else {}
    return toml(
        stack_config(
            proxy=QUIET,
            backends={"fbs": stub.url},
            routes={"echo": "fbs", **dict.fromkeys(fresh, "fbs")},
            edge=QUIET,
            models={
                "echo": {"provider": "SelfHosted", "aliases": ["echo-next"] if new else []},
                **fresh,
            },
            keys={key: tenant for tenant, key in keys.items()},
            limits=[
                {"tenant": "counted", "requests_per_minute": 0 if bad else 3},
                {"tenant": "limited", "requests_per_minute": 100 if new else 1},
            ],
        )
    )


def flatgate_reload(path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLATGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "flatgate.proxy.gateway.cli", "reload", "--config", str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


def worker_pids(server: Server) -> set[int]:
    """The gateway's worker processes: the children of its server process."""
    pid = server.proc.pid
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(p) for p in (task / "children").read_text().split())
    return found


def ask(server: Server, key: str, model: str = "echo") -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=20,
    )


def poll(what: str, check: Any, seconds: float = 5.0) -> None:
    """Call ``check()`` until it is true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.05)


@dataclass(frozen=True)
class Stream:
    started: float
    ended: float
    status: int
    text: str
    done: bool
    error: str = ""

    @property
    def whole(self) -> bool:
        return self.status == 200 and self.done and not self.error


def stream(client: httpx.Client, text: str, first: threading.Event | None = None) -> Stream:
    """One streamed completion of tenant load's, read to its end."""
    started = time.monotonic()
    body = {"model": "echo", "stream": True, "messages": [{"role": "user", "content": text}]}
    auth = {"authorization": f"Bearer {KEYS['load']}"}
    parts: list[str] = []
    done = False
    try:
        with client.stream("POST", "/v1/chat/completions", json=body, headers=auth) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    for choice in json.loads(line[6:])["choices"]:
                        parts.append(choice["delta"].get("content") or "")
                    if first is not None:
                        first.set()
            return Stream(started, time.monotonic(), r.status_code, "".join(parts), done)
    except httpx.HTTPError as exc:
        return Stream(started, time.monotonic(), 0, "".join(parts), done, repr(exc))


@contextmanager
def load(url: str, threads: int = 3) -> Iterator[list[Stream]]:
    """Streams sent back to back from ``threads`` threads until the block
    ends; every one's outcome lands in the list yielded."""
    stop = threading.Event()
    outcomes: list[Stream] = []

    def run() -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                outcomes.append(stream(client, WORDS))

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    try:
        yield outcomes
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=60)


def remaining(r: httpx.Response) -> int:
    assert r.status_code == 200, r.text
    return int(r.headers["x-ratelimit-remaining-requests"])


@pytest.mark.integration
def test_a_reload_under_load_keeps_workers_streams_and_counts(tmp_path: Path) -> None:
    long_text = " ".join(f"w{i}" for i in range(200))  # 200 deltas, 20 ms apart
    with running("stub", ["--itl-ms", "20"], tmp_path) as stub:
        path = tmp_path / "flatgate.toml"
        replace(path, config(stub))
        with running("gateway", ["--config", str(path)], tmp_path) as gateway:
            workers = worker_pids(gateway)
            assert workers
            assert [remaining(ask(gateway, KEYS["counted"])) for _ in range(2)] == [2, 1]
            assert ask(gateway, KEYS["limited"]).status_code == 200
            assert ask(gateway, KEYS["limited"]).status_code == 429
            assert ask(gateway, NEWCOMER).status_code == 401
            assert ask(gateway, KEYS["load"], "fresh").json()["error"]["code"] == "model_not_found"

            first = threading.Event()
            long: list[Stream] = []

            def read_long() -> None:
                with httpx.Client(base_url=gateway.url, timeout=30) as client:
                    long.append(stream(client, long_text, first))

            with load(gateway.url) as outcomes:
                poll("streams under way", lambda: len(outcomes) >= 3)
                reader = threading.Thread(target=read_long)
                reader.start()
                assert first.wait(10)  # the long stream is in flight
                touched = time.monotonic()
                replace(path, config(stub, new=True))
                done = flatgate_reload(path)
                assert done.returncode == 0, done.stderr
                assert "ok" in done.stdout
                poll("the new key works", lambda: ask(gateway, NEWCOMER).status_code == 200)
                seen = time.monotonic()
                before = len(outcomes)
                poll("streams after the reload", lambda: len(outcomes) >= before + 3)
                reader.join(timeout=60)

            # Not one stream failed or was cut, the long one through the reload.
            assert len(outcomes) >= 6
            assert [s for s in outcomes if not s.whole] == []
            assert all(s.text == WORDS for s in outcomes)
            (through,) = long
            assert through.whole and through.text == long_text
            assert through.started < touched and through.ended > seen
            # The same workers, and the memory store's counts with them.
            assert worker_pids(gateway) == workers
            assert remaining(ask(gateway, KEYS["counted"])) == 0
            assert ask(gateway, KEYS["counted"]).status_code == 429
            # The new limit, alias, model and route.
            poll("the raised limit", lambda: ask(gateway, KEYS["limited"]).status_code == 200)
            raised = ask(gateway, KEYS["limited"])
            assert raised.headers["x-ratelimit-limit-requests"] == "100"
            assert ask(gateway, NEWCOMER, "echo-next").status_code == 200
            assert ask(gateway, NEWCOMER, "fresh").json()["choices"][0]["message"]["content"]
            listed = httpx.get(
                f"{gateway.url}/v1/models", headers={"authorization": f"Bearer {NEWCOMER}"}
            )
            assert [m["id"] for m in listed.json()["data"]] == ["echo", "echo-next", "fresh"]

            # A bad file: flatgate reload names the problem and leaves it be;
            # written anyway, the workers reject it and keep the config in force.
            assert REJECTED not in gateway.log.read_text()
            replace(path, config(stub, bad=True))  # no newcomer, no fresh either
            refused = flatgate_reload(path)
            assert refused.returncode == 2
            assert "limits[0].requests_per_minute" in refused.stderr
            poll("the workers reject it", lambda: REJECTED in gateway.log.read_text())
            assert ask(gateway, NEWCOMER, "fresh").status_code == 200
            assert worker_pids(gateway) == workers
            # A good file after it is applied (the watch goes on).
            replace(path, config(stub))
            poll("the newcomer gone", lambda: ask(gateway, NEWCOMER).status_code == 401)
            assert worker_pids(gateway) == workers


# -- in process ----------------------------------------------------------------


class Applied:
    """A ``ConfigWatch`` callback that reads the file; a file starting with
    "bad" is rejected."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.texts: list[str] = []

    def __call__(self) -> None:
        text = self.path.read_text()
        if text.startswith("bad"):
            raise ValueError(f"problem in {text!r}")
        self.texts.append(text)


def test_config_watch_applies_a_change_and_rejects_a_bad_file_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "flatgate.toml"
    replace(path, "good 1")
    applied = Applied(path)
    watch = ConfigWatch(str(path), applied, name="test")
    assert not watch.check()  # as it was when the watch began
    replace(path, "good 2")
    assert watch.check()
    assert not watch.check()  # applied once
    assert (applied.texts, watch.applied, watch.rejected) == (["good 2"], 1, 0)
    caplog.set_level(logging.INFO, logger="flatgate.reload")
    replace(path, "bad 3")
    assert not watch.check()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].startswith("test: config ") and "problem in 'bad 3'" in errors[0]
    assert not watch.check()  # the same bad file is not tried again
    assert (watch.applied, watch.rejected) == (1, 1)
    os.utime(path, ns=(1, 1))  # touched (flatgate reload would not, being bad): tried again
    assert not watch.check()
    assert watch.rejected == 2
    replace(path, "good 4")
    assert watch.check()
    assert applied.texts == ["good 2", "good 4"]
    path.unlink()  # gone: nothing to apply, nothing rejected
    assert not watch.check()
    assert (watch.applied, watch.rejected) == (2, 2)


async def test_config_watch_looks_on_its_interval(tmp_path: Path) -> None:
    path = tmp_path / "flatgate.toml"
    replace(path, "good 1")
    applied = Applied(path)
    watch = ConfigWatch(str(path), applied, interval=0.01)
    watch.install(asyncio.get_running_loop())
    try:
        replace(path, "good 2")
        deadline = time.monotonic() + 5
        while not applied.texts:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
    finally:
        watch.stop()
    assert applied.texts == ["good 2"]


def _proxy_config(b_url: str, *, extra_route: bool = False) -> dict[str, Any]:
    routes = [{"model": "m-*", "backends": ["a", "b"]}]
    if extra_route:
        routes.append({"model": "n", "backends": ["b"]})
    return {
        "proxy": {"access_log": False},
        "backends": [
            {"name": "a", "url": "http://127.0.0.1:9"},
            {"name": "b", "url": b_url},
        ],
        "routes": routes,
    }


def test_proxy_reload_keeps_an_unchanged_backend() -> None:
    server = ProxyServer(parse_config(_proxy_config("http://127.0.0.1:10"), environ={}))
    a, b = server.backends["a"], server.backends["b"]
    a.outstanding, a.failures = 2, 1  # state a reload must not lose
    assert server.routes.lookup(Provider.SelfHosted, b"n") is None
    new = _proxy_config("http://127.0.0.1:11", extra_route=True)
    new["proxy"]["max_attempts"] = 1  # [proxy] stays as started
    server.reload(parse_config(new, environ={}))
    assert server.backends["a"] is a
    assert (a.outstanding, a.failures) == (2, 1)
    assert server.backends["b"] is not b
    assert server.backends["b"].url == "http://127.0.0.1:11"
    target = server.routes.lookup(Provider.SelfHosted, b"n")
    assert target is not None and target.backends == (server.backends["b"],)
    wide = server.routes.lookup(Provider.SelfHosted, b"m-1")
    assert wide is not None and wide.backends == (a, server.backends["b"])
    assert server.config.proxy.max_attempts == 3
