"""The ``openai-responses`` backend's stream: Responses API events into chunk frames.

The server sends ``event:`` + ``data:`` pairs whose JSON names its own
``type`` (the ``event:`` line is not needed). Into chunk frames:

- ``response.created`` / ``response.in_progress`` / ``response.queued``: the
  model the server reports;
- ``response.output_text.delta`` -> content; ``response.refusal.delta`` ->
  content too (the model's refusal is what it said); a text delta's
  ``logprobs`` (when the request asked for them) -> the chunk's extras
  ``{"logprobs": {"content": [...]}}``, dialect OpenAI Chat: logprobs travel
  in Chat Completions' shape from every backend (docs/design.md), the
  entries as the server sent them (both APIs give each token's ``token``,
  ``logprob`` and ``top_logprobs``); a message item that came with no
  deltas -> at its ``output_item.done``, its parts' text and logprobs;
- ``response.reasoning_summary_text.delta`` and
  ``response.reasoning_text.delta`` -> reasoning (a blank line between one
  item's summary parts); a reasoning item's ``response.output_item.done`` ->
  a chunk with ``reasoning_part``: its id, its ``encrypted_content`` as
  ``opaque`` (present when the request's ``include`` asked for it), its
  summary text (parts joined by blank lines), dialect OpenAI Responses;
- a ``function_call`` item: ``output_item.added`` -> the call's start (our
  index, its ``call_id``, its name), ``response.function_call_arguments.delta``
  -> its argument fragments; a call whose arguments came only whole (in
  ``.done`` or the item's ``output_item.done``) gets them then, and one with
  none gets ``"{}"``;
- any other output item (a hosted tool's: ``web_search_call``,
  ``file_search_call``, ``code_interpreter_call``, ``mcp_call``, ...) -> at its
  ``output_item.done``, a chunk whose ``extras`` is ``{"output_item": <the
  item as sent>}`` (dialect OpenAI Responses); its progress events
  (``*.in_progress``, ``*.searching``, ...), once the answer has begun, are
  empty chunks (heartbeats the edge relays as its own keep-alive);
- ``response.completed`` -> the final chunk: ``tool_calls`` when the answer
  made function calls, else ``stop``; a completed event whose response says
  ``incomplete`` is read as ``response.incomplete``;
- ``response.incomplete`` -> ``length`` (``max_output_tokens``, and any
  reason but ``content_filter``) or ``content_filter``, with the usage;
- usage from the final response: ``input_tokens`` -> prompt tokens,
  ``output_tokens`` -> completion tokens, ``input_tokens_details
  .cached_tokens`` and ``.cache_write_tokens``, ``output_tokens_details
  .reasoning_tokens``;
- ``response.failed`` (its ``response.error``) and ``error`` events -> one
  error chunk (``backend_stream_error``, the server's code and message);
- unknown events, ``[DONE]``, ``content_part`` and ``.done`` events are
  ignored; a body that ends before its terminal event is one truncation
  chunk (``json_api.EventStream``).

The events, the ``response`` object and its output items are the Responses
API's one model (``apis.openai_responses.events`` and ``.answer``); what an
item, the usage and an error become (``message_of``, ``reasoning_text``,
``logprobs_extras``, ``hosted_extras``, ``usage_of``, ``error_text``) is
public: the whole answer's translator (``whole``) reads the same items the
same way. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.openai_responses.answer import (
    OutputItem,
    Response,
    ResponseError,
    ResponseUsage,
    decode_output_item,
    error_object,
)
from flatgate.proxy.apis.openai_responses.events import Event, decode_event
from flatgate.proxy.backends.json_api import EventStream, count
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta, Usage
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = [
    "ERRED",
    "FAILED",
    "INCOMPLETE_REASONS",
    "ResponsesStream",
    "error_text",
    "hosted_extras",
    "logprobs_extras",
    "message_of",
    "reasoning_text",
    "usage_of",
]

# incomplete_details.reason -> the finish (anything else: LENGTH).
INCOMPLETE_REASONS: dict[str, FinishReason] = {
    "max_output_tokens": FinishReason.LENGTH,
    "max_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}
_DIALECT = int(ApiDialect.OPENAI_RESPONSES)
_CHAT = int(ApiDialect.OPENAI_CHAT)
# A delta that carries no logprobs says so (compared as sent: no copy per token).
_NO_LOGPROBS = (msgspec.Raw(b"[]"), msgspec.Raw(b"null"))
# Suffixes of a hosted tool's progress events.
_PROGRESS = (".in_progress", ".searching", ".interpreting", ".generating", ".partial_image")
_DONE = b"[DONE]"
_TEXT = ("response.output_text.delta", "response.refusal.delta")
_THOUGHT = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")
_TERMINAL = ("response.completed", "response.incomplete")
_STARTED = ("response.created", "response.in_progress", "response.queued")
# An error's message when the server gave none: a failed response's, an
# ``error`` event's.
FAILED = "the response failed"
ERRED = "the backend failed"


_decode_entries = msgspec.json.Decoder(list[msgspec.Raw]).decode


def logprobs_extras(entries: bytes) -> str:
    """A chunk's extras for the logprobs ``entries`` (a JSON list, as the
    server sent it), in Chat Completions' shape (dialect OpenAI Chat)."""
    return (b'{"logprobs":{"content":' + entries + b"}}").decode()


def hosted_extras(item: bytes) -> str:
    """A chunk's extras for a hosted tool's output item, as the server sent
    it (dialect OpenAI Responses)."""
    return (b'{"output_item":' + item + b"}").decode()


def message_of(item: OutputItem) -> tuple[str, bytes]:
    """A message item's text (its refusals are text too) and its parts'
    logprobs entries as one JSON list (``b""``: none; a value that is not a
    list is not the API's, and is left out)."""
    parts = item.content or ()
    text = "".join(p.text or p.refusal for p in parts)
    entries: list[msgspec.Raw] = []
    for p in parts:
        if p.logprobs and p.logprobs not in _NO_LOGPROBS:
            try:
                entries += _decode_entries(p.logprobs)
            except msgspec.DecodeError:
                continue
    if not entries:
        return text, b""
    return text, b"[" + b",".join(bytes(e) for e in entries) + b"]"


def reasoning_text(item: OutputItem) -> str:
    """A reasoning item's text: its summary parts (or, from vLLM, its
    ``reasoning_text`` content) joined by blank lines."""
    texts = [t.text for t in item.summary or ()] or [t.text for t in item.content or ()]
    return "\n\n".join(texts)


class _Call:
    __slots__ = ("index", "used")

    def __init__(self, index: int, used: bool) -> None:
        self.index = index  # ours
        self.used = used  # arguments sent


class ResponsesStream(EventStream):
    """One Responses API stream into chunk frames (see the module docstring).

    Output items come one after another, so the state of the one in progress
    is kept, not looked up by its ``output_index`` alone: servers have sent an
    item's deltas and its ``output_item.done`` under different indices.
    """

    __slots__ = (
        "_by_id",
        "_calls",
        "_last",
        "_model",
        "_spoke",
        "_summary",
        "_texting",
        "_thought",
        "_writer",
    )

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id)
        self._model = model
        self._writer: ChunkWriter | None = None
        # The function calls begun, by output_index and by call_id; the last one.
        self._calls: dict[int, _Call] = {}
        self._by_id: dict[str, _Call] = {}
        self._last: _Call | None = None
        # The reasoning deltas since the last reasoning item ended (None:
        # none), and the summary part they are in.
        self._thought: list[str] | None = None
        self._summary = 0
        # Whether text deltas came since the last message item ended.
        self._texting = False
        self._spoke = False

    def _out(self) -> ChunkWriter:
        w = self._writer
        if w is None:
            w = self._writer = ChunkWriter(self._request_id, self._model)
        return w

    def _event(self, name: bytes, data: bytes) -> bytes:
        if data[:6] == _DONE:
            return b""
        ev = decode_event(data)
        kind = ev.type
        if kind in _TEXT:
            if not ev.delta:
                return b""
            self._spoke = self._texting = True
            if ev.logprobs and ev.logprobs not in _NO_LOGPROBS:
                extras = logprobs_extras(bytes(ev.logprobs))
                return self._out().chunk(content=ev.delta, extras=extras, extras_dialect=_CHAT)
            return self._hold(self._out(), ev.delta, 0)  # out with its read's text
        if kind in _THOUGHT:
            return self._reasoning_delta(ev)
        if kind == "response.function_call_arguments.delta":
            call = self._calls.get(ev.output_index) or self._last
            if call is None or not ev.delta:
                return b""
            call.used = True
            return self._out().arguments(call.index, ev.delta)
        if kind == "response.output_item.added":
            return self._added(ev)
        if kind == "response.output_item.done":
            return self._item_done(ev)
        if kind == "response.function_call_arguments.done":
            return self._whole_arguments(self._calls.get(ev.output_index), ev.arguments)
        if kind in _TERMINAL:
            return self._final(ev.response)
        if kind == "response.failed":
            resp = ev.response
            err = (error_object(resp.error) if resp is not None else None) or ResponseError()
            return self._fail(codes.BACKEND_STREAM_ERROR, error_text(err, FAILED))
        if kind == "error":
            err = ev.error or ResponseError(ev.code, ev.message)
            return self._fail(codes.BACKEND_STREAM_ERROR, error_text(err, ERRED))
        if kind in _STARTED:
            if ev.response is not None and ev.response.model and self._writer is None:
                self._model = ev.response.model
            return b""
        if self._spoke and kind.endswith(_PROGRESS):
            # A hosted tool at work: a heartbeat (see anthropic's pings).
            return self._out().chunk()
        return b""  # content parts, .done events, annotations, unknown events

    def _reasoning_delta(self, ev: Event) -> bytes:
        if not ev.delta:
            return b""
        text = ev.delta
        said = self._thought
        if said is None:
            said = self._thought = []
            self._summary = ev.summary_index
        elif self._summary != ev.summary_index:
            self._summary = ev.summary_index
            text = "\n\n" + text  # a new summary part
        said.append(text)
        self._spoke = True
        return self._out().reasoning(text)

    def _added(self, ev: Event) -> bytes:
        if not ev.item:
            return b""
        item = decode_output_item(ev.item)
        if item.type == "reasoning" and item.id:
            # The block's id before its summary: the client's item has it from the start.
            self._spoke = True
            opening = ReasoningPart(dialect=_DIALECT, id=item.id)
            return self._out().chunk(reasoning_part=opening)
        if item.type != "function_call" or ev.output_index in self._calls:
            return b""
        return self._start(ev.output_index, item)

    def _start(self, at: int, item: OutputItem) -> bytes:
        args = item.arguments or ""
        call = self._last = self._calls[at] = _Call(len(self._by_id), bool(args))
        call_id = item.call_id or item.id or ""
        self._by_id[call_id or f"#{call.index}"] = call
        self._spoke = True
        delta = ToolCallDelta(call.index, call_id, item.name or "", args)
        return self._out().chunk(tool_calls=(delta,))

    def _whole_arguments(self, call: _Call | None, arguments: str | None) -> bytes:
        """A call's whole arguments, sent only when no fragment came."""
        call = call or self._last
        if call is None or call.used or not arguments:
            return b""
        call.used = True
        return self._out().arguments(call.index, arguments)

    def _item_done(self, ev: Event) -> bytes:
        if not ev.item:
            return b""
        item = decode_output_item(ev.item)
        kind = item.type
        if kind == "message":
            texting, self._texting = self._texting, False
            if texting:
                return b""
            # A server that sent the message whole, without deltas.
            text, entries = message_of(item)
            if not text:
                return b""
            self._spoke = True
            if entries:
                extras = logprobs_extras(entries)
                return self._out().chunk(content=text, extras=extras, extras_dialect=_CHAT)
            return self._out().content(text)
        if kind == "function_call":
            return self._call_done(ev.output_index, item)
        if kind == "reasoning":
            return self._reasoning(item)
        # A hosted tool's item: relayed as the server sent it.
        self._spoke = True
        return self._out().chunk(extras=hosted_extras(bytes(ev.item)), extras_dialect=_DIALECT)

    def _call_done(self, at: int, item: OutputItem) -> bytes:
        out = b""
        call = self._by_id.get(item.call_id or "") or self._calls.get(at)
        if call is None:  # a server that sends no .added
            out = self._start(at, msgspec.structs.replace(item, arguments=""))
            call = self._calls[at]
        out += self._whole_arguments(call, item.arguments)
        if not call.used:
            call.used = True
            out += self._out().arguments(call.index, "{}")
        return out

    def _reasoning(self, item: OutputItem) -> bytes:
        said, self._thought = self._thought, None
        text = reasoning_text(item) or "".join(said or ())
        opaque = (item.encrypted_content or "").encode()
        if not (text or opaque or item.id):
            return b""
        self._spoke = True
        w = self._out()
        # Its text goes out as reasoning first, when no delta carried it.
        before = w.reasoning(text) if text and said is None else b""
        part = ReasoningPart(text=text, opaque=opaque, dialect=_DIALECT, id=item.id or "")
        return before + w.chunk(reasoning_part=part)

    def _final(self, resp: Response | None) -> bytes:
        if resp is None:
            return self._fail(codes.BACKEND_PROTOCOL_ERROR, "a terminal event without its response")
        finish = FinishReason.TOOL_CALLS if self._by_id else FinishReason.STOP
        if resp.status == "incomplete":
            details = resp.incomplete_details
            reason = (details.reason if details is not None else None) or ""
            finish = INCOMPLETE_REASONS.get(reason, FinishReason.LENGTH)
        elif resp.status == "failed":
            err = error_object(resp.error) or ResponseError()
            return self._fail(codes.BACKEND_STREAM_ERROR, error_text(err, FAILED))
        self.done = True
        return self._out().chunk(finish_reason=finish, usage=usage_of(resp.usage))


def usage_of(u: ResponseUsage | None) -> Usage | None:
    """The usage of a response (none when the server sent none)."""
    if u is None:
        return None
    given = u.input_tokens_details
    return Usage(
        count(u.input_tokens),
        count(u.output_tokens),
        count(given.cached_tokens) if given else 0,
        count(u.output_tokens_details.reasoning_tokens) if u.output_tokens_details else 0,
        count(given.cache_write_tokens) if given else 0,
    )


def error_text(err: ResponseError, fallback: str) -> str:
    """An error chunk's message: the server's code and message (``fallback``
    when it sent none)."""
    message = err.message or fallback
    return f"{err.code}: {message}" if err.code else message
