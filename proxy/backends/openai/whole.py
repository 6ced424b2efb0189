"""The ``openai`` backend's whole answer: a ``chat.completion`` object (what
a Chat Completions server sends for ``stream: false``) into chunk frames in
one step (``OpenAIWhole``, a ``json_api.WholeAnswer``), read with the one
model of it (``apis.openai_chat.answer``).

The frames give each client API what the same answer streamed gives through
``stream.OpenAIStream``, whose tables and rules it reads with
(``finish_of``, ``usage_of``, ``logprobs_extras``, ``error_text``):

- one choice (the usual answer): one chunk with all it says, its finish
  and the usage, so the edge reads one frame;
- several: per choice, one chunk with all it says, then each choice's
  finish chunk, the last one with the usage;
- what a choice says: ``message.content`` (and ``message.refusal``, the
  model's refusal, after it) -> content; ``message.reasoning`` /
  ``reasoning_content`` (vLLM, DeepSeek, Ollama) -> reasoning;
  ``message.tool_calls[]`` -> tool calls in their order, each with its id,
  name and whole arguments (``"{}"`` for none); the choice's ``logprobs``
  -> the extras ``{"logprobs": {...}}`` (dialect ``OpenAIChat``), the
  object as the server sent it;
- the finish: ``finish_reason`` mapped as a stream's, ``tool_calls`` when
  the choice made calls and the server said stop, vLLM's ``stop_reason``
  (a string) as the stop sequence; a choice without a finish reason (the
  answer is whole: nothing was cut) stops; the usage with
  ``cached_tokens`` and ``reasoning_tokens`` from the details;
- ``{"error": ...}`` sent with a 200, or a choice that finished with
  ``error``: the one error chunk a stream's would be (``backend_stream_error``);
  an answer with no choices, or JSON that is no ``chat.completion``: a
  ``backend_protocol_error`` chunk (``WholeAnswer``).

The chunks carry the answer's ``model`` (else the configured or routed
name). Unknown keys are ignored (``annotations``, ``audio``,
``service_tier``, vLLM's ``token_ids``, ...). No I/O.
"""

from __future__ import annotations

from functools import partial

from flatgate.proxy.apis.openai_chat.answer import AnswerMessage, decode_completion
from flatgate.proxy.backends.json_api import INT32_MAX, WholeAnswer, error_frame
from flatgate.proxy.backends.openai.stream import (
    CHAT,
    OpenAIStream,
    error_text,
    finish_of,
    finished_with,
    logprobs_extras,
    usage_of,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["OpenAIWhole"]


def _calls(message: AnswerMessage, first: int) -> tuple[ToolCallDelta, ...]:
    """The message's tool calls, whole, numbered from ``first``."""
    out = []
    for i, call in enumerate(message.tool_calls or (), first):
        fn = call.function
        name = (fn.name or "") if fn is not None else ""
        args = (fn.arguments or "") if fn is not None else ""
        out.append(ToolCallDelta(i, call.id or "", name, args or "{}"))
    return tuple(out)


class OpenAIWhole(WholeAnswer):
    """One ``chat.completion`` into chunk frames (see the module docstring); a
    body that streams anyway goes to an ``OpenAIStream``."""

    __slots__ = ("_model",)

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id, partial(OpenAIStream, request_id, model))
        self._model = model

    def _answer(self, body: bytes) -> bytes:
        doc = decode_completion(body)
        rid = self._request_id
        if doc.error:
            return error_frame(rid, codes.BACKEND_STREAM_ERROR, error_text(doc.error))
        if not doc.choices:
            raise ValueError("the answer has no choices")
        w = ChunkWriter(rid, doc.model or self._model)
        out = []
        # index -> its finish and stop sequence, in the order choices came
        ends: dict[int, tuple[FinishReason, str]] = {}
        made: dict[int, int] = {}  # index -> the tool calls it made
        for choice in doc.choices:
            index = choice.index
            if not 0 <= index <= INT32_MAX:
                raise ValueError(f"choice index {index} out of range")
            m = choice.message
            text = thought = ""
            calls: tuple[ToolCallDelta, ...] = ()
            if m is not None:
                text = (m.content or "") + (m.refusal or "")
                thought = m.reasoning or m.reasoning_content or ""
                if m.tool_calls:
                    calls = _calls(m, made.get(index, 0))
                    made[index] = made.get(index, 0) + len(calls)
            extras = logprobs_extras(choice.logprobs)
            reason = choice.finish_reason or "stop"
            end = finish_of(reason, index in made, choice.stop_reason)
            if end[0] is FinishReason.ERROR:
                return error_frame(rid, codes.BACKEND_STREAM_ERROR, finished_with(reason))
            if len(doc.choices) == 1:  # the usual answer: all of it in one chunk
                usage = usage_of(doc.usage) if doc.usage is not None else None
                return w.chunk(
                    content=text,
                    reasoning=thought,
                    tool_calls=calls,
                    index=index,
                    extras=extras,
                    extras_dialect=CHAT if extras else 0,
                    finish_reason=end[0],
                    usage=usage,
                    stop_sequence=end[1],
                )
            if text or thought or calls or extras:
                out.append(
                    w.chunk(
                        content=text,
                        reasoning=thought,
                        tool_calls=calls,
                        index=index,
                        extras=extras,
                        extras_dialect=CHAT if extras else 0,
                    )
                )
            ends[index] = end
        usage = usage_of(doc.usage) if doc.usage is not None else None
        last = next(reversed(ends))
        for index, (finish, stop_sequence) in ends.items():
            out.append(
                w.chunk(
                    finish_reason=finish,
                    usage=usage if index == last else None,
                    index=index,
                    stop_sequence=stop_sequence,
                )
            )
        return b"".join(out)
