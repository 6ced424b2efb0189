"""The ``anthropic`` adapter end to end, against the stub speaking the
Messages API over loopback: ``CompletionRequest`` buffers straight to the
proxy, with what only the wire carries (extras of the Messages dialect,
reasoning parts). The stub signs its thinking with a fake it checks when it
comes back, and takes a system message inside ``messages`` only when the
request's ``anthropic-beta`` header names the beta: so a 200 there shows the
header reached it. A request not streamed is answered whole (the stub's
``message``), through ``anthropic_whole``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from flatgate.proxy.backends.anthropic.stub_request import signature
from flatgate.proxy.wire.chunk.frames import Chunk, FrameSplitter
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.writer import RequestWriter, WireMessage
from flatgate.proxy.wire.schema import (
    FLATBUFFERS,
    FRAMES,
    OMITTED_HEADER,
    ApiDialect,
    FinishReason,
    Provider,
    Role,
)
from tests.servers import Server, free_port, spawn
from tests.stacks import loopback, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-upstream-anthropic"
ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
CHAT = int(ApiDialect.OPENAI_CHAT)
THINK = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
MID = {"$headers": {"anthropic-beta": "mid-conversation-system-2026-04-07"}}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("anthropic-e2e")
    ports = {name: free_port() for name in ("stub", "proxy")}
    base = f"{loopback(ports['stub'])}/v1"
    config = write_stack(
        d / "flatgate.toml",
        proxy={"port": ports["proxy"], "cooldown_seconds": 0},
        backends={
            "claude": {"url": base, "protocol": "anthropic", "api_key": KEY},
            "claude-drop": {
                "url": base,
                "protocol": "anthropic",
                "api_key": KEY,
                "drop_unsupported": True,
            },
        },
        routes={"drop*": "claude-drop", "echo*": "claude"},
    )
    servers = [
        spawn("stub", ["--protocol", "anthropic", "--api-key", KEY], d, port=ports["stub"]),
        spawn("proxy", ["--config", config], d, port=ports["proxy"]),
    ]
    try:
        for s in servers:
            s.wait_healthy()
        yield servers[1]
    finally:
        stop_all(servers)


def buffer(
    model: str,
    messages: list[WireMessage],
    extras: dict[str, Any] | None,
    dialect: int,
    stream: bool = True,
) -> bytes:
    w = RequestWriter()
    w.strings(
        request_id="rid-1",
        model_name=model,
        tenant="",
        user="",
        tool_choice_name="",
        response_format=b"",
        extras=json.dumps(extras).encode() if extras else b"",
    )
    w.messages(messages)
    return w.finish(provider=int(Provider.Anthropic), stream=stream, extras_dialect=dialect)


def ask(
    proxy: Server,
    messages: list[WireMessage],
    extras: dict[str, Any] | None = None,
    *,
    dialect: int = ANTHROPIC,
    model: str = "echo",
    stream: bool = True,
) -> tuple[httpx.Response, list[Chunk]]:
    r = httpx.post(
        f"{proxy.url}/v1/completions",
        content=buffer(model, messages, extras, dialect, stream),
        headers={"content-type": FLATBUFFERS, "accept": FRAMES, "x-request-id": "rid-1"},
        timeout=10,
    )
    chunks = (
        [read_chunk(f) for f in FrameSplitter().feed(r.content)] if r.status_code == 200 else []
    )
    return r, chunks


def msg(role: Role, text: str, reasoning: list[ReasoningPart] | None = None) -> WireMessage:
    if reasoning is None:
        return (int(role), text.encode())
    return (int(role), text.encode(), b"", b"", (), False, reasoning)


def text_of(chunks: list[Chunk]) -> str:
    return "".join(c.content for c in chunks)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_thinking_comes_back_as_a_signed_part_and_goes_back(proxy: Server, stream: bool) -> None:
    # Not streamed, the stub is asked for (and answers) a whole message.
    r, chunks = ask(proxy, [msg(Role.User, "think about this")], THINK, stream=stream)
    assert r.status_code == 200
    thought = "The user wrote 3 words; I repeat them back."
    parts = [c.reasoning_part for c in chunks if c.reasoning_part is not None]
    assert parts == [ReasoningPart(thought, signature(thought).encode(), ANTHROPIC)]
    assert "".join(c.reasoning for c in chunks) == thought
    assert text_of(chunks) == "think about this"
    # The next turn sends it back: the stub checks the signature.
    history = [
        msg(Role.User, "think about this"),
        msg(Role.Assistant, "think about this", parts),
        msg(Role.User, "and again"),
    ]
    r, chunks = ask(proxy, history, THINK, stream=stream)
    assert (r.status_code, text_of(chunks)) == (200, "and again")
    forged = ReasoningPart(thought, b"Zm9yZ2Vk", ANTHROPIC)
    history[1] = msg(Role.Assistant, "x", [forged])
    r, _ = ask(proxy, history, THINK, stream=stream)
    assert r.status_code == 400
    assert "Invalid `signature` in `thinking` block" in r.text


def test_a_system_message_in_the_middle_goes_in_place_with_the_clients_beta(
    proxy: Server,
) -> None:
    history = [
        msg(Role.System, "You are terse."),
        msg(Role.User, "first question"),
        msg(Role.Assistant, "first answer"),
        msg(Role.User, "second question"),
        msg(Role.System, "Answer in French from now on."),
    ]
    r, chunks = ask(proxy, history, MID)
    assert (r.status_code, text_of(chunks)) == (200, "second question")
    assert chunks[-1].finish_reason == FinishReason.STOP
    # Without the beta it is a top-level system block (which the stub takes too).
    r, chunks = ask(proxy, history)
    assert (r.status_code, text_of(chunks)) == (200, "second question")


def test_another_dialects_field_is_refused_naming_it_or_dropped_where_configured(
    proxy: Server,
) -> None:
    extras = {"logit_bias": {"50256": -100}}
    r, _ = ask(proxy, [msg(Role.User, "hi")], extras, dialect=CHAT)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "untranslatable_request"
    assert "logit_bias" in error["message"]
    r, chunks = ask(proxy, [msg(Role.User, "hi")], extras, dialect=CHAT, model="drop")
    assert (r.status_code, r.headers[OMITTED_HEADER], text_of(chunks)) == (200, "logit_bias", "hi")
