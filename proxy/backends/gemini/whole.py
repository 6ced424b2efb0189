"""A whole ``generateContent`` answer into chunk frames (``GeminiWhole``),
with ``stream``'s mappings (finish reasons, usage, tool-call ids, reasoning
parts).

The first candidate's parts, in order: the thoughts (``"thought": true``)
are one chunk, their text as reasoning with a ``reasoning_part`` (the text,
the signature one of them carried, dialect Gemini); a signature on a text
part is a chunk with its ``reasoning_part`` (``id`` ``encode.SIGNED_TEXT``),
one on a function call a chunk with its (``id`` the call's); the texts are
joined into the final chunk's content and each ``functionCall`` is a tool
call there, with the finish reason (TOOL_CALLS when it called functions)
and usage: a text answer is one frame. A blocked prompt
(``promptFeedback.blockReason``, no candidates) is a final chunk with finish
CONTENT_FILTER and no content; a broken output (``MALFORMED_FUNCTION_CALL``
...) an error chunk, as in the stream; an answer with no finish reason is
taken as finished (STOP). Other parts (code execution, images) are skipped.
A body that is server-sent events (a server that streamed anyway) goes to
``GeminiStream``. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.gemini.answer import GenerateContentResponse
from flatgate.proxy.backends.gemini.encode import SIGNED_TEXT
from flatgate.proxy.backends.gemini.stream import (
    GeminiStream,
    arguments_of,
    call_id,
    finish_of,
    signature_part,
    thought_part,
    usage_of,
)
from flatgate.proxy.backends.json_api import WholeAnswer, error_frame
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["GeminiWhole"]

_decode = msgspec.json.Decoder(GenerateContentResponse).decode


class GeminiWhole(WholeAnswer):
    """One whole generateContent answer into chunk frames (see the module docstring)."""

    __slots__ = ("_model",)

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id, lambda: GeminiStream(request_id, model))
        self._model = model

    def _answer(self, body: bytes) -> bytes:
        answer = _decode(body)
        w = ChunkWriter(self._request_id, self._model)
        usage = usage_of(answer.usage_metadata)
        if not answer.candidates:
            feedback = answer.prompt_feedback
            if feedback is not None and feedback.block_reason:
                return w.chunk(finish_reason=FinishReason.CONTENT_FILTER, usage=usage)
            raise ValueError("an answer with no candidates and no block reason")
        cand = answer.candidates[0]
        finish = finish_of(cand.finish_reason)
        if finish is FinishReason.ERROR:
            why = f"the model's output could not be used ({cand.finish_reason})"
            return error_frame(self._request_id, codes.BACKEND_STREAM_ERROR, why)
        out: list[bytes] = []
        texts: list[str] = []
        thoughts: list[str] = []
        thought_signature: str | None = None
        calls: list[ToolCallDelta] = []
        for part in cand.content.parts if cand.content is not None else ():
            if part.thought:
                thoughts.append(part.text or "")
                thought_signature = part.thought_signature or thought_signature
            elif part.function_call is not None:
                call = part.function_call
                ident = call_id(call, self._request_id, len(calls), part.thought_signature)
                if part.thought_signature:
                    out.append(
                        w.chunk(reasoning_part=signature_part(part.thought_signature, ident))
                    )
                calls.append(ToolCallDelta(len(calls), ident, call.name, arguments_of(call)))
            elif part.text is not None:
                texts.append(part.text)
                if part.thought_signature:
                    signed = signature_part(part.thought_signature, SIGNED_TEXT)
                    out.append(w.chunk(reasoning_part=signed))
        if thoughts or thought_signature:
            text = "".join(thoughts)
            part_ = thought_part(text, thought_signature)
            out.insert(0, w.chunk(reasoning=text, reasoning_part=part_))
        if finish is FinishReason.STOP and calls:
            finish = FinishReason.TOOL_CALLS
        out.append(
            w.chunk(content="".join(texts), tool_calls=calls, finish_reason=finish, usage=usage)
        )
        return b"".join(out)
