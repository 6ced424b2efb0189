"""An Anthropic backend that pings through a long silence mid-stream (as
Anthropic's API does while a tool's input is generated) is not cut off by the
edge's ``read_timeout``: the proxy relays each ``ping`` as a heartbeat chunk,
and the edge passes it on (``event: ping`` to a Messages client, an SSE
comment to an OpenAI one). Real proxy and edge processes, split, in front of a
scripted Anthropic server on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import Server, free_port, spawn
from tests.stacks import QUIET, loopback, write_stack

pytestmark = pytest.mark.integration

# The edge gives up after this long without a byte from the proxy; the
# backend stays silent but for pings three times as long.
READ_TIMEOUT = 0.5
SILENCE = 1.5
PING_EVERY = 0.2


def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _delta(text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One Messages API stream: a word, a silence with pings, a word, the end."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-pinging",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    for data in (start, block, _delta("hello ")):
        writer.write(_chunk(_event(data)))
    await writer.drain()
    for _ in range(int(SILENCE / PING_EVERY)):
        await asyncio.sleep(PING_EVERY)
        writer.write(_chunk(_event({"type": "ping"})))
        await writer.drain()
    end = [
        _delta("world"),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 2},
        },
        {"type": "message_stop"},
    ]
    for data in end:
        writer.write(_chunk(_event(data)))
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    writer.close()


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[Server]:
    backend = await asyncio.start_server(_answer, "127.0.0.1", 0)
    port = backend.sockets[0].getsockname()[1]
    proxy_port = free_port()
    config = write_stack(
        tmp_path / "flatgate.toml",
        proxy={"port": proxy_port, **QUIET},
        backends={
            "pinging": {
                "url": f"{loopback(port)}/v1",
                "protocol": "anthropic",
                "api_key": "sk-ant-test",
            }
        },
        routes={"claude-pinging": "pinging"},
        edge={
            "proxy_url": loopback(proxy_port),
            "read_timeout": READ_TIMEOUT,
            "keepalive_seconds": 0,
            **QUIET,
        },
        models={"claude-pinging": "Anthropic"},
    )
    args = ["--config", config]
    proxy = spawn("proxy", args, tmp_path, port=proxy_port)
    front = spawn("edge", args, tmp_path)
    try:
        for s in (proxy, front):
            await asyncio.to_thread(s.wait_healthy)
        yield front
    finally:
        front.stop()
        proxy.stop()
        backend.close()
        await backend.wait_closed()


async def _stream(url: str, path: str, body: dict[str, Any]) -> bytes:
    async with (
        httpx.AsyncClient(timeout=20) as client,
        client.stream("POST", url + path, json=body) as resp,
    ):
        assert resp.status_code == 200
        return b"".join([piece async for piece in resp.aiter_bytes()])


async def test_an_openai_client_hears_keep_alives_and_gets_every_word(edge: Server) -> None:
    body = {
        "model": "claude-pinging",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    raw = await _stream(edge.url, "/v1/chat/completions", body)
    assert raw.count(b": keep-alive\n\n") >= 3
    events = [json.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: {")]
    assert not [e for e in events if "error" in e], raw
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == "hello world"
    assert raw.endswith(b"data: [DONE]\n\n")


async def test_a_messages_client_hears_pings_and_gets_every_word(edge: Server) -> None:
    body = {
        "model": "claude-pinging",
        "max_tokens": 16,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    raw = await _stream(edge.url, "/v1/messages", body)
    names = [line[7:] for line in raw.split(b"\n") if line.startswith(b"event: ")]
    assert names.count(b"ping") >= 3
    assert b"error" not in names, raw
    assert names[-2:] == [b"message_delta", b"message_stop"]
    texts = [
        json.loads(line[6:])["delta"]["text"]
        for line in raw.split(b"\n")
        if line.startswith(b'data: {"type":"content_block_delta"')
    ]
    assert "".join(texts) == "hello world"
