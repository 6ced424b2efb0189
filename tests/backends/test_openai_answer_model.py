"""One model of the Chat Completions answer (``apis.openai_chat.answer``): what
the edge writes with it is what the ``openai`` backend reads with it.

The edge's rendering of a stream of chunk frames, read back by
``OpenAIStream``, and its aggregated ``chat.completion``, read back by
``OpenAIWhole``, give the frames' text, reasoning, tool calls, finish and
usage again.
"""

from __future__ import annotations

from flatgate.edge_translator.errors import ProxyFailed
from flatgate.edge_translator.openai.render import Aggregator, StreamRenderer, error_event
from flatgate.proxy.apis.openai_chat.answer import (
    AnswerMessage,
    ChatCompletionChunk,
    ChatError,
    decode_chunk,
    decode_completion,
)
from flatgate.proxy.backends.openai.whole import OpenAIWhole
from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta, Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import calls, content, final, openai_stream, reasoning, run

CALL = ToolCallDelta(0, "call_1", "get_weather", '{"city":"Paris"}')
CHUNKS = [
    Chunk(request_id="r", content="It is ", index=0, model="m"),
    Chunk(request_id="r", reasoning="Look it up.", index=0, model="m"),
    Chunk(request_id="r", content="sunny.", index=0, model="m"),
    Chunk(request_id="r", tool_calls=(CALL,), index=0, model="m"),
    Chunk(
        request_id="r",
        finish_reason=FinishReason.TOOL_CALLS,
        usage=Usage(10, 20, 3, 4, 0),
        index=0,
        model="m",
    ),
]


def _read_back(chunks: list[Chunk]) -> None:
    assert content(chunks) == "It is sunny."
    assert reasoning(chunks) == "Look it up."
    call = {"ids": ["call_1"], "names": ["get_weather"], "arguments": CALL.arguments}
    assert calls(chunks) == {0: call}
    end = final(chunks)
    assert end.finish_reason == FinishReason.TOOL_CALLS
    assert end.usage is not None
    assert (end.usage.prompt_tokens, end.usage.completion_tokens) == (10, 20)
    assert (end.usage.cached_tokens, end.usage.reasoning_tokens) == (3, 4)


def test_the_stream_the_edge_writes_the_backend_reads() -> None:
    r = StreamRenderer(completion_id="chatcmpl-1", created=1, model="m", include_usage=True)
    sse = b"".join(r.feed(c) for c in CHUNKS) + r.end()
    _read_back(run(openai_stream(), [sse]))


def test_the_whole_answer_the_edge_writes_the_backend_reads() -> None:
    a = Aggregator(completion_id="chatcmpl-1", created=1, model="m")
    for c in CHUNKS:
        a.feed(c)
    body = a.body()
    doc = decode_completion(body)
    assert doc.choices is not None
    message = doc.choices[0].message
    assert isinstance(message, AnswerMessage) and message.role == "assistant"
    assert (doc.object, doc.id, doc.created) == ("chat.completion", "chatcmpl-1", 1)
    _read_back(run(OpenAIWhole("r", "m"), [body]))


def test_the_error_event_the_edge_writes_the_backend_reads() -> None:
    event = error_event(ProxyFailed("boom", status=502))
    assert event.startswith(b"data: ")
    got = decode_chunk(event[6:].strip())
    assert isinstance(got.error, ChatError) and got.error.message == "boom"
    assert got == ChatCompletionChunk(error=got.error)
