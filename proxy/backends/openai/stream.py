"""The ``openai`` backend's stream: a Chat Completions server's SSE into
chunk frames (``OpenAIStream``), and what its whole answer's translator
(``whole``) reads the same way: the finish reasons, the finish rule,
usage, errors and logprobs.

SSE ``data:`` events, each a ``chat.completion.chunk`` (read with the
one model of it, ``apis.openai_chat.answer``):

- ``delta.content`` -> content (and ``delta.refusal``, the model's refusal,
  is what it said: content too); a choice's ``logprobs`` (the object as the
  server sent it) -> the extras ``{"logprobs": {...}}`` (dialect
  ``OpenAIChat``) of the chunk that carries that delta's content;
  ``delta.reasoning`` / ``reasoning_content``
  (vLLM, DeepSeek, Ollama) -> reasoning; ``delta.role`` ignored (some servers
  repeat it); unknown keys ignored (``timings``, ``obfuscation``, ...);
- ``delta.tool_calls[]`` by ``index``: the first fragment of an index carries
  ``id`` and ``name`` (repeats are dropped; a new ``id`` on a used index is a
  new call, for servers that send every call as index 0); later fragments
  carry argument text; a call that ends with no arguments gets ``"{}"``;
- ``finish_reason`` ("" and null mean "not yet"): stop, length, tool_calls,
  content_filter, and the variants servers send (``eos``, ``function_call``,
  ``error``, ...); an unknown value is STOP; ``tool_calls`` whenever tool
  deltas were seen and the server said stop; vLLM's ``stop_reason``, when it
  is a string, is the stop sequence that matched (the final chunk's
  ``stop_sequence``);
- ``usage``: the last non-null value (on the finish chunk, or a chunk whose
  ``choices`` is ``[]``, null or absent), with ``cached_tokens`` and
  ``reasoning_tokens`` from the details;
- the final chunk (finish and usage) goes out at ``data: [DONE]``, or at the
  end of the body when every choice has finished (servers that send no
  ``[DONE]``);
- ``{"error": {...}}`` or ``{"error": "..."}`` mid-stream, a finish reason of
  ``error``, or a body that ends before a finish: one error chunk.

No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.openai_chat.answer import (
    ChatError,
    DeltaToolCall,
    Usage,
    decode_chunk,
)
from flatgate.proxy.backends.json_api import INT32_MAX, EventStream, usage
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.frames import Usage as WireUsage
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = [
    "CHAT",
    "FINISH_REASONS",
    "OpenAIStream",
    "error_text",
    "finish_of",
    "finished_with",
    "logprobs_extras",
    "usage_of",
]

# finish_reason values, as servers send them.
FINISH_REASONS: dict[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "eos": FinishReason.STOP,
    "eos_token": FinishReason.STOP,
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "insufficient_system_resource": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "max_tokens": FinishReason.LENGTH,
    "model_length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
    "error": FinishReason.ERROR,
    "network_error": FinishReason.ERROR,
    "abort": FinishReason.ERROR,
}

# The dialect of the extras that carry a choice's logprobs.
CHAT = int(ApiDialect.OPENAI_CHAT)
_NULL = msgspec.Raw(b"null")


def usage_of(u: Usage) -> WireUsage:
    """The wire's usage, cached and reasoning tokens from the details."""
    return usage(
        u.prompt_tokens,
        u.completion_tokens,
        u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0,
        u.completion_tokens_details.reasoning_tokens if u.completion_tokens_details else 0,
    )


def error_text(err: ChatError | str) -> str:
    """The message of an ``{"error": ...}`` the server sent with a 200."""
    return err if isinstance(err, str) else err.message or str(err.type or "error")


def finished_with(reason: str) -> str:
    """The message of the error chunk a finish reason of ``error`` becomes."""
    return f"backend finished with {reason!r}"


def finish_of(reason: str, calls: bool, stop_reason: object) -> tuple[FinishReason, str]:
    """A choice's finish and the stop sequence that ended it: ``reason``
    mapped (unknown: STOP), TOOL_CALLS for a STOP after tool calls
    (``calls``), and vLLM's ``stop_reason`` when it is a string."""
    finish = FINISH_REASONS.get(reason, FinishReason.STOP)
    if finish is FinishReason.STOP:
        if calls:
            return FinishReason.TOOL_CALLS, ""
        if type(stop_reason) is str:
            return finish, stop_reason
    return finish, ""


def logprobs_extras(logprobs: msgspec.Raw) -> str:
    """The extras that carry a choice's logprobs object as the server sent
    it (``""``: it sent none)."""
    if not logprobs or logprobs == _NULL:
        return ""
    return (b'{"logprobs":' + bytes(logprobs) + b"}").decode()


_DONE = b"[DONE]"


class _Choices:
    """Per-choice state: the tool calls begun, the finish reason."""

    __slots__ = ("calls", "finish", "ids", "index", "stop_sequence", "used")

    def __init__(self, index: int) -> None:
        self.index = index
        self.calls: dict[int, int] = {}  # the server's index -> ours
        self.ids: dict[int, str] = {}  # ours -> the call id
        self.used: dict[int, bool] = {}  # ours -> arguments seen
        self.finish = FinishReason.NONE
        self.stop_sequence = ""


class OpenAIStream(EventStream):
    """One Chat Completions stream into chunk frames (see the module docstring)."""

    __slots__ = ("_choices", "_model", "_usage", "_writer")

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id)
        self._model = model
        self._writer: ChunkWriter | None = None
        self._choices: dict[int, _Choices] = {}
        self._usage: WireUsage | None = None

    def _out(self, model: str | None) -> ChunkWriter:
        w = self._writer
        if w is None:
            w = self._writer = ChunkWriter(self._request_id, model or self._model)
        return w

    def _ended(self) -> bytes:
        choices = self._choices.values()
        if choices and all(c.finish for c in choices):
            return self._finish()  # a server that sends no [DONE]
        return super()._ended()

    def _event(self, name: bytes, data: bytes) -> bytes:
        if data[:6] == _DONE:
            return self._finish()
        chunk = decode_chunk(data)
        if chunk.error:
            return self._fail(codes.BACKEND_STREAM_ERROR, error_text(chunk.error))
        if chunk.usage is not None:
            self._usage = usage_of(chunk.usage)
        choices = chunk.choices
        if not choices:
            return b""
        w = self._out(chunk.model)
        if len(choices) == 1:  # the per-token event: its text held, to go out with its read's
            choice = choices[0]
            delta = choice.delta
            if (
                delta is not None
                and delta.content
                and not choice.finish_reason
                and (not choice.logprobs or choice.logprobs == _NULL)
                and delta.refusal is None
                and delta.reasoning is None
                and delta.reasoning_content is None
                and not delta.tool_calls
                and 0 <= choice.index <= INT32_MAX
            ):
                if choice.index not in self._choices:
                    self._choices[choice.index] = _Choices(choice.index)
                return self._hold(w, delta.content, choice.index)
        out = []
        for choice in choices:
            if not 0 <= choice.index <= INT32_MAX:
                raise ValueError(f"choice index {choice.index} out of range")
            state = self._choices.get(choice.index)
            if state is None:
                state = self._choices[choice.index] = _Choices(choice.index)
            delta = choice.delta
            extras = logprobs_extras(choice.logprobs)
            if extras:
                # With the text they are the probabilities of, in its chunk.
                text = (delta.content or "") + (delta.refusal or "") if delta is not None else ""
                out.append(
                    w.chunk(content=text, extras=extras, extras_dialect=CHAT, index=choice.index)
                )
                if delta is not None:
                    delta.content = delta.refusal = None
            if delta is not None:
                if delta.content:
                    out.append(w.content(delta.content, choice.index))
                if delta.refusal:
                    out.append(w.content(delta.refusal, choice.index))
                thought = delta.reasoning or delta.reasoning_content
                if thought:
                    out.append(w.reasoning(thought, choice.index))
                if delta.tool_calls:
                    out.extend(self._calls(w, state, delta.tool_calls))
            reason = choice.finish_reason
            if reason:
                finish, stop_sequence = finish_of(reason, bool(state.calls), choice.stop_reason)
                if finish is FinishReason.ERROR:
                    out.append(self._fail(codes.BACKEND_STREAM_ERROR, finished_with(reason)))
                    break
                if stop_sequence:
                    state.stop_sequence = stop_sequence
                state.finish = finish
        return out[0] if len(out) == 1 else b"".join(out)

    def _calls(self, w: ChunkWriter, state: _Choices, calls: list[DeltaToolCall]) -> list[bytes]:
        out = []
        for call in calls:
            fn = call.function
            args = (fn.arguments or "") if fn else ""
            ours = state.calls.get(call.index)
            if ours is not None and call.id and state.ids.get(ours) != call.id:
                ours = None  # a new call on a used index
            if ours is None:
                ours = len(state.ids)
                state.calls[call.index] = ours
                state.ids[ours] = call.id or ""
                state.used[ours] = bool(args)
                name = (fn.name or "") if fn else ""
                delta = ToolCallDelta(ours, call.id or "", name, args)
                out.append(w.chunk(tool_calls=(delta,), index=state.index))
            elif args:
                state.used[ours] = True
                out.append(w.arguments(ours, args, state.index))
        return out

    def _finish(self) -> bytes:
        """The terminal frames: "{}" for calls that got no arguments, then each
        finished choice's finish chunk, the last one with the usage."""
        choices = [c for c in self._choices.values() if c.finish]
        if not choices:
            return self._fail(codes.BACKEND_STREAM_TRUNCATED, "backend ended without a finish")
        self.done = True
        w = self._out(None)
        out = []
        for c in choices:
            for ours, used in c.used.items():
                if not used:
                    out.append(w.arguments(ours, "{}", c.index))
        last = choices[-1]
        for c in choices:
            usage = self._usage if c is last else None
            out.append(
                w.chunk(
                    finish_reason=c.finish,
                    usage=usage,
                    index=c.index,
                    stop_sequence=c.stop_sequence,
                )
            )
        return b"".join(out)
