"""A ``streamGenerateContent?alt=sse`` answer into chunk frames
(``GeminiStream``), and what its whole twin (``whole``) shares with it:
finish reasons, usage, tool-call ids, reasoning parts.

The body is server-sent events, each ``data:`` one ``GenerateContentResponse``
(``apis.gemini.answer``, read as its ``StreamChunk``: the members acted on,
the usage kept as JSON until the end); there is no closing event: the body's
end is the stream's. The first candidate is read (the encoder asks for one):

- a ``text`` part -> content (the texts of one read go out as one chunk); a
  thought (``"thought": true``: a thought summary, asked for with
  ``includeThoughts``) -> reasoning, and when the thoughts end (another part,
  or the finish) one chunk with ``reasoning_part``: the thoughts' whole text
  and the signature one of them carried, dialect Gemini, ``id`` empty;
- a ``thoughtSignature`` on a text part (Gemini 3 puts the answer's
  signature on its last part, often an empty text) -> a ``reasoning_part``
  with ``opaque`` ``SIGNED_TEXT``, a newline and the signature (the base64
  text as Google sent it), and ``id`` ``encode.SIGNED_TEXT``, which the
  encoder puts back on the text;
- a ``functionCall`` part -> one tool call, whole (Gemini sends each call
  complete): its ``id`` (the call's own, else ``call_<request id>_<n>``, so
  that a conversation's ids stay unique; with its signature, when it has
  one, after ``__thought__``: ``encode.signed_call_id``), name and ``args``
  as the arguments' JSON (``{}`` for none); a signature on it -> also a
  ``reasoning_part`` before the call with ``id`` the call's id: the encoder
  puts the signature back on that call's ``functionCall`` from either;
- code execution parts, inline data (generated images) and grounding are
  skipped;
- ``finishReason`` (``answer.FINISH_REASONS``): STOP -> STOP, or TOOL_CALLS
  when the answer called functions; MAX_TOKENS -> LENGTH; SAFETY,
  RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII and the other filters ->
  CONTENT_FILTER (a refusal); MALFORMED_FUNCTION_CALL and the other broken
  outputs -> an error chunk naming it. The final chunk goes out at the
  body's end, with the last usage seen (Google repeats the usage, growing,
  in the chunks; a chunk after the finish may still carry it);
- ``promptFeedback.blockReason`` (the prompt was blocked: no candidates) ->
  the final chunk at once, finish CONTENT_FILTER;
- usage (``usageMetadata``): Google counts the cached tokens inside
  ``promptTokenCount`` and the thoughts apart from ``candidatesTokenCount``:
  ``prompt_tokens`` is the prompt's count plus ``toolUsePromptTokenCount``,
  ``cached_tokens`` ``cachedContentTokenCount``, ``completion_tokens`` the
  candidates' plus the thoughts', ``reasoning_tokens`` the thoughts';
- an ``error`` object in an event (Google's error shape) -> one error chunk
  naming its status; an event that does not decode -> ``backend_protocol_error``;
  a body that ends before a finish -> ``backend_stream_truncated``.

Exactly one terminal chunk, as every translator. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.gemini.answer import FINISH_REASONS, StreamChunk, UsageMetadata
from flatgate.proxy.apis.gemini.content import FunctionCall
from flatgate.proxy.backends.gemini.encode import SIGNED_TEXT, signed_call_id
from flatgate.proxy.backends.json_api import EventStream, count
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk import frames
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = [
    "GeminiStream",
    "arguments_of",
    "call_id",
    "finish_of",
    "signature_part",
    "thought_part",
    "usage_of",
]

_DIALECT = int(ApiDialect.GEMINI)
_EMPTY = (b"", b"null")


_decode = msgspec.json.Decoder(StreamChunk).decode
_decode_usage = msgspec.json.Decoder(UsageMetadata).decode


def finish_of(reason: str | None) -> FinishReason:
    """Our finish reason for Gemini's (any it does not name is STOP)."""
    return FINISH_REASONS.get(reason or "", FinishReason.STOP)


def usage_of(u: UsageMetadata | None) -> frames.Usage | None:
    """The final chunk's usage (see the module docstring)."""
    if u is None:
        return None
    thoughts = count(u.thoughts_token_count)
    prompt = count(count(u.prompt_token_count) + count(u.tool_use_prompt_token_count))
    completion = count(count(u.candidates_token_count) + thoughts)
    return frames.Usage(prompt, completion, count(u.cached_content_token_count), thoughts)


def call_id(call: FunctionCall, request_id: str, n: int, signature: str | None) -> str:
    """A tool call's id: Gemini's own, else one unique in the conversation;
    carrying the call's signature, when it has one."""
    return signed_call_id(call.id or f"call_{request_id}_{n}", signature)


def arguments_of(call: FunctionCall) -> str:
    raw = bytes(call.args).strip()
    return "{}" if raw in _EMPTY else raw.decode()


def thought_part(text: str, signature: str | None) -> ReasoningPart:
    """Thoughts, and the signature one of them carried; the payload's empty
    place (``\n<signature>``) says "a thought" whatever id it comes back under."""
    return ReasoningPart(text=text, opaque=f"\n{signature or ''}".encode(), dialect=_DIALECT)


def signature_part(signature: str, at: str) -> ReasoningPart:
    """A signature carried by the answer's text (``at`` ``SIGNED_TEXT``) or
    by a call (its id). The payload names where it goes too
    (``<at>\n<signature>``): a Responses client gets the payload back as an
    item of its own id, and the encoder still knows where to put it."""
    return ReasoningPart(opaque=f"{at}\n{signature}".encode(), dialect=_DIALECT, id=at)


class GeminiStream(EventStream):
    """One streamGenerateContent answer into chunk frames (see the module docstring)."""

    __slots__ = ("_calls", "_finish", "_reason", "_thought", "_thought_signature", "_usage", "_w")

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id)
        self._w = ChunkWriter(request_id, model)
        self._calls = 0
        self._finish = FinishReason.NONE
        self._reason = ""
        self._usage = b""  # the last usageMetadata's JSON
        self._thought: list[str] = []
        self._thought_signature: str | None = None

    def _event(self, name: bytes, data: bytes) -> bytes:
        ev = _decode(data)
        if ev.error is not None:
            err = ev.error
            why = f"{err.status or err.code or 'error'}: {err.message or 'the backend failed'}"
            return self._fail(codes.BACKEND_STREAM_ERROR, why)
        if len(ev.usage_metadata):
            self._usage = bytes(ev.usage_metadata)
        feedback = ev.prompt_feedback
        if feedback is not None and feedback.block_reason and not ev.candidates:
            self._finish = FinishReason.CONTENT_FILTER
            return self._final()
        if not ev.candidates:
            return b""
        cand = ev.candidates[0]
        out: list[bytes] = []
        w = self._w
        content = cand.content
        for part in content.parts if content is not None else ():
            if part.thought:
                if part.text:
                    self._thought.append(part.text)
                    out.append(w.reasoning(part.text))
                if part.thought_signature:
                    self._thought_signature = part.thought_signature
                continue
            if self._thought or self._thought_signature:
                out.append(self._end_thoughts())
            if part.function_call is not None:
                out.append(self._call(part.function_call, part.thought_signature))
            elif part.text is not None:
                if part.text:
                    if out:
                        out.append(w.content(part.text))
                    else:
                        held = self._hold(w, part.text, 0)
                        if held:
                            out.append(held)
                if part.thought_signature:
                    if self._held:
                        out.append(self._release())
                    part_ = signature_part(part.thought_signature, SIGNED_TEXT)
                    out.append(w.chunk(reasoning_part=part_))
        if cand.finish_reason:
            self._reason = cand.finish_reason
            self._finish = finish_of(cand.finish_reason)
            if self._finish is FinishReason.ERROR:
                if self._held:
                    out.append(self._release())
                out.append(self._broken())
        return b"".join(out)

    def _end_thoughts(self) -> bytes:
        part = thought_part("".join(self._thought), self._thought_signature)
        self._thought.clear()
        self._thought_signature = None
        return self._w.chunk(reasoning_part=part)

    def _call(self, call: FunctionCall, signature: str | None) -> bytes:
        n = self._calls
        self._calls += 1
        ident = call_id(call, self._request_id, n, signature)
        out = b""
        if signature:
            out = self._w.chunk(reasoning_part=signature_part(signature, ident))
        delta = ToolCallDelta(n, ident, call.name, arguments_of(call))
        return out + self._w.chunk(tool_calls=(delta,))

    def _broken(self) -> bytes:
        why = f"the model's output could not be used ({self._reason})"
        return self._fail(codes.BACKEND_STREAM_ERROR, why)

    def _final(self) -> bytes:
        out = b""
        if self._thought or self._thought_signature:
            out = self._end_thoughts()
        finish = self._finish
        if finish is FinishReason.STOP and self._calls:
            finish = FinishReason.TOOL_CALLS
        self.done = True
        usage = usage_of(_decode_usage(self._usage)) if self._usage else None
        return out + self._w.chunk(finish_reason=finish, usage=usage)

    def _ended(self) -> bytes:
        if self._finish:
            return self._final()
        return super()._ended()
