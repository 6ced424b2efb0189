"""The access log keeps what happens after SIGTERM, in real processes.

During a drain every stream running at the signal (finished, or ended by the
drain's deadline) and every 503 ``draining`` answer on an access-logged path
leaves exactly one line, written before the process exits: on ``flatgate
proxy`` under both interfaces, and on the one-process ``flatgate gateway``.
Which streams finish and which are ended is read from what each client got,
not assumed from the clock.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.lifecycle.test_graceful import FB_FRAMES, Reader, chunks, request, wait_exit
from tests.servers import Server, spawn
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration

GRACE, SECONDS = 1.5, 4.0
# At 250 ms a token: a short answer is done in about a second, a long one
# outlives the drain and is ended by it.
SHORT, LONG = 4, 60


def access_lines(log: Path, service: str) -> dict[str, list[dict[str, Any]]]:
    """The JSON access-log lines of ``service`` in ``log``, by request id."""
    lines: dict[str, list[dict[str, Any]]] = {}
    for text in log.read_text().splitlines():
        if not text.startswith("{"):
            continue
        line = json.loads(text)
        if line.get("service") == service:
            lines.setdefault(line["request_id"], []).append(line)
    return lines


def until_draining(url: str) -> None:
    """Wait (with a deadline) for the server's workers to begin draining."""
    deadline = time.monotonic() + GRACE
    while time.monotonic() < deadline:
        if httpx.get(f"{url}/readyz").status_code == 503:
            return
        time.sleep(0.02)
    raise AssertionError("not draining within the grace")


def one_line(lines: dict[str, list[dict[str, Any]]], rid: str) -> dict[str, Any]:
    got = lines.get(rid, [])
    assert len(got) == 1, (rid, got)
    return got[0]


def drain(
    server: Server, streams: Mapping[str, Reader], refuse: Callable[[], list[str]]
) -> list[str]:
    """Once every stream has begun, SIGTERM to ``server``; while it drains,
    ``refuse`` sends requests that must be refused (their ids). Then the
    server exits 0 and the streams end."""
    for reader in streams.values():
        assert reader.first.wait(5) and reader.status == 200
    os.kill(server.proc.pid, signal.SIGTERM)
    until_draining(server.url)
    refused = refuse()
    code, _ = wait_exit(server.proc, SECONDS + 3)
    assert code == 0
    for reader in streams.values():
        reader.join(5)
    return refused


def check_logged(
    lines: dict[str, list[dict[str, Any]]],
    streams: Mapping[str, Reader],
    ended: set[str],
    refused: list[str],
) -> None:
    """One line for each stream and refusal and nothing else; streams that
    finished and streams the drain ended were both logged, and each refusal
    as a 503 ``draining``."""
    assert set(lines) == {*streams, *refused}
    assert ended and ended != set(streams)
    for rid in refused:
        line = one_line(lines, rid)
        assert (line["status"], line["error"]) == (503, "draining"), line


# -- flatgate proxy ---------------------------------------------------------------


def proxy_stream(url: str, rid: str, words: int) -> Reader:
    body = request(words)
    headers = {**FB_FRAMES, "x-request-id": rid}
    reader = Reader(
        lambda: httpx.stream(
            "POST", f"{url}/v1/completions", content=body, headers=headers, timeout=30
        )
    )
    reader.start()
    return reader


@pytest.mark.parametrize("iface", ["asgi", "rsgi"])
def test_the_proxy_logs_every_stream_and_refusal_of_its_drain(
    tmp_path: Path, slow_stub: Server, iface: str
) -> None:
    cfg = write_stack(
        tmp_path / "p.toml",
        proxy={
            "interface": iface,
            "log_format": "json",
            "drain_grace_seconds": GRACE,
            "drain_seconds": SECONDS,
        },
        backends={"stub": {"url": slow_stub.url, "read_timeout": 30.0}},
        routes={"*": "stub"},
    )
    proxy = spawn("proxy", ["--config", cfg], tmp_path)
    try:
        proxy.wait_healthy()
        streams = {
            f"s{i}": proxy_stream(proxy.url, f"s{i}", SHORT if i % 2 else LONG) for i in range(8)
        }

        def refuse() -> list[str]:
            refused = [f"d{i}" for i in range(3)]
            for rid in refused:
                r = httpx.post(
                    f"{proxy.url}/v1/completions",
                    content=request(2),
                    headers={**FB_FRAMES, "x-request-id": rid},
                )
                assert r.status_code == 503 and r.json()["error"]["code"] == "draining"
            return refused

        refused = drain(proxy, streams, refuse)
    finally:
        proxy.stop()

    lines = access_lines(proxy.log, "proxy")
    ended = set()
    for rid, reader in streams.items():
        last = chunks(reader.body)[-1]
        line = one_line(lines, rid)
        assert line["status"] == 200 and line["backend"] == "stub", line
        if last.error is not None:
            assert last.error.code == "draining"
            ended.add(rid)
        assert line["error"] == (last.error.code if last.error else None), line
    check_logged(lines, streams, ended, refused)


# -- flatgate gateway -------------------------------------------------------------


def chat_stream(url: str, rid: str, words: int) -> Reader:
    payload = {
        "model": "echo",
        "stream": True,
        "messages": [{"role": "user", "content": " ".join(f"w{i}" for i in range(words))}],
    }
    reader = Reader(
        lambda: httpx.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json=payload,
            headers={"x-request-id": rid},
            timeout=30,
        )
    )
    reader.start()
    return reader


def test_the_gateway_logs_every_stream_and_refusal_of_its_drain(
    tmp_path: Path, slow_stub: Server
) -> None:
    cfg = write_stack(
        tmp_path / "g.toml",
        proxy=QUIET,
        backends={"stub": {"url": slow_stub.url, "read_timeout": 30.0}},
        routes={"*": "stub"},
        edge={"log_format": "json", "drain_grace_seconds": GRACE, "drain_seconds": SECONDS},
        models={"echo": "SelfHosted"},
    )
    gateway = spawn("gateway", ["--config", cfg], tmp_path)
    try:
        gateway.wait_healthy()
        streams = {
            f"s{i}": chat_stream(gateway.url, f"s{i}", SHORT if i % 2 else LONG) for i in range(6)
        }
        message = {"model": "echo", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}

        def refuse() -> list[str]:
            refused = {
                "d-chat": (
                    "/v1/chat/completions",
                    {"model": "echo", "messages": message["messages"]},
                ),
                "d-messages": ("/v1/messages", message),
                "d-count": ("/v1/messages/count_tokens", message),
            }
            for rid, (path, payload) in refused.items():
                r = httpx.post(f"{gateway.url}{path}", json=payload, headers={"x-request-id": rid})
                assert r.status_code == 503, (path, r.text)
            return list(refused)

        refused = drain(gateway, streams, refuse)
    finally:
        gateway.stop()

    lines = access_lines(gateway.log, "edge")
    ended = set()
    for rid, reader in streams.items():
        line = one_line(lines, rid)
        assert line["status"] == 200, line
        if b'"draining"' in reader.body:
            ended.add(rid)
            assert line["error"] == "draining", line
        else:
            assert reader.body.rstrip().endswith(b"data: [DONE]"), reader.body[-80:]
            assert line["error"] is None, line
    check_logged(lines, streams, ended, refused)


# -- a worker stopped without a drain ----------------------------------------------


def workers_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in children.read_text().split()]


@pytest.mark.parametrize("iface", ["asgi", "rsgi"])
def test_a_worker_stopped_by_granian_writes_what_it_kept(
    tmp_path: Path, slow_stub: Server, iface: str
) -> None:
    """A signal to the worker alone is granian's own stop, no drain: the
    lines kept for the next batch are written as the worker stops (ASGI's
    lifespan.shutdown, RSGI's ``__rsgi_del__``), not lost with it."""
    cfg = write_stack(
        tmp_path / "p.toml",
        proxy={"interface": iface, "log_format": "json"},
        backends={"stub": slow_stub.url},
        routes={"*": "stub"},
    )
    proxy = spawn("proxy", ["--config", cfg], tmp_path)
    try:
        proxy.wait_healthy()
        (worker,) = workers_of(proxy.proc.pid)
        rids = [f"k{i}" for i in range(3)]
        for rid in rids:
            r = httpx.post(
                f"{proxy.url}/v1/completions",
                content=request(1),
                headers={**FB_FRAMES, "x-request-id": rid},
            )
            assert r.status_code == 200
        os.kill(worker, signal.SIGINT)
        code, _ = wait_exit(proxy.proc, 10)
        assert code == 0
    finally:
        proxy.stop()
    lines = access_lines(proxy.log, "proxy")
    for rid in rids:
        assert one_line(lines, rid)["status"] == 200
