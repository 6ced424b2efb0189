"""End to end through the adapters: the official ``openai`` SDK -> edge -> proxy
-> the stub speaking ``openai`` and ``anthropic`` (and a dead ``fbs`` backend,
to fail over from). What the stub echoes is deterministic, so every answer is
checked exactly; its faults are chosen per request by a model-name suffix."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.backends.helpers import SdkStack
from tests.servers import Server, closed_port, free_port, spawn
from tests.stacks import loopback, stop_all, write_stack

pytestmark = pytest.mark.integration

PROTOCOLS = ("openai", "anthropic")
FAULTS = ("rate_limit", "error:2", "auth", "reject", "die:2", "hang:2")
TEXT = "the quick brown fox jumps over the lazy dog"


def model(protocol: str, fault: str = "") -> str:
    return f"echo-{protocol}@{fault}" if fault else f"echo-{protocol}"


class Stack(SdkStack):
    def __init__(self, edge: Server, proxy: Server) -> None:
        super().__init__(edge)
        self.proxy = proxy


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("sdk")
    refused = contextlib.ExitStack()
    ports = {name: free_port() for name in ("openai", "anthropic", "proxy", "edge")}
    ports["dead"] = refused.enter_context(closed_port())
    config = write_stack(
        d / "flatgate.toml",
        proxy={"port": ports["proxy"], "cooldown_seconds": 0},
        backends={
            "dead-fbs": loopback(ports["dead"]),
            "stub-openai": {
                "url": f"{loopback(ports['openai'])}/v1",
                "protocol": "openai",
                "api_key": "sk-upstream-openai",
            },
            "stub-anthropic": {
                "url": f"{loopback(ports['anthropic'])}/v1",
                "protocol": "anthropic",
                "api_key": "sk-upstream-anthropic",
            },
        },
        routes={
            "echo-openai*": "stub-openai",
            "echo-anthropic*": "stub-anthropic",
            "echo-failover": {"backends": ["dead-fbs"], "fallbacks": ["stub-openai"]},
        },
        edge={"port": ports["edge"], "proxy_url": loopback(ports["proxy"])},
        models={
            **{model(p, f): "OpenAI" for p in PROTOCOLS for f in ("", *FAULTS)},
            "echo-failover": "SelfHosted",
        },
    )
    stubs = [
        spawn(
            "stub",
            ["--protocol", "openai", "--api-key", "sk-upstream-openai"],
            d,
            port=ports["openai"],
        ),
        spawn(
            "stub",
            ["--protocol", "anthropic", "--api-key", "sk-upstream-anthropic"],
            d,
            port=ports["anthropic"],
        ),
    ]
    proxy = spawn("proxy", ["--config", config], d, port=ports["proxy"])
    edge = spawn("edge", ["--config", config], d, port=ports["edge"])
    servers = [*stubs, proxy, edge]
    try:
        for s in servers:
            s.wait_healthy()
        stack = Stack(edge, proxy)
        yield stack
        stack.close()
    finally:
        stop_all(servers)
        refused.close()


def chat(stack: Stack, name: str, **kw: Any) -> list[Any]:
    return list(
        stack.client().chat.completions.create(
            model=name,
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "system", "content": "echo"}, {"role": "user", "content": TEXT}],
            **kw,
        )
    )


def text_of(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def finish_of(chunks: list[Any]) -> list[str]:
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_text_streams_in_whole_words_with_usage(stack: Stack, protocol: str) -> None:
    """The stub sends a word an event; the words the proxy reads together are
    one delta (how many, the reads decide), so each delta is whole words, and
    the text comes before the finish, in chunks of its own."""
    chunks = chat(stack, model(protocol))
    assert text_of(chunks) == TEXT
    assert finish_of(chunks) == ["stop"]
    deltas = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas and all(c.choices[0].finish_reason is None for c in deltas)
    ends = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason]
    assert chunks.index(deltas[-1]) < ends[0]
    words = TEXT.split(" ")
    cuts = list(itertools.accumulate(len(c.choices[0].delta.content) for c in deltas))
    at_words = set(itertools.accumulate(len(w) + 1 for w in words[:-1])) | {len(TEXT)}
    assert set(cuts) <= at_words, [c.choices[0].delta.content for c in deltas]
    assert chunks[-1].usage.completion_tokens == len(TEXT.split())
    assert chunks[-1].usage.prompt_tokens == len(TEXT.split()) + 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_words_reach_the_client_while_the_backend_is_still_answering(
    stack: Stack, protocol: str
) -> None:
    """A real stream: the stub sends two words, then goes silent with the
    stream open; the client has both before anything ends."""
    seen = ""
    with (
        stack.client()
        .with_options(timeout=30)
        .chat.completions.create(
            model=model(protocol, "hang:2"),
            stream=True,
            messages=[{"role": "system", "content": "echo"}, {"role": "user", "content": TEXT}],
        ) as stream
    ):
        for c in stream:
            assert c.choices and c.choices[0].finish_reason is None
            seen += c.choices[0].delta.content or ""
            if seen == "the quick ":
                break
    assert seen == "the quick "


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_non_streaming_answer(stack: Stack, protocol: str) -> None:
    reply = stack.client().chat.completions.create(
        model=model(protocol), messages=[{"role": "user", "content": TEXT}]
    )
    assert reply.choices[0].message.content == TEXT
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens == len(TEXT.split())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_max_tokens_cuts_with_length(stack: Stack, protocol: str) -> None:
    chunks = chat(stack, model(protocol), max_tokens=3)
    assert text_of(chunks) == "the quick brown "
    assert finish_of(chunks) == ["length"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_forced_tool_call_streams_whole(stack: Stack, protocol: str) -> None:
    tool = {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
    }
    chunks = chat(
        stack,
        model(protocol),
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
    )
    calls: dict[int, dict[str, str]] = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or ()) if c.choices else ():
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
            slot["id"] += tc.id or ""
            slot["name"] += (tc.function.name or "") if tc.function else ""
            slot["args"] += (tc.function.arguments or "") if tc.function else ""
    assert list(calls) == [0]
    assert calls[0]["name"] == "lookup" and calls[0]["id"]
    assert json.loads(calls[0]["args"]) == {"input": TEXT}
    assert finish_of(chunks) == ["tool_calls"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_backend_429_reaches_the_sdk_as_a_rate_limit_error(stack: Stack, protocol: str) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        chat(stack, model(protocol, "rate_limit"))
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "1"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mid_stream_error_after_two_words(stack: Stack, protocol: str) -> None:
    stream = stack.client().chat.completions.create(
        model=model(protocol, "error:2"),
        stream=True,
        messages=[{"role": "user", "content": TEXT}],
    )
    seen = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen.append(chunk.choices[0].delta.content)
    assert "".join(seen) == "the quick "
    assert info.value.code == "backend_stream_error"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_connection_cut_mid_stream_is_an_error_not_a_short_answer(
    stack: Stack, protocol: str
) -> None:
    with pytest.raises(openai.APIError) as info:
        chat(stack, model(protocol, "die:2"))
    assert info.value.code in ("backend_disconnected", "backend_stream_truncated")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_backend_refusing_our_key_is_a_gateway_error(stack: Stack, protocol: str) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        chat(stack, model(protocol, "auth"))
    assert info.value.status_code == 502
    assert info.value.code == "backend_auth_failed"
    assert "key" not in info.value.message.lower() or "gateway" in info.value.message.lower()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_backend_400_reaches_the_sdk_as_a_bad_request(stack: Stack, protocol: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        chat(stack, model(protocol, "reject"))
    assert info.value.status_code == 400
    # each backend's own message, passed through
    assert re.search(r"(?i)context length|prompt is too long", info.value.message)


def test_failover_from_a_dead_fbs_backend_to_an_openai_one(stack: Stack) -> None:
    chunks = chat(stack, "echo-failover")
    assert text_of(chunks) == TEXT
    assert finish_of(chunks) == ["stop"]


def test_routes_through_adapters_become_ready(stack: Stack) -> None:
    ready = httpx.get(f"{stack.proxy.url}/readyz").json()
    assert ready["backends"]["stub-openai"] is True  # GET {url}/models
    assert ready["backends"]["stub-anthropic"] is True  # a connection
    assert ready["backends"]["dead-fbs"] is False
    assert ready["routes"]["echo-openai*"] is True
    assert ready["routes"]["echo-failover"] is True
