"""Reasoning and prompt-cache usage in Messages answers (``anthropic.render``):
thinking blocks from ``reasoning`` deltas closed by the chunk's
``reasoning_part`` (``signature_delta``, then ``content_block_stop``),
``redacted_thinking`` blocks, the whole message's blocks, and
``cache_creation_input_tokens`` / ``cache_read_input_tokens``. The shapes
are the extended-thinking and prompt-caching docs' examples; every event and
body is read by the official SDK (its stream accumulator and its types)."""

from __future__ import annotations

import json
from typing import Any

import anthropic.types
import pydantic
from anthropic.lib.streaming._messages import accumulate_event

from flatgate.edge_translator.anthropic.render import EventRenderer, MessageAggregator
from flatgate.proxy.wire.chunk.frames import Chunk, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNR"
    "j2YfWXGmKDxH4mPnZ5sQ7vB5URj2pabt"
)
STOP = FinishReason.STOP

THOUGHT = [
    Chunk(reasoning="I need to find "),
    Chunk(reasoning="the GCD of 1071 and 462."),
    Chunk(reasoning_part=ReasoningPart(opaque=SIGNATURE.encode(), dialect=ANTHROPIC)),
    Chunk(reasoning_part=ReasoningPart(opaque=REDACTED.encode(), dialect=ANTHROPIC, redacted=True)),
    Chunk(content="The GCD is 21."),
    Chunk(finish_reason=STOP, usage=Usage(100, 20, cached_tokens=60, cache_write_tokens=30)),
]


def stream(chunks: list[Chunk], input_tokens: int = 0) -> list[dict[str, Any]]:
    r = EventRenderer(message_id="msg_1", model="claude", input_tokens=input_tokens)
    raw = b"".join(r.feed(c) for c in chunks)
    out = []
    for block in raw.decode().split("\n\n")[:-1]:
        name, data = block.split("\n")
        doc = json.loads(data.removeprefix("data: "))
        assert doc["type"] == name.removeprefix("event: ")
        out.append(doc)
    return out


def sdk_message(evs: list[dict[str, Any]]) -> anthropic.types.Message:
    """The message the SDK's stream accumulator builds from the events."""
    snapshot = None
    bufs: dict[int, bytes] = {}
    for doc in evs:
        event = EVENT.validate_python(doc)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    assert snapshot is not None
    return snapshot


def test_a_thinking_block_ends_with_its_signature() -> None:
    evs = stream(THOUGHT)
    kinds = [(e["type"], (e.get("delta") or e.get("content_block") or {}).get("type")) for e in evs]
    assert kinds == [
        ("message_start", None),
        ("content_block_start", "thinking"),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
        ("content_block_start", "redacted_thinking"),
        ("content_block_stop", None),
        ("content_block_start", "text"),
        ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert evs[4]["delta"] == {"type": "signature_delta", "signature": SIGNATURE}
    assert [e["index"] for e in evs[1:11]] == [0, 0, 0, 0, 0, 1, 1, 2, 2, 2]
    message = sdk_message(evs)
    assert [b.model_dump(exclude_none=True) for b in message.content] == [
        {
            "type": "thinking",
            "thinking": "I need to find the GCD of 1071 and 462.",
            "signature": SIGNATURE,
        },
        {"type": "redacted_thinking", "data": REDACTED},
        {"type": "text", "text": "The GCD is 21."},
    ]


def test_the_whole_message_has_the_same_blocks() -> None:
    agg = MessageAggregator(message_id="msg_1", model="claude")
    for c in THOUGHT:
        agg.feed(c)
    body = json.loads(agg.body())
    anthropic.types.Message.model_validate(body)
    streamed = sdk_message(stream(THOUGHT))
    assert body["content"] == [b.model_dump(exclude_none=True) for b in streamed.content]


def test_two_thinking_blocks_stay_two() -> None:
    """Interleaved thinking: a block per reasoning part, not one joined."""
    part = ReasoningPart(opaque=b"s1", dialect=ANTHROPIC)
    chunks = [
        Chunk(reasoning="a"),
        Chunk(reasoning_part=part),
        Chunk(reasoning="b", reasoning_part=ReasoningPart(opaque=b"s2", dialect=ANTHROPIC)),
        Chunk(finish_reason=STOP),
    ]
    agg = MessageAggregator(message_id="m", model="c")
    for c in chunks:
        agg.feed(c)
    expected = [
        {"type": "thinking", "thinking": "a", "signature": "s1"},
        {"type": "thinking", "thinking": "b", "signature": "s2"},
    ]
    assert json.loads(agg.body())["content"] == expected
    streamed = sdk_message(stream(chunks))
    assert [b.model_dump(exclude_none=True) for b in streamed.content] == expected


def test_another_provider_s_payload_is_no_signature() -> None:
    """An OpenAI reasoning item's encrypted content means nothing to Anthropic."""
    chunks = [
        Chunk(reasoning="r"),
        Chunk(
            reasoning_part=ReasoningPart(
                opaque=b"gAAAA", dialect=int(ApiDialect.OPENAI_RESPONSES), id="rs_1"
            )
        ),
        Chunk(finish_reason=STOP),
    ]
    [block] = sdk_message(stream(chunks)).content
    assert block.model_dump() == {"type": "thinking", "thinking": "r", "signature": ""}


def test_a_part_with_its_text_and_no_deltas_is_a_whole_block() -> None:
    chunks = [
        Chunk(reasoning_part=ReasoningPart("all at once", b"sig", ANTHROPIC)),
        Chunk(finish_reason=STOP),
    ]
    [block] = sdk_message(stream(chunks)).content
    assert block.model_dump() == {"type": "thinking", "thinking": "all at once", "signature": "sig"}


def test_cache_usage_in_message_delta_and_the_message() -> None:
    """The wire's prompt tokens include the cached and written ones;
    Anthropic's ``input_tokens`` are the rest."""
    evs = stream(THOUGHT)
    assert evs[-2]["usage"] == {
        "output_tokens": 20,
        "input_tokens": 10,
        "cache_creation_input_tokens": 30,
        "cache_read_input_tokens": 60,
    }
    agg = MessageAggregator(message_id="m", model="c")
    for c in THOUGHT:
        agg.feed(c)
    assert json.loads(agg.body())["usage"] == {
        "input_tokens": 10,
        "output_tokens": 20,
        "cache_creation_input_tokens": 30,
        "cache_read_input_tokens": 60,
    }


def test_message_start_has_the_estimate_until_the_backend_counts() -> None:
    assert stream(THOUGHT, input_tokens=42)[0]["message"]["usage"] == {
        "input_tokens": 42,
        "output_tokens": 0,
    }
    first = Chunk(content="x", usage=Usage(100, 0, cached_tokens=60, cache_write_tokens=30))
    evs = stream([first, Chunk(finish_reason=STOP)], input_tokens=42)
    assert evs[0]["message"]["usage"] == {
        "input_tokens": 10,
        "output_tokens": 0,
        "cache_creation_input_tokens": 30,
        "cache_read_input_tokens": 60,
    }
