"""The ``openai-responses`` backend's whole answer: a ``response`` object into chunk frames.

For a request the client did not stream, the adapter asks for the answer
whole (``stream: false``) and the server answers with the ``response``
object (``apis.openai_responses.answer.Answer``). Its frames are what
``stream`` writes for the same answer streamed, without the per-delta
chunks (``json_api.WholeAnswer`` keeps the body; a server that streamed
anyway is read by the stream's translator):

- ``output``, item by item in order: a ``message`` -> content (its
  ``output_text`` and ``refusal`` parts' text), the ``output_text`` parts'
  ``logprobs`` -> the chunk's extras ``{"logprobs": {"content": [...]}}``
  (dialect OpenAI Chat); a ``reasoning`` item -> a reasoning part with its id
  alone (the item's start), then its text (summary parts joined by blank
  lines) as reasoning and the reasoning part (id, text, ``encrypted_content``
  as ``opaque``, dialect OpenAI Responses); a ``function_call`` -> a tool
  call (our index, ``call_id``, name, its arguments, ``"{}"`` when none);
  any other item (a hosted tool's) -> the extras ``{"output_item": <the item
  as sent>}`` (dialect OpenAI Responses);
- then one final chunk: ``status`` ``completed`` -> ``tool_calls`` when the
  answer made function calls, else ``stop``; ``incomplete`` ->
  ``INCOMPLETE_REASONS`` of ``incomplete_details.reason`` (else ``length``);
  with the usage and the model the server reports;
- ``failed`` (its ``error``), and a body that is an error object
  (``{"error": ...}``), -> the error chunk the stream writes for a
  ``response.failed`` or an ``error`` event; any other status (``queued``,
  ``in_progress``, ``cancelled``) is not an answer (``backend_protocol_error``);
- a ``response.compaction`` object (the answer of ``/responses/compact``):
  ``compact.compaction_frames``.

Few frames: consecutive items share a chunk while each client API's edge,
which reads a chunk's fields in one order (reasoning, reasoning part, extras,
content, tool calls), reads them in the items' order, and while the chunk's
one extras field is free. No I/O.
"""

from __future__ import annotations

from flatgate.proxy.apis.openai_responses.answer import (
    ResponseError,
    decode_answer,
    decode_output_item,
    error_object,
)
from flatgate.proxy.apis.openai_responses.compact import COMPACTION
from flatgate.proxy.backends.json_api import WholeAnswer, error_frame
from flatgate.proxy.backends.responses.compact import compaction_frames
from flatgate.proxy.backends.responses.stream import (
    ERRED,
    FAILED,
    INCOMPLETE_REASONS,
    ResponsesStream,
    error_text,
    hosted_extras,
    logprobs_extras,
    message_of,
    reasoning_text,
    usage_of,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = ["ResponsesWhole"]

_DIALECT = int(ApiDialect.OPENAI_RESPONSES)
_CHAT = int(ApiDialect.OPENAI_CHAT)
_ANSWERS = ("completed", "incomplete")

# A chunk's fields in the order every edge reads them.
_REASONING, _PART, _EXTRAS, _CONTENT, _CALLS = range(5)


class _Chunks:
    """The chunks of an answer's items, each as full as the order allows."""

    __slots__ = (
        "_at",
        "_calls",
        "_chat",
        "_content",
        "_extras",
        "_part",
        "_reasoning",
        "_w",
        "out",
    )

    def __init__(self, writer: ChunkWriter) -> None:
        self._w = writer
        self.out: list[bytes] = []
        self._clear()

    def _clear(self) -> None:
        self._at = -1  # the last field filled (-1: none)
        self._reasoning = ""
        self._part: ReasoningPart | None = None
        self._extras = ""
        self._chat = False  # whether the extras are logprobs
        self._content: list[str] = []
        self._calls: list[ToolCallDelta] = []

    def _room(self, field: int, joins: bool = False) -> None:
        """Start a new chunk unless ``field`` can follow what this one holds."""
        if field < self._at or (field == self._at and not joins):
            self.flush()
        self._at = field

    def reasoning(self, text: str) -> None:
        self._room(_REASONING)
        self._reasoning = text

    def part(self, part: ReasoningPart) -> None:
        self._room(_PART)
        self._part = part

    def hosted(self, item: bytes) -> None:
        self._room(_EXTRAS)
        self._extras = hosted_extras(item)

    def content(self, text: str, logprobs: bytes) -> None:
        if logprobs and self._extras:
            self.flush()
        self._room(_CONTENT, joins=True)
        self._content.append(text)
        if logprobs:
            self._extras = logprobs_extras(logprobs)
            self._chat = True

    def call(self, call: ToolCallDelta) -> None:
        self._room(_CALLS, joins=True)
        self._calls.append(call)

    def flush(self) -> None:
        if self._at < 0:
            return
        self.out.append(
            self._w.chunk(
                reasoning=self._reasoning,
                reasoning_part=self._part,
                extras=self._extras,
                extras_dialect=(_CHAT if self._chat else _DIALECT) if self._extras else 0,
                content="".join(self._content),
                tool_calls=self._calls,
            )
        )
        self._clear()


class ResponsesWhole(WholeAnswer):
    """One whole Responses API answer into chunk frames (see the module docstring)."""

    __slots__ = ("_model",)

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id, lambda: ResponsesStream(request_id, model))
        self._model = model

    def _answer(self, body: bytes) -> bytes:
        answer = decode_answer(body)
        if answer.object == COMPACTION:
            return compaction_frames(self._request_id, self._model, answer)
        status, err = answer.status, error_object(answer.error)
        if status == "failed":
            return self._error(err, FAILED)
        if status is None and err is not None:
            return self._error(err, ERRED)
        if status not in _ANSWERS and not (status is None and answer.output is not None):
            raise ValueError(f"not a response's answer: status {status!r}")
        w = ChunkWriter(self._request_id, answer.model or self._model)
        chunks = _Chunks(w)
        calls = 0
        for raw in answer.output or ():
            item = decode_output_item(raw)
            kind = item.type
            if kind == "message":
                text, logprobs = message_of(item)
                if text:
                    chunks.content(text, logprobs)
            elif kind == "function_call":
                call_id = item.call_id or item.id or ""
                chunks.call(ToolCallDelta(calls, call_id, item.name or "", item.arguments or "{}"))
                calls += 1
            elif kind == "reasoning":
                _reasoning(chunks, item.id or "", reasoning_text(item), item.encrypted_content)
            else:
                chunks.hosted(bytes(raw))
        chunks.flush()
        finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
        if status == "incomplete":
            details = answer.incomplete_details
            reason = (details.reason if details is not None else None) or ""
            finish = INCOMPLETE_REASONS.get(reason, FinishReason.LENGTH)
        chunks.out.append(w.chunk(finish_reason=finish, usage=usage_of(answer.usage)))
        return b"".join(chunks.out)

    def _error(self, err: ResponseError | None, fallback: str) -> bytes:
        message = error_text(err or ResponseError(), fallback)
        return error_frame(self._request_id, codes.BACKEND_STREAM_ERROR, message)


def _reasoning(chunks: _Chunks, item_id: str, text: str, encrypted: str | None) -> None:
    """A reasoning item as the stream gives it: its start (the id alone,
    which the edge opens the client's item with), its text, its part."""
    if item_id:
        chunks.part(ReasoningPart(dialect=_DIALECT, id=item_id))
    opaque = (encrypted or "").encode()
    if not (text or opaque or item_id):
        return
    if text:
        chunks.reasoning(text)
    chunks.part(ReasoningPart(text=text, opaque=opaque, dialect=_DIALECT, id=item_id))
