"""The stub's OpenAI Responses protocol: ``POST /v1/responses``.

OpenAI's keys, faults, error shape and ``GET /v1/models`` are the ``openai``
wire's (``OpenAIWire``, which this one extends); the request is read with
the Responses API's one model and validated by ``stub_request``. The answer
is the same echo, as the Responses API says it (written as plain values: the
model's answer Structs, ``apis.openai_responses.answer``, hold only what
flatgate reads of an answer):

- output items: a ``reasoning`` item first when the request asks for
  reasoning (a ``reasoning`` setting, or ``include`` with
  ``reasoning.encrypted_content``), whose summary (with ``reasoning.summary``)
  is one deterministic sentence and whose ``encrypted_content`` (with that
  ``include``) is the stub's fake (``stub_request.encrypted``),
  which it checks when the item comes back; then the echo as a ``message``
  with one ``output_text`` part, or, when the request forces a function, a
  ``function_call`` (``call_id`` ``call_<request id>``);
- usage: ``input_tokens`` the prompt's words, ``output_tokens`` the echo's
  deltas plus the reasoning's words (``output_tokens_details
  .reasoning_tokens``);
- non-streamed: the ``response`` object (``status`` ``completed``, or
  ``incomplete`` with ``incomplete_details.reason`` ``max_output_tokens``), its
  settings echoed from the request (``store`` as sent: the stub stores
  nothing);
- streamed: the documented events, each ``event:`` + ``data:`` with a
  ``sequence_number`` one above the last: ``response.created``,
  ``response.in_progress``; for the reasoning item
  ``response.output_item.added``, ``response.reasoning_summary_part.added``,
  ``response.reasoning_summary_text.delta`` (a word each) and ``.done``,
  ``response.reasoning_summary_part.done``, ``response.output_item.done``;
  for the message ``response.output_item.added``,
  ``response.content_part.added``, a ``response.output_text.delta`` per delta,
  ``response.output_text.done``, ``response.content_part.done``,
  ``response.output_item.done``; for a call ``response.output_item.added``, a
  ``response.function_call_arguments.delta`` per fragment, ``.done`` and
  ``response.output_item.done``; then ``response.completed`` (or
  ``response.incomplete``);
- the ``error`` fault mid-stream is a ``response.failed`` event (status
  ``failed``, ``error.code`` ``server_error``).

``POST /v1/responses/compact`` too (``Wire.posts``): ``compact.stub_compact``.

The deltas (the echo's, or a call's argument fragments) are the stream's
steps, the unit of ``ttft_ms``/``itl_ms`` and of ``fault_after``. In cadence
mode one delta's bytes are reused for every later token, so its
``sequence_number`` repeats (flatgate's adapter does not read it). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from flatgate.proxy.apis.openai_responses.compact import COMPACT_PATH
from flatgate.proxy.backends.dialect import (
    Answer,
    HeaderFn,
    Rendering,
    Reply,
    StubRequest,
    deltas_of,
)
from flatgate.proxy.backends.openai.stub import SSE, OpenAIWire
from flatgate.proxy.backends.responses.compact import stub_compact
from flatgate.proxy.backends.responses.stub_request import (
    ENCRYPTED_INCLUDE,
    decode_responses_request,
    encrypted,
    to_stub_request,
)
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["ResponsesWire"]

_enc = msgspec.json.encode
_FAILED = {
    "code": "server_error",
    "message": "The server had an error while processing your request. (stub fault: error)",
}


def _summary(req: StubRequest) -> str:
    """The reasoning's text (shown only when the request asks for a summary)."""
    words = len(req.last_user.split())
    return f"The user wrote {words} words; I repeat them back."


class _Answer:
    """The output items of one answer, as the stream and the object show them."""

    def __init__(self, req: StubRequest, ans: Answer) -> None:
        rid = req.request_id or "stub"
        params = req.params
        reasoning = params.get("reasoning")
        include = params.get("include") or ()
        self.req = req
        self.ans = ans
        self.id = f"resp_{rid}"
        self.reasoning_id = ""
        self.summary = ""
        self.encrypted = ""
        self.thought = 0
        if reasoning is not None or ENCRYPTED_INCLUDE in include:
            self.reasoning_id = f"rs_{rid}"
            thought = _summary(req)
            self.thought = len(thought.split())
            if reasoning is not None and reasoning.summary is not None:
                self.summary = thought
            if ENCRYPTED_INCLUDE in include:
                self.encrypted = encrypted(self.reasoning_id)
        self.at = 1 if self.reasoning_id else 0  # the message's (or call's) output_index
        self.message_id = f"msg_{rid}"
        self.call_id = f"fc_{rid}"
        self.incomplete = ans.finish == FinishReason.LENGTH

    def reasoning_item(self, done: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"id": self.reasoning_id, "type": "reasoning", "summary": []}
        if done and self.summary:
            item["summary"] = [{"type": "summary_text", "text": self.summary}]
        if done and self.encrypted:
            item["encrypted_content"] = self.encrypted
        return item

    def main_item(self, done: bool) -> dict[str, Any]:
        call = self.ans.tool_call
        status = "completed" if done else "in_progress"
        if call is not None:
            return {
                "id": self.call_id,
                "type": "function_call",
                "status": status,
                "arguments": call.arguments if done else "",
                "call_id": call.id,
                "name": call.name,
            }
        if done and self.incomplete:
            status = "incomplete"
        content = [_text_part(self.ans.text)] if done else []
        return {
            "id": self.message_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def output(self) -> list[dict[str, Any]]:
        items = [self.reasoning_item(True)] if self.reasoning_id else []
        return [*items, self.main_item(True)]

    def usage(self) -> dict[str, Any]:
        u = self.ans.usage
        output = u.completion_tokens + self.thought
        return {
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": self.thought},
            "total_tokens": u.prompt_tokens + output,
        }

    def response(self, status: str, created: int) -> dict[str, Any]:
        """The ``response`` object, in ``status`` (``in_progress`` has no output)."""
        p = self.req.params
        done = status != "in_progress"
        reasoning = p.get("reasoning")
        return {
            "id": self.id,
            "object": "response",
            "created_at": created,
            "status": status,
            "completed_at": created if status == "completed" else None,
            "error": _FAILED if status == "failed" else None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": p.get("instructions"),
            "max_output_tokens": p.get("max_output_tokens"),
            "model": self.req.model,
            "output": self.output() if done and status != "failed" else [],
            "parallel_tool_calls": p.get("parallel_tool_calls", True) is not False,
            "previous_response_id": None,
            "reasoning": {
                "effort": reasoning.effort if reasoning is not None else None,
                "summary": reasoning.summary if reasoning is not None else None,
            },
            "store": p.get("store", True) is not False,
            "temperature": p.get("temperature", 1.0),
            "text": p.get("text") or {"format": {"type": "text"}},
            "tool_choice": p.get("tool_choice") or "auto",
            "tools": p.get("tools") or [],
            "top_p": p.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": self.usage() if done and status != "failed" else None,
            "user": p.get("user"),
            "metadata": p.get("metadata") or {},
        }

    @property
    def status(self) -> str:
        return "incomplete" if self.incomplete else "completed"


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class _Rendering:
    __slots__ = ("_a", "_created", "_seq", "content_type")

    def __init__(self, req: StubRequest, ans: Answer, created: int) -> None:
        self.content_type = SSE
        self._a = _Answer(req, ans)
        self._created = created
        self._seq = 0

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = _enc({"type": kind, **fields, "sequence_number": self._seq})
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def opening(self) -> bytes:
        a, ev = self._a, self._event
        pending = a.response("in_progress", self._created)
        out = [
            ev("response.created", response=pending),
            ev("response.in_progress", response=pending),
        ]
        if a.reasoning_id:
            out.append(
                ev("response.output_item.added", output_index=0, item=a.reasoning_item(False))
            )
            if a.summary:
                where = {"item_id": a.reasoning_id, "output_index": 0, "summary_index": 0}
                part = {"type": "summary_text", "text": ""}
                out.append(ev("response.reasoning_summary_part.added", **where, part=part))
                out += [
                    ev("response.reasoning_summary_text.delta", **where, delta=d)
                    for d in deltas_of(a.summary)
                ]
                out.append(ev("response.reasoning_summary_text.done", **where, text=a.summary))
                part = {"type": "summary_text", "text": a.summary}
                out.append(ev("response.reasoning_summary_part.done", **where, part=part))
            out.append(ev("response.output_item.done", output_index=0, item=a.reasoning_item(True)))
        out.append(ev("response.output_item.added", output_index=a.at, item=a.main_item(False)))
        if a.ans.tool_call is None:
            out.append(
                ev(
                    "response.content_part.added",
                    item_id=a.message_id,
                    output_index=a.at,
                    content_index=0,
                    part=_text_part(""),
                )
            )
        return b"".join(out)

    def _steps(
        self, kind: str, head: dict[str, Any], deltas: list[str] | tuple[str, ...]
    ) -> Iterator[bytes]:
        # Per delta only its text and the sequence number are encoded.
        lead = b"event: " + kind.encode() + b"\ndata: " + _enc({"type": kind, **head})[:-1]
        for delta in deltas:
            seq = str(self._seq).encode()
            self._seq += 1
            yield lead + b',"delta":' + _enc(delta) + b',"sequence_number":' + seq + b"}\n\n"

    def steps(self) -> Iterator[bytes]:
        a = self._a
        call = a.ans.tool_call
        if call is not None:
            head = {"item_id": a.call_id, "output_index": a.at}
            return self._steps("response.function_call_arguments.delta", head, call.fragments())
        head = {"item_id": a.message_id, "output_index": a.at, "content_index": 0, "logprobs": []}
        return self._steps("response.output_text.delta", head, a.ans.deltas)

    def closing(self) -> bytes:
        a, ev = self._a, self._event
        out = []
        call = a.ans.tool_call
        if call is not None:
            out.append(
                ev(
                    "response.function_call_arguments.done",
                    item_id=a.call_id,
                    output_index=a.at,
                    name=call.name,
                    arguments=call.arguments,
                )
            )
        else:
            where = {"item_id": a.message_id, "output_index": a.at, "content_index": 0}
            text = a.ans.text
            out.append(ev("response.output_text.done", **where, text=text, logprobs=[]))
            out.append(ev("response.content_part.done", **where, part=_text_part(text)))
        out.append(ev("response.output_item.done", output_index=a.at, item=a.main_item(True)))
        status = a.status
        out.append(ev(f"response.{status}", response=a.response(status, self._created)))
        return b"".join(out)

    def error(self) -> bytes:
        return self._event("response.failed", response=self._a.response("failed", self._created))


class ResponsesWire(OpenAIWire):
    """The Responses side of the stub (see the module docstring)."""

    path = "/v1/responses"
    prompt_param = "input"
    posts: Mapping[str, Callable[[bytes, HeaderFn], Reply]] = MappingProxyType(
        {COMPACT_PATH: stub_compact}
    )

    def read(self, body: bytes, request_id: str) -> StubRequest:
        return to_stub_request(decode_responses_request(body), request_id)

    def render(self, req: StubRequest, ans: Answer, created: int) -> Rendering:
        return _Rendering(req, ans, created)

    def whole(self, req: StubRequest, ans: Answer, created: int) -> dict[str, Any]:
        a = _Answer(req, ans)
        return a.response(a.status, created)
