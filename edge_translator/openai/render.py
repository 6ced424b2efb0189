"""Chunk frames -> OpenAI JSON: streamed ``chat.completion.chunk`` SSE events
and the aggregated non-streaming ``chat.completion``.

Owns the response side of the OpenAI API as the official SDK reads it:

- ``StreamRenderer.feed(chunk)`` returns the SSE bytes one decoded
  ``wire.chunk.frames.Chunk`` becomes (the first delta of a choice carries
  ``role: "assistant"``; a tool call's ``id``, ``type`` and ``function.name``
  come first, its ``function.arguments`` after; the finish reason comes in its
  own event with an empty delta; with ``include_usage`` every event carries
  ``"usage": null`` and a last event with ``choices: []`` carries the usage,
  when the backend sent it); ``DONE`` ends a stream.
- ``error_event`` is the event a failure after the first byte becomes: data
  with an ``error`` key, which the SDK raises as ``APIError``.
- ``Aggregator`` folds every chunk of a non-streaming answer into one
  ``chat.completion`` body with ``usage.total_tokens``.

Logprobs come as a chunk's extras (``{"logprobs": {...}}``, dialect
``OpenAIChat``: the backend's object as it sent it): a streamed event
carries them as its choice's ``logprobs`` (``null`` otherwise), and the
aggregated body joins their ``content`` and ``refusal`` lists into its
choice's ``logprobs``.

Usage a backend never sent is not made up: OpenAI's convention for unknown
usage is none at all, so the aggregated body has no ``usage`` key and the
stream no usage event (never zeros); ``usage`` says whether it came.

The deltas, the usage, the error event and the whole ``chat.completion``
are written with the one model of the answer (``apis.openai_chat.answer``),
the Structs the ``openai`` backend reads a server's answer with. A
content-only delta (the hot path) is encoded as a pre-encoded prefix, the
msgspec-encoded text and a fixed suffix, written with ``Encoder.encode_into``
into one reused ``bytearray``. Pure: no I/O, no clock (``created`` is given).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from flatgate.edge_translator.errors import chunk_error
from flatgate.proxy.apis.openai_chat.answer import (
    AnswerMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatError,
    ChatFunction,
    Choice,
    ChoiceLogprobs,
    CompletionTokensDetails,
    Delta,
    DeltaToolCall,
    MessageToolCall,
    PromptTokensDetails,
    decode_logprobs,
)
from flatgate.proxy.apis.openai_chat.answer import Usage as UsageOut
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, Usage
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = [
    "DONE",
    "SYSTEM_FINGERPRINT",
    "Aggregator",
    "StreamRenderer",
    "Streamed",
    "error_event",
    "finish_reason_name",
]

DONE = b"data: [DONE]\n\n"
SYSTEM_FINGERPRINT = "fp_flatgate"

_FINISH: dict[int, str] = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.CONTENT_FILTER: "content_filter",
}

_encoder = msgspec.json.Encoder()
_encode = _encoder.encode
_CHAT = int(ApiDialect.OPENAI_CHAT)
_NULL = b"null"
_NULL_RAW = msgspec.Raw(_NULL)


class _ChunkExtras(msgspec.Struct, gc=False):
    logprobs: msgspec.Raw = msgspec.Raw()


_decode_extras = msgspec.json.Decoder(_ChunkExtras).decode


def _logprobs_of(chunk: Chunk) -> bytes:
    """A chunk's logprobs object as the backend sent it (``null`` for none)."""
    if chunk.extras_dialect != _CHAT:
        return _NULL
    try:
        raw = bytes(_decode_extras(chunk.extras.encode()).logprobs)
    except msgspec.DecodeError:
        return _NULL  # not the backend's: its adapter writes well-formed extras
    return raw or _NULL


def finish_reason_name(reason: int) -> str | None:
    """OpenAI's name for a wire finish reason (``None`` while the stream goes on)."""
    return _FINISH.get(reason)


def error_event(error: FlatgateError) -> bytes:
    """The SSE event that ends a stream with ``error``; the SDK raises ``APIError``."""
    body = ChatCompletionChunk(
        error=ChatError(error.message, error.type, error.param, error.code.code)
    )
    return b"data: " + _encode(body) + b"\n\n"


def _usage(u: Usage) -> UsageOut:
    return UsageOut(
        u.prompt_tokens,
        u.completion_tokens,
        u.prompt_tokens + u.completion_tokens,
        PromptTokensDetails(u.cached_tokens),
        CompletionTokensDetails(u.reasoning_tokens),
    )


class Streamed:
    """What a streamed answer's renderer keeps between chunks, in every chat
    API: the usage the backend reported, whether the final chunk has been
    rendered (the subclass says when), and one buffer reused for each
    token's event."""

    __slots__ = ("_buf", "_done", "_usage")

    def __init__(self) -> None:
        self._usage: Usage | None = None
        self._done = False
        self._buf = bytearray()

    @property
    def finished(self) -> bool:
        """True once the final chunk has been rendered."""
        return self._done

    @property
    def usage(self) -> Usage | None:
        """The usage the backend sent, if any."""
        return self._usage


class StreamRenderer(Streamed):
    """SSE events of one streamed completion, chunk by chunk (finished once
    every expected choice has had its finish reason rendered)."""

    __slots__ = (
        "_choices",
        "_created",
        "_finished",
        "_head",
        "_id",
        "_include_usage",
        "_model",
        "_roles",
        "_tail",
        "_text_heads",
    )

    def __init__(
        self,
        *,
        completion_id: str,
        created: int,
        model: str,
        include_usage: bool = False,
        choices: int = 1,
    ) -> None:
        Streamed.__init__(self)
        self._id = completion_id
        self._choices = max(choices, 1)
        self._finished: set[int] = set()
        self._created = created
        self._model = model
        self._include_usage = include_usage
        self._head = b""
        self._tail = b""
        self._text_heads: dict[int, bytes] = {}
        self._roles: set[int] = set()

    @property
    def complete(self) -> bool:
        """True when every choice seen has finished (a stream may end here even
        if fewer choices came than asked for: a backend without ``n``)."""
        return bool(self._finished) and self._finished >= self._roles

    def _start(self, model: str) -> None:
        # Fixed once per stream: the object head up to the choices array, and the tail.
        if model:
            self._model = model
        self._head = (
            b'data: {"id":'
            + _encode(self._id)
            + b',"object":"chat.completion.chunk","created":'
            + str(self._created).encode()
            + b',"model":'
            + _encode(self._model)
            + b',"system_fingerprint":"'
            + SYSTEM_FINGERPRINT.encode()
            + b'","choices":'
        )
        self._tail = b',"usage":null}\n\n' if self._include_usage else b"}\n\n"

    def _event(self, choices: bytes) -> bytes:
        return self._head + choices + self._tail

    def _choice(
        self, index: int, delta: Delta, finish: str | None, logprobs: bytes = _NULL
    ) -> bytes:
        return (
            b'[{"index":'
            + str(index).encode()
            + b',"delta":'
            + _encode(delta)
            + b',"logprobs":'
            + logprobs
            + b',"finish_reason":'
            + (b"null" if finish is None else b'"' + finish.encode() + b'"')
            + b"}]"
        )

    def _text(self, index: int, text: str) -> bytes:
        head = self._text_heads.get(index)
        if head is None:
            head = self._head + b'[{"index":' + str(index).encode() + b',"delta":{"content":'
            self._text_heads[index] = head
        buf = self._buf
        buf[:] = head
        _encoder.encode_into(text, buf, -1)
        buf += b'},"logprobs":null,"finish_reason":null}]'
        buf += self._tail
        return bytes(buf)

    def feed(self, chunk: Chunk) -> bytes:
        """The SSE bytes for one chunk (possibly several events, possibly none).

        An error chunk raises the ``FlatgateError`` it carries: the caller ends the
        stream with ``error_event``.
        """
        if chunk.error is not None or chunk.finish_reason == FinishReason.ERROR:
            raise chunk_error(chunk.error)
        if not self._head:
            self._start(chunk.model)
        index = chunk.index
        out: list[bytes] = []
        if chunk.extras:
            self._with_logprobs(chunk, _logprobs_of(chunk), out)
        elif index not in self._roles:
            self._roles.add(index)
            if chunk.content and not chunk.tool_calls:
                out.append(
                    self._event(self._choice(index, Delta("assistant", chunk.content), None))
                )
            else:
                out.append(self._event(self._choice(index, Delta("assistant", ""), None)))
                if chunk.content:
                    out.append(self._text(index, chunk.content))
        elif chunk.content:
            out.append(self._text(index, chunk.content))
        if chunk.reasoning:
            delta = Delta(reasoning_content=chunk.reasoning)
            out.append(self._event(self._choice(index, delta, None)))
        for call in chunk.tool_calls:
            if call.id or call.name:
                first = DeltaToolCall(call.index, call.id, "function", ChatFunction(call.name, ""))
                out.append(self._event(self._choice(index, Delta(tool_calls=[first]), None)))
            if call.arguments:
                more = DeltaToolCall(call.index, function=ChatFunction(arguments=call.arguments))
                out.append(self._event(self._choice(index, Delta(tool_calls=[more]), None)))
        if chunk.usage is not None:
            self._usage = chunk.usage
        finish = _FINISH.get(chunk.finish_reason)
        if finish is not None:
            self._finished.add(index)
            self._done = len(self._finished) >= self._choices
            out.append(self._event(self._choice(index, Delta(), finish)))
        return b"".join(out) if len(out) != 1 else out[0]

    def _with_logprobs(self, chunk: Chunk, logprobs: bytes, out: list[bytes]) -> None:
        """A chunk's first event with its ``logprobs`` (off the hot path)."""
        index = chunk.index
        role = None
        if index not in self._roles:
            self._roles.add(index)
            role = "assistant"
        if chunk.content or role or logprobs != _NULL:
            delta = Delta(role, chunk.content or ("" if role else None))
            out.append(self._event(self._choice(index, delta, None, logprobs)))

    def fail(self, err: FlatgateError) -> bytes:
        return error_event(err)

    def end(self) -> bytes:
        """What ends a finished stream: the usage event when asked for, then ``[DONE]``."""
        if not self._head:
            self._start("")
        if self._include_usage and self._usage is not None:
            usage = _encode(_usage(self._usage))
            return self._head + b'[],"usage":' + usage + b"}\n\n" + DONE
        return DONE


class _Choice:
    __slots__ = ("calls", "finish", "logprobs", "reasoning", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]
        self.finish: str | None = None
        self.logprobs: ChoiceLogprobs | None = None

    def add_logprobs(self, raw: bytes) -> None:
        """One chunk's logprobs object, its lists joined to those before."""
        try:
            got = decode_logprobs(raw)
        except msgspec.DecodeError:
            return  # not a logprobs object: nothing to join
        lp = self.logprobs
        if lp is None:
            lp = self.logprobs = ChoiceLogprobs()
        if got.content is not None:
            if lp.content is None:
                lp.content = []
            lp.content += got.content
        if got.refusal is not None:
            if lp.refusal is None:
                lp.refusal = []
            lp.refusal += got.refusal


class Aggregator:
    """Folds the chunks of a non-streaming answer into one ``chat.completion``."""

    __slots__ = ("_choices", "_created", "_expected", "_id", "_model", "_usage")

    def __init__(self, *, completion_id: str, created: int, model: str, choices: int = 1) -> None:
        self._id = completion_id
        self._expected = max(choices, 1)
        self._created = created
        self._model = model
        self._choices: dict[int, _Choice] = {}
        self._usage: Usage | None = None

    @property
    def finished(self) -> bool:
        """True once every expected choice has a finish reason."""
        return sum(1 for c in self._choices.values() if c.finish) >= self._expected

    @property
    def complete(self) -> bool:
        """True when every choice seen has a finish reason (see ``StreamRenderer``)."""
        return bool(self._choices) and all(c.finish for c in self._choices.values())

    def feed(self, chunk: Chunk) -> None:
        """Take one chunk; an error chunk raises the ``FlatgateError`` it carries."""
        if chunk.error is not None or chunk.finish_reason == FinishReason.ERROR:
            raise chunk_error(chunk.error)
        if chunk.model:
            self._model = chunk.model
        choice = self._choices.get(chunk.index)
        if choice is None:
            choice = self._choices[chunk.index] = _Choice()
        if chunk.content:
            choice.text.append(chunk.content)
        if chunk.extras:
            logprobs = _logprobs_of(chunk)
            if logprobs != _NULL:
                choice.add_logprobs(logprobs)
        if chunk.reasoning:
            choice.reasoning.append(chunk.reasoning)
        for call in chunk.tool_calls:
            parts = choice.calls.get(call.index)
            if parts is None:
                parts = choice.calls[call.index] = [call.id, call.name]
            else:
                parts[0] = parts[0] or call.id
                parts[1] = parts[1] or call.name
            if call.arguments:
                parts.append(call.arguments)
        if chunk.usage is not None:
            self._usage = chunk.usage
        finish = _FINISH.get(chunk.finish_reason)
        if finish is not None:
            choice.finish = finish

    def feed_all(self, chunks: Iterable[Chunk]) -> None:
        for chunk in chunks:
            self.feed(chunk)

    def body(self) -> bytes:
        """The ``chat.completion`` JSON body."""
        choices = []
        for index in sorted(self._choices) or [0]:
            c = self._choices.get(index) or _Choice()
            text = "".join(c.text)
            thought = "".join(c.reasoning) or None
            if c.calls:
                calls = [
                    MessageToolCall(p[0], ChatFunction(p[1], "".join(p[2:])))
                    for _, p in sorted(c.calls.items())
                ]
                message = AnswerMessage(
                    "assistant", text or None, tool_calls=calls, reasoning_content=thought
                )
            else:
                message = AnswerMessage("assistant", text, reasoning_content=thought)
            logprobs = _NULL_RAW if c.logprobs is None else msgspec.Raw(_encode(c.logprobs))
            choices.append(Choice(index, message, c.finish, logprobs))
        out = ChatCompletion(
            self._id,
            self._created,
            self._model,
            choices,
            None if self._usage is None else _usage(self._usage),
            "chat.completion",
            SYSTEM_FINGERPRINT,
        )
        return _encode(out)

    @property
    def usage(self) -> Usage | None:
        """The usage the backend sent, if any."""
        return self._usage
