"""The prompt-token estimate: its formula, and which text of a request it counts."""

from __future__ import annotations

import json
import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.request.estimate import (
    BYTES_PER_TOKEN,
    TOKENS_PER_MESSAGE,
    estimate_request,
    estimate_tokens,
)


@pytest.mark.parametrize(
    ("text_bytes", "messages", "tokens"),
    [(0, 0, 0), (1, 1, 5), (4, 1, 5), (5, 1, 6), (400, 3, 112)],
)
def test_the_formula(text_bytes: int, messages: int, tokens: int) -> None:
    assert estimate_tokens(text_bytes, messages) == tokens


@given(st.integers(0, 10**9), st.integers(0, 10**4))
def test_the_formula_is_ceil_bytes_over_four_plus_the_overhead(n: int, m: int) -> None:
    assert estimate_tokens(n, m) == math.ceil(n / BYTES_PER_TOKEN) + TOKENS_PER_MESSAGE * m


def test_it_counts_utf8_bytes_not_characters() -> None:
    buf = build_request("m", [("user", "東京")])  # 2 characters, 6 bytes
    assert estimate_request(buf) == estimate_tokens(6, 1) == 6


def test_every_text_the_model_reads_counts() -> None:
    args = '{"city":"Paris"}'
    schema = {"type": "object"}
    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hello"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get", "arguments": args},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "get", "description": "d", "parameters": schema},
            }
        ],
        "metadata": {"not": "counted"},
        "user": "not counted either",
    }
    buf = write_request(decode_request(json.dumps(chat).encode()), provider=0, model_name="m")
    text = len("sys" + "hello" + "get" + args + "sunny" + "get" + "d" + json.dumps(schema))
    assert estimate_request(buf) == estimate_tokens(text, 4)


def test_both_edges_count_one_conversation_alike() -> None:
    """The same prompt in either client API is the same estimate (the Messages
    edge's system prompt is a message, as the OpenAI one's is)."""
    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "héllo wörld"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "again"},
        ],
    }
    messages = {
        "model": "m",
        "max_tokens": 8,
        "system": "be brief",
        "messages": chat["messages"][1:],
    }
    openai = write_request(decode_request(json.dumps(chat).encode()), provider=0, model_name="m")
    anthropic = write_messages(
        decode_messages(json.dumps(messages).encode()), provider=0, model_name="m"
    )
    assert estimate_request(openai) == estimate_request(anthropic)


@settings(max_examples=50)
@given(st.lists(st.text(max_size=50), min_size=1, max_size=8))
def test_any_conversation(texts: list[str]) -> None:
    body = {
        "model": "m",
        "max_tokens": 8,
        "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(texts)
        ],
    }
    buf = write_messages(decode_messages(msgspec.json.encode(body)), provider=0, model_name="m")
    # Empty assistant turns are dropped on the way to the wire; empty user ones kept.
    kept = [t for i, t in enumerate(texts) if t or i % 2 == 0]
    assert estimate_request(buf) == estimate_tokens(sum(len(t.encode()) for t in kept), len(kept))
