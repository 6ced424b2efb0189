"""Chunk frames -> Gemini answers: each streamed chunk a
``GenerateContentResponse``, and the whole answer one.

Owns the response side of the Gemini API, written with its one model
(``apis.gemini.answer``, ``apis.gemini.content``):

- ``StreamRenderer.feed(chunk)`` returns what one decoded ``Chunk`` becomes:
  a ``GenerateContentResponse`` with one candidate whose ``content`` (role
  ``model``) holds the chunk's parts, as ``streamGenerateContent`` sends
  them: with ``alt=sse`` one ``data:`` event each (``\\r\\n\\r\\n`` after,
  as Google's), without it the elements of one JSON array (``[`` before the
  first, ``,\\r\\n`` between, ``]`` at the end). A chunk with nothing to
  show is nothing. Every response carries ``modelVersion`` and
  ``responseId``; the final one ``finishReason`` and ``usageMetadata``.
- ``Aggregator`` folds every chunk of a ``generateContent`` answer into one
  response: the thoughts' text joined into one thought part, the answer's
  text into one text part, each call a ``functionCall`` part, in the order
  they began.

Parts: reasoning -> a thought (``{"text", "thought": true}``); content ->
text; a tool call -> a ``functionCall`` (``id``, ``name``, ``args``: its
arguments, which must be a JSON object; a stream holds a call until it is
whole: Gemini sends each call complete). A Gemini reasoning part's payload
(``<where>\\n<signature>``, as the gemini backend writes it) puts its
``thoughtSignature`` back where it came from: on a thought part ("" where),
on the text part (``gemini:text``: on this chunk's text, else an empty text
part), or on the ``functionCall`` part of the call whose id it names; another
dialect's payload means nothing to a Gemini client and is not shown.

Finish reasons (``answer.FINISH_REASON_OF``): Stop and ToolCalls -> STOP,
Length -> MAX_TOKENS, ContentFilter -> SAFETY. Usage: ``promptTokenCount``
the wire's prompt tokens (they include the cached ones, as Google's do),
``cachedContentTokenCount`` the cached ones, ``thoughtsTokenCount`` the
reasoning tokens, ``candidatesTokenCount`` the completion tokens less those
(Google counts thoughts apart), ``totalTokenCount`` the sum. An error chunk
raises the ``FlatgateError`` it carries (``errors.chunk_error``). Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.edge_translator.errors import ProxyFailed, chunk_error
from flatgate.edge_translator.gemini.errors import error_element, error_event
from flatgate.edge_translator.gemini.translate import SIGNED_TEXT
from flatgate.edge_translator.openai.render import Streamed
from flatgate.proxy.apis.gemini.answer import (
    FINISH_REASON_OF,
    Candidate,
    GenerateContentResponse,
    UsageMetadata,
)
from flatgate.proxy.apis.gemini.content import Content, FunctionCall, Part
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = ["BEAT", "Aggregator", "StreamRenderer", "finish_reason_name", "usage_metadata"]

# A stream's keep-alive: whitespace, which neither an SSE reader nor a JSON
# array's reader sees.
BEAT = b"\r\n"
_ERROR = FinishReason.ERROR
_GEMINI = int(ApiDialect.GEMINI)
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
_MODEL = "model"


def finish_reason_name(chunk: Chunk) -> str | None:
    """Gemini's ``finishReason`` for a final chunk (``None`` while it goes on)."""
    if not chunk.finish_reason:
        return None
    return FINISH_REASON_OF.get(chunk.finish_reason, "OTHER")


def usage_metadata(u: Usage | None) -> UsageMetadata | None:
    """The wire's usage as Gemini's ``usageMetadata`` (see the module docstring)."""
    if u is None:
        return None
    return UsageMetadata(
        prompt_token_count=u.prompt_tokens,
        cached_content_token_count=u.cached_tokens or None,
        candidates_token_count=max(0, u.completion_tokens - u.reasoning_tokens),
        thoughts_token_count=u.reasoning_tokens or None,
        total_token_count=u.prompt_tokens + u.completion_tokens,
    )


def _signature(part: ReasoningPart) -> tuple[str, str] | None:
    """(where, signature) of a Gemini reasoning part's payload; ``None`` for
    another dialect's, or one with no signature."""
    if part.dialect != _GEMINI or not part.opaque:
        return None
    where, newline, signature = part.opaque.decode("ascii", "replace").rpartition("\n")
    if not newline:
        where, signature = part.id, where
    return (where, signature) if signature else None


def _args(parts: list[str]) -> msgspec.Raw:
    text = "".join(parts).strip()
    if not text:
        return msgspec.Raw(b"{}")
    data = text.encode()
    try:
        ok = isinstance(_decode(data), dict)
    except (msgspec.DecodeError, RecursionError):
        ok = False
    if not ok:
        raise ProxyFailed(
            "The backend's tool call arguments are not a JSON object, which Gemini's "
            "functionCall.args must be.",
            code=codes.BACKEND_PROTOCOL_ERROR,
        )
    return msgspec.Raw(data)


class _Call:
    __slots__ = ("args", "id", "name")

    def __init__(self, delta: ToolCallDelta) -> None:
        self.id = delta.id
        self.name = delta.name
        self.args: list[str] = []

    def part(self, signatures: dict[str, str]) -> Part:
        call = FunctionCall(self.name, _args(self.args), self.id or None)
        return Part(function_call=call, thought_signature=signatures.pop(self.id, None))


class _Parts:
    """What the chunks so far hold that is not out yet: calls being built,
    the signatures of calls not yet shown."""

    __slots__ = ("calls", "order", "signatures")

    def __init__(self) -> None:
        self.calls: dict[int, _Call] = {}
        self.order: list[int] = []
        self.signatures: dict[str, str] = {}

    def call(self, delta: ToolCallDelta) -> _Call:
        found = self.calls.get(delta.index)
        if found is None:
            found = self.calls[delta.index] = _Call(delta)
            self.order.append(delta.index)
        if delta.arguments:
            found.args.append(delta.arguments)
        return found


class StreamRenderer(Streamed):
    """The responses of one streamed answer, chunk by chunk, as SSE events
    (``sse``) or a JSON array's elements."""

    __slots__ = ("_began", "_id", "_model", "_parts", "_sse")

    def __init__(self, *, response_id: str, model: str, sse: bool) -> None:
        Streamed.__init__(self)
        self._id = response_id
        self._model = model
        self._sse = sse
        self._began = False
        self._parts = _Parts()

    @property
    def complete(self) -> bool:
        return self._done

    def end(self) -> bytes:
        """Nothing: ``feed`` renders the final chunk, and the array's close."""
        return b""

    def fail(self, err: FlatgateError) -> bytes:
        if self._sse:
            return error_event(err)
        element = error_element(err)
        if self._began:
            return element
        self._began = True
        return b"[" + element[3:]

    def _frame(self, response: GenerateContentResponse, last: bool = False) -> bytes:
        body = _encode(response)
        if self._sse:
            return b"data: " + body + b"\r\n\r\n"
        head = b",\r\n" if self._began else b"["
        self._began = True
        return head + body + (b"]" if last else b"")

    def feed(self, chunk: Chunk) -> bytes:
        """The bytes for one chunk; an error chunk raises the ``FlatgateError`` it carries."""
        finish = chunk.finish_reason
        if chunk.error is not None or finish == _ERROR:
            raise chunk_error(chunk.error)
        if chunk.model:
            self._model = chunk.model
        if chunk.usage is not None:
            self._usage = chunk.usage
        pending = self._parts
        parts: list[Part] = []
        if chunk.reasoning:
            parts.append(Part(text=chunk.reasoning, thought=True))
        text_signature = None
        rp = chunk.reasoning_part
        found = _signature(rp) if rp is not None else None
        if found is not None:
            where, signature = found
            if where == SIGNED_TEXT:
                text_signature = signature
            elif where:
                pending.signatures[where] = signature
            else:
                parts.append(Part(text="", thought=True, thought_signature=signature))
        if chunk.content or text_signature:
            parts.append(Part(text=chunk.content, thought_signature=text_signature))
        for delta in chunk.tool_calls:
            pending.call(delta)
        if finish:
            for index in pending.order:
                parts.append(pending.calls[index].part(pending.signatures))
            pending.order.clear()
            self._done = True
            if not parts:  # Google's final chunk has a part, an empty text
                parts.append(Part(text=""))
        elif not parts:
            return b""
        candidate = Candidate(
            content=Content(parts, _MODEL),
            finish_reason=finish_reason_name(chunk),
            index=0,
        )
        response = GenerateContentResponse(
            candidates=[candidate],
            usage_metadata=usage_metadata(self._usage) if finish else None,
            model_version=self._model,
            response_id=self._id,
        )
        return self._frame(response, last=bool(finish))


class Aggregator:
    """Folds the chunks of a ``generateContent`` answer into one response."""

    __slots__ = ("_id", "_model", "_out", "_parts", "_stop", "_usage")

    def __init__(self, *, response_id: str, model: str) -> None:
        self._id = response_id
        self._model = model
        # The parts in the order they began: texts, thoughts, calls (by index).
        self._out: list[int | Part] = []
        self._parts = _Parts()
        self._usage: Usage | None = None
        self._stop: Chunk | None = None

    @property
    def finished(self) -> bool:
        return self._stop is not None

    @property
    def complete(self) -> bool:
        return self._stop is not None

    @property
    def usage(self) -> Usage | None:
        return self._usage

    def _text(self, text: str, thought: bool) -> None:
        out = self._out
        last = out[-1] if out else None
        if isinstance(last, Part) and bool(last.thought) == thought and last.text is not None:
            last.text += text
        else:
            out.append(Part(text=text, thought=True if thought else None))

    def feed(self, chunk: Chunk) -> None:
        """Take one chunk; an error chunk raises the ``FlatgateError`` it carries."""
        if chunk.error is not None or chunk.finish_reason == _ERROR:
            raise chunk_error(chunk.error)
        if chunk.model:
            self._model = chunk.model
        if chunk.reasoning:
            self._text(chunk.reasoning, True)
        rp = chunk.reasoning_part
        found = _signature(rp) if rp is not None else None
        if found is not None:
            self._signed(*found)
        if chunk.content:
            self._text(chunk.content, False)
        for delta in chunk.tool_calls:
            if delta.index not in self._parts.calls:
                self._out.append(delta.index)
            self._parts.call(delta)
        if chunk.usage is not None:
            self._usage = chunk.usage
        if chunk.finish_reason:
            self._stop = chunk

    def _signed(self, where: str, signature: str) -> None:
        if where and where != SIGNED_TEXT:
            self._parts.signatures[where] = signature
            return
        thought = not where
        for part in reversed(self._out):
            if isinstance(part, Part) and bool(part.thought) == thought:
                part.thought_signature = signature
                return
        # Nothing of its kind yet (a signature on an empty text): a part of its own.
        self._out.append(
            Part(text="", thought=True if thought else None, thought_signature=signature)
        )

    def body(self) -> bytes:
        """The ``GenerateContentResponse`` JSON body."""
        calls, signatures = self._parts.calls, self._parts.signatures
        parts = [
            calls[item].part(signatures) if isinstance(item, int) else item for item in self._out
        ]
        stop = self._stop
        candidate = Candidate(
            content=Content(parts, _MODEL),
            finish_reason=finish_reason_name(stop) if stop is not None else None,
            index=0,
        )
        return _encode(
            GenerateContentResponse(
                candidates=[candidate],
                usage_metadata=usage_metadata(self._usage)
                or UsageMetadata(prompt_token_count=0, total_token_count=0),
                model_version=self._model,
                response_id=self._id,
            )
        )
