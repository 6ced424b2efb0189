"""The text of one read is one chunk (``EventStream``), for ``OpenAIStream``
and ``AnthropicStream``: the text deltas one ``feed`` brings, while they are
of one choice and nothing else comes between them, go out as one content
chunk, before the next frame or at the end of that feed; nothing waits for a
later read. What that leaves the same, whatever the reads, is
``test_stream_ends`` (over ``helpers.merged``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

from flatgate.proxy.backends.base import Translator
from flatgate.proxy.backends.openai.stream import CHAT
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import (
    ANTHROPIC_RID,
    OPENAI_RID,
    PING,
    STOP,
    STREAM_ERROR,
    TRUNCATED,
    anthropic_stream,
    block_start,
    body,
    chunk,
    data_events,
    final,
    message_delta,
    message_start,
    named_events,
    openai_stream,
    read_frames,
    run,
)

PROTOCOL_ERROR = "backend_protocol_error"


@dataclass(frozen=True)
class Side:
    """One adapter as these tests drive it: what opens its answer (no frames),
    one text delta as an event, what finishes it (the final chunk: a stop,
    usage 3 in 2 out), an error event, and its chunks' request id and model."""

    name: str
    stream: Callable[[], Translator]
    opening: bytes
    text: Callable[[str], bytes]
    finish: bytes
    error: bytes
    error_message: str
    request_id: str
    model: str

    def said(self, text: str, index: int = 0) -> Chunk:
        """The content chunk of ``text``."""
        return Chunk(request_id=self.request_id, content=text, index=index, model=self.model)

    def __str__(self) -> str:
        return self.name


def openai_text(text: str, index: int = 0) -> bytes:
    return data_events(chunk(content=text, index=index), done=False)


def openai_role(index: int = 0) -> bytes:
    """The first delta of a choice, as servers send it: the role, no text."""
    role = chunk(content="", index=index)
    role["choices"][0]["delta"]["role"] = "assistant"
    return data_events(role, done=False)


def anthropic_text(text: str) -> bytes:
    return named_events(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
    )


OPENAI = Side(
    name="openai",
    stream=openai_stream,
    opening=openai_role(),
    text=openai_text,
    finish=data_events(
        chunk(finish_reason="stop", usage={"prompt_tokens": 3, "completion_tokens": 2})
    ),
    error=data_events({"error": "boom"}, done=False),
    error_message="boom",
    request_id=OPENAI_RID,
    model="gpt-test",
)
ANTHROPIC = Side(
    name="anthropic",
    stream=anthropic_stream,
    opening=body(message_start(input_tokens=3), block_start(0, {"type": "text", "text": ""})),
    text=anthropic_text,
    finish=body(
        {"type": "content_block_stop", "index": 0},
        message_delta("end_turn", output_tokens=2),
        STOP,
    ),
    error=body({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    error_message="overloaded_error: Overloaded",
    request_id=ANTHROPIC_RID,
    model="claude-test",
)
SIDES = [OPENAI, ANTHROPIC]
each = pytest.mark.parametrize("side", SIDES, ids=str)
WORDS = ["Hello", ", ", "wor", "ld", "!"]


def opened(side: Side) -> Translator:
    s = side.stream()
    assert s.feed(side.opening) == b""
    return s


def texts(side: Side, words: list[str]) -> bytes:
    return b"".join(side.text(w) for w in words)


def is_final(c: Chunk) -> bool:
    return c.finish_reason == FinishReason.STOP and c.usage == Usage(3, 2) and c.error is None


# -- one read, many reads ---------------------------------------------------------


@each
def test_text_events_in_one_read_are_one_chunk_of_their_joined_text(side: Side) -> None:
    s = opened(side)
    assert read_frames(s.feed(texts(side, WORDS))) == [side.said("Hello, world!")]
    assert is_final(final(read_frames(s.feed(side.finish))))


@each
def test_the_same_events_in_as_many_reads_are_as_many_chunks(side: Side) -> None:
    """Nothing waits: each read's text goes out with that read."""
    s = opened(side)
    for word in WORDS:
        assert read_frames(s.feed(side.text(word))) == [side.said(word)]
    assert is_final(final(read_frames(s.feed(side.finish))))


@each
def test_an_event_cut_by_a_read_goes_out_with_the_read_that_completes_it(side: Side) -> None:
    raw = texts(side, ["a", "b", "c"])
    cut = raw.index(b'"b"')
    s = opened(side)
    assert read_frames(s.feed(raw[:cut])) == [side.said("a")]
    assert read_frames(s.feed(raw[cut:])) == [side.said("bc")]


@each
def test_the_whole_answer_in_one_read_is_its_text_then_its_final_chunk(side: Side) -> None:
    chunks = run(side.stream(), [side.opening + texts(side, WORDS) + side.finish])
    assert chunks[0] == side.said("Hello, world!")
    assert len(chunks) == 2 and is_final(final(chunks))


# -- what comes between: other choices, other frames ---------------------------------


def test_text_of_two_choices_interleaved_in_one_read_keeps_its_order() -> None:
    s = OPENAI.stream()
    assert s.feed(openai_role(0) + openai_role(1)) == b""
    raw = b"".join(openai_text(t, i) for t, i in [("a", 0), ("b", 1), ("c", 0), ("d", 1)])
    said = OPENAI.said
    assert read_frames(s.feed(raw)) == [said("a", 0), said("b", 1), said("c", 0), said("d", 1)]


def test_text_of_two_choices_in_runs_is_joined_per_run_in_order() -> None:
    s = OPENAI.stream()
    assert s.feed(openai_role(0) + openai_role(1)) == b""
    raw = b"".join(openai_text(t, i) for t, i in [("a", 0), ("c", 0), ("b", 1), ("d", 1)])
    chunks = read_frames(s.feed(raw))
    assert chunks[0] == OPENAI.said("ac", 0)
    assert "".join(c.content for c in chunks[1:]) == "bd"
    assert {c.index for c in chunks[1:]} == {1}


LOGPROBS = {"content": [{"token": "b", "logprob": -0.1, "bytes": [98], "top_logprobs": []}]}


def openai_event(choice: dict[str, Any]) -> bytes:
    return data_events({"model": "gpt-test", "choices": [{"index": 0, **choice}]}, done=False)


@pytest.mark.parametrize(
    ("between", "frames"),
    [
        pytest.param(
            openai_event(
                {
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{}"},
                            }
                        ]
                    }
                }
            ),
            [Chunk(tool_calls=(ToolCallDelta(0, "call_1", "f", "{}"),))],
            id="tool-call",
        ),
        pytest.param(
            openai_event({"delta": {"content": "b"}, "logprobs": LOGPROBS}),
            # the logprobs object as the server sent it, in the extras of its text's chunk
            [
                Chunk(
                    content="b",
                    extras=f'{{"logprobs":{json.dumps(LOGPROBS)}}}',
                    extras_dialect=CHAT,
                )
            ],
            id="logprobs",
        ),
        pytest.param(
            openai_event({"delta": {"reasoning_content": "hm"}}),
            [Chunk(reasoning="hm")],
            id="reasoning",
        ),
        pytest.param(
            openai_event({"delta": {"refusal": "no"}}), [Chunk(content="no")], id="refusal"
        ),
    ],
)
def test_openai_text_then_another_frame_in_one_read_come_in_order(
    between: bytes, frames: list[Chunk]
) -> None:
    """The text before the other frame is one chunk before it; the text
    after it, one after it."""
    s = opened(OPENAI)
    raw = texts(OPENAI, ["a", "a"]) + between + texts(OPENAI, ["c", "c"])
    got = read_frames(s.feed(raw))
    want = [OPENAI.said("aa"), *frames, OPENAI.said("cc")]
    strip = {"request_id": "", "model": ""}
    assert [_with(c, **strip) for c in got] == [_with(c, **strip) for c in want]
    assert {c.request_id for c in got} == {OPENAI_RID}


def _with(c: Chunk, **fields: Any) -> Chunk:
    return msgspec.structs.replace(c, **fields)


@pytest.mark.parametrize(
    ("between", "frames"),
    [
        pytest.param(
            body(
                {"type": "content_block_stop", "index": 0},
                block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}),
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": "{}"},
                },
                {"type": "content_block_stop", "index": 1},
                block_start(2, {"type": "text", "text": ""}),
            ),
            [
                Chunk(tool_calls=(ToolCallDelta(0, "toolu_1", "f", ""),)),
                Chunk(tool_calls=(ToolCallDelta(0, "", "", "{}"),)),
            ],
            id="tool-call",
        ),
        pytest.param(
            named_events(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "hm"},
                }
            ),
            [Chunk(reasoning="hm")],
            id="thinking",
        ),
        pytest.param(named_events(PING), [Chunk()], id="heartbeat"),
    ],
)
def test_anthropic_text_then_another_frame_in_one_read_come_in_order(
    between: bytes, frames: list[Chunk]
) -> None:
    s = opened(ANTHROPIC)
    raw = texts(ANTHROPIC, ["a", "a"]) + between + texts(ANTHROPIC, ["c", "c"])
    got = run(s, [raw], end=False, heartbeats=True)
    want = [ANTHROPIC.said("aa"), *frames, ANTHROPIC.said("cc")]
    strip = {"request_id": "", "model": ""}
    assert [_with(c, **strip) for c in got] == [_with(c, **strip) for c in want]


@each
def test_text_then_the_finish_in_one_read_is_the_text_then_the_final_chunk(side: Side) -> None:
    s = opened(side)
    chunks = read_frames(s.feed(texts(side, WORDS) + side.finish))
    assert chunks[0] == side.said("Hello, world!")
    assert len(chunks) == 2 and is_final(final(chunks))
    assert s.done


# -- the end of a stream -----------------------------------------------------------


@each
def test_an_error_event_after_text_in_one_read_comes_after_the_text(side: Side) -> None:
    s = opened(side)
    chunks = read_frames(s.feed(texts(side, WORDS) + side.error + texts(side, ["late"])))
    assert chunks[0] == side.said("Hello, world!")
    assert final(chunks).error == ChunkError(STREAM_ERROR, side.error_message)
    assert len(chunks) == 2 and s.done


@each
def test_an_event_that_does_not_decode_after_text_comes_after_the_text(side: Side) -> None:
    s = opened(side)
    chunks = read_frames(s.feed(texts(side, WORDS) + b"data: {not json\n\n"))
    assert chunks[0] == side.said("Hello, world!")
    error = final(chunks).error
    assert error is not None and error.code == PROTOCOL_ERROR
    assert len(chunks) == 2 and s.done


@each
def test_end_releases_the_text_of_the_last_event_before_the_truncation_error(
    side: Side,
) -> None:
    """A body that ends in a text event without its blank line: ``end``
    translates it, and its text goes out before the truncation error."""
    s = opened(side)
    assert read_frames(s.feed(texts(side, ["a", "b"]) + side.text("c")[:-1])) == [side.said("ab")]
    chunks = read_frames(s.end())
    assert chunks[0] == side.said("c")
    error = final(chunks).error
    assert error is not None and error.code == TRUNCATED
    assert len(chunks) == 2 and s.done
