"""The ``openai-responses`` backend's compaction: ``POST {url}/responses/compact``.

A compaction reaches the adapter as a ``CompletionRequest`` the edge marked
(``apis.openai_responses.compact``: its extras' ``"$compact": true``, its
last message the compaction prompt). A backend whose ``compact`` key is on
(a server that has the endpoint: OpenAI's) is sent it there
(``adapter.ResponsesAdapter.prepare``, ``compact_body``): ``model``, the
conversation without the prompt as ``instructions`` and ``input`` (written
as the adapter writes a request's), and the client's extras but flatgate's
own (``prompt_cache_key``, and fields flatgate does not know, as the client
sent them); the answer is asked for whole. Any other backend answers the
prompt as a request of its own.

The answer, a ``response.compaction`` object (``compaction_frames``), becomes
one chunk per output item, its extras ``{"output_item": <the item as
sent>}`` (dialect OpenAI Responses: the edge's compaction keeps the items as
they are), then a final chunk with the usage the server reports.

Also the stub's side (``stub_compact``): its ``/v1/responses/compact``,
checked as its ``/v1/responses`` is (``stub_request``), plus the endpoint's
fields only; the answer keeps the input's user messages and adds one
``compaction`` item whose content is the stub's fake
(``stub_request.compaction_content``) of a deterministic summary, with
usage in words as its echo counts them. No I/O.
"""

from __future__ import annotations

import time

import msgspec

from flatgate.proxy.apis.openai_responses.answer import Answer
from flatgate.proxy.apis.openai_responses.compact import (
    COMPACT_EXTRAS,
    COMPACT_FIELDS,
    COMPACT_MARK,
    COMPACTION,
)
from flatgate.proxy.apis.openai_responses.items import Item
from flatgate.proxy.apis.openai_responses.request import WrittenRequest
from flatgate.proxy.backends.dialect import HeaderFn, Reply
from flatgate.proxy.backends.extras import FLATGATE_OWN, read_extras, splice
from flatgate.proxy.backends.openai.stub import error_reply
from flatgate.proxy.backends.openai.stub_request import Invalid
from flatgate.proxy.backends.responses.stream import hosted_extras, usage_of
from flatgate.proxy.backends.responses.stub_request import (
    compaction_content,
    decode_responses_request,
    to_stub_request,
)
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import JSON, ApiDialect, FinishReason, Role

__all__ = ["COMPACT_SUFFIX", "compact_body", "compaction_frames", "marked", "stub_compact"]

# Appended to the backend's url (its API base).
COMPACT_SUFFIX = "/responses/compact"
_DIALECT = int(ApiDialect.OPENAI_RESPONSES)
_encode = msgspec.json.encode


def marked(req: Request) -> bool:
    """Whether the edge marked ``req`` as a compaction."""
    return (
        req.extras_dialect == _DIALECT
        and COMPACT_MARK in req.extras
        and COMPACT_MARK in read_extras(req.extras)
    )


def compact_body(
    req: Request,
    model: str,
    instructions: str | None,
    items: list[Item],
) -> bytes:
    """The ``/responses/compact`` body: ``model``, ``instructions`` and
    ``input`` (the adapter's, of every message but the prompt), then the
    client's extras but flatgate's own."""
    body = WrittenRequest(model=model, input=items, instructions=instructions)
    fields = read_extras(req.extras)
    return splice(
        _encode(body), [(k, bytes(v)) for k, v in fields.items() if k not in FLATGATE_OWN]
    )


def compaction_frames(request_id: str, model: str, answer: Answer) -> bytes:
    """A ``response.compaction`` object's chunk frames (see the module docstring)."""
    w = ChunkWriter(request_id, answer.model or model)
    out = [
        w.chunk(extras=hosted_extras(bytes(raw)), extras_dialect=_DIALECT)
        for raw in answer.output or ()
    ]
    out.append(w.chunk(finish_reason=FinishReason.STOP, usage=usage_of(answer.usage)))
    return b"".join(out)


# -- the stub's side ------------------------------------------------------------


def _user(item_id: str, parts: object) -> dict[str, object]:
    return {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "user",
        "content": parts,
    }


def stub_compact(body: bytes, header: HeaderFn) -> Reply:
    """The stub's answer to ``POST /v1/responses/compact``."""
    request_id = header("x-request-id") or "compact"
    try:
        r = decode_responses_request(body)
        fields = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
        for key in fields:
            if key not in COMPACT_FIELDS and key not in COMPACT_EXTRAS:
                raise Invalid(f"Unknown parameter: '{key}'.", key, "unknown_parameter")
        req = to_stub_request(r, request_id)
    except Invalid as exc:
        return error_reply(exc.status, exc.message, param=exc.param, code=exc.vendor_code)
    except msgspec.DecodeError as exc:
        return error_reply(400, f"We could not parse the JSON body of your request. ({exc})")
    kept = []
    for n, item in enumerate(r.input if isinstance(r.input, list) else ()):
        kind = item.type or ("message" if item.role else None)
        if kind == "message" and item.role == "user":
            content = item.content
            parts = (
                [{"type": "input_text", "text": content}]
                if isinstance(content, str)
                else msgspec.to_builtins(content)
            )
            kept.append(_user(f"msg_{n}", parts))
    if isinstance(r.input, str):
        kept.append(_user("msg_0", [{"type": "input_text", "text": r.input}]))
    said = [text for role, text in req.messages if role != Role.System]
    summary = f"The stub compacted {len(said)} items: " + " | ".join(said)
    words = req.prompt_tokens
    out_words = len(summary.split())
    compaction = {
        "id": f"cmp_{request_id}",
        "type": "compaction",
        "encrypted_content": compaction_content(summary),
    }
    answer = {
        "id": f"resp_{request_id}",
        "object": COMPACTION,
        "created_at": int(time.time()),
        "output": [*kept, compaction],
        "usage": {
            "input_tokens": words,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out_words,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": words + out_words,
        },
    }
    return Reply(200, [("content-type", JSON), ("x-request-id", request_id)], _encode(answer))
