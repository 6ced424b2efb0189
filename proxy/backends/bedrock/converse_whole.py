"""A whole Converse answer into chunk frames (``ConverseWhole``), with
``converse_stream``'s mappings (stop reasons, usage, reasoning parts).

The answer's message blocks, in order: a ``reasoningContent`` block is a
chunk of its own (its text as reasoning, and its ``reasoning_part``: the
signature, or the redacted bytes base64-encoded, dialect Messages); the
``text`` blocks are joined into the final chunk's content and each
``toolUse`` block is a tool call there (its ``input`` as the arguments'
JSON text), with the finish reason and usage: a text answer is one frame.
Other blocks (citations, guardrail content, images) are skipped. A
``malformed_*`` stop reason is an error chunk, as in the stream. A body that
is an event stream (a server that streamed anyway) goes to
``ConverseStream``. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.bedrock_converse.answer import Converse
from flatgate.proxy.backends.bedrock.converse_stream import (
    ConverseStream,
    finish_of,
    redacted_part,
    signed_part,
    usage_of,
)
from flatgate.proxy.backends.json_api import WholeAnswer, error_frame
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["ConverseWhole"]

_decode = msgspec.json.Decoder(Converse).decode
_EMPTY = (b"", b"null", b"{}")


class ConverseWhole(WholeAnswer):
    """One whole Converse answer into chunk frames (see the module docstring)."""

    __slots__ = ("_model",)

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id, lambda: ConverseStream(request_id, model))
        self._model = model

    def _answer(self, body: bytes) -> bytes:
        answer = _decode(body)
        if not answer.stop_reason:
            raise ValueError("an answer with no stopReason")
        finish = finish_of(answer.stop_reason)
        if finish is FinishReason.ERROR:
            why = f"the model's output could not be read ({answer.stop_reason})"
            return error_frame(self._request_id, codes.BACKEND_STREAM_ERROR, why)
        w = ChunkWriter(self._request_id, self._model)
        out: list[bytes] = []
        texts: list[str] = []
        calls: list[ToolCallDelta] = []
        message = answer.output.message
        for block in message.content if message is not None else ():
            if block.text is not None:
                texts.append(block.text)
            elif block.tool_use is not None:
                use = block.tool_use
                raw = bytes(use.input).strip()
                arguments = "{}" if raw in _EMPTY else raw.decode()
                calls.append(ToolCallDelta(len(calls), use.tool_use_id, use.name, arguments))
            elif block.reasoning_content is not None:
                r = block.reasoning_content
                if r.reasoning_text is not None:
                    text = r.reasoning_text.text
                    part = signed_part(text, r.reasoning_text.signature or "")
                    out.append(w.chunk(reasoning=text, reasoning_part=part))
                elif r.redacted_content is not None:
                    out.append(w.chunk(reasoning_part=redacted_part(r.redacted_content)))
        out.append(
            w.chunk(
                content="".join(texts),
                tool_calls=calls,
                finish_reason=finish,
                usage=usage_of(answer.usage),
            )
        )
        return b"".join(out)
