"""Stored input items: a response's input as the store keeps it, and the
``input_items`` list it is served as.

Owns the shape of stored input items, OpenAI's ``ResponseItem``s, each with
an id (the client's, or a fresh one: ``msg_``, ``fc_``, ``fco_``, ``rs_``)
and a ``status`` of ``completed``: a message's string content becomes one
``input_text`` part (``output_text`` for the assistant's), a function call
keeps its ``namespace``, a reasoning item its summary, ``reasoning_text``
content and ``encrypted_content``; an ``input_image`` or ``input_file`` part
is kept as the client sent it, its fields as given: a ``data:`` URL's
base64 is stored as that text (about 4/3 of the bytes), and decoded again
when a later request continues the chain. ``CARRIED`` is the item types the wire
carries: a stored chain's other items (a hosted tool's output item, which
only a Responses-native backend sends) are not carried into the next
request's input (the message after them holds what came of them).

``list_answer`` is ``GET /v1/responses/{id}/input_items`` over the stored
bytes: ``{"object": "list", "data", "first_id", "last_id", "has_more"}``,
with OpenAI's ``limit`` (1 to 100, 20 by default), ``order`` (``desc`` by
default: the last item first) and ``after`` (an item id: the items after it
in that order). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import msgspec

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.responses.echo import new_id
from flatgate.proxy.apis.openai_responses.items import (
    InputText,
    Item,
    OutputText,
    Part,
    ReasoningText,
    Refusal,
)
from flatgate.proxy.wire.digits import read_decimal

__all__ = ["CARRIED", "encode_items", "list_answer"]

CARRIED = frozenset({None, "message", "function_call", "function_call_output", "reasoning"})

_encode = msgspec.json.Encoder().encode
_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def _part(part: Part, *, assistant: bool) -> dict[str, Any]:
    if isinstance(part, OutputText) or (assistant and isinstance(part, InputText)):
        return {"type": "output_text", "text": part.text, "annotations": []}
    if isinstance(part, InputText):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, Refusal):
        return {"type": "refusal", "refusal": part.refusal}
    if isinstance(part, ReasoningText):
        return {"type": "reasoning_text", "text": part.text}
    # An image or a file as the client sent it (a data URL's base64 too).
    out: dict[str, Any] = msgspec.to_builtins(part)
    return out


def _content(content: str | list[Part] | None, *, assistant: bool) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        kind = "output_text" if assistant else "input_text"
        text: dict[str, Any] = {"type": kind, "text": content}
        if assistant:
            text["annotations"] = []
        return [text]
    return [_part(p, assistant=assistant) for p in content]


def _item(item: Item) -> dict[str, Any]:
    kind = item.type or "message"
    out: dict[str, Any] = {"id": item.id or new_id(_PREFIX.get(kind, "rs")), "type": kind}
    if kind == "message":
        assistant = item.role == "assistant"
        out["role"] = item.role
        out["content"] = _content(item.content, assistant=assistant)
    elif kind == "function_call":
        out["call_id"] = item.call_id
        out["name"] = item.name
        if item.namespace:
            out["namespace"] = item.namespace
        out["arguments"] = item.arguments
    elif kind == "function_call_output":
        out["call_id"] = item.call_id
        output = item.output
        out["output"] = output if isinstance(output, str) else _content(output, assistant=False)
    else:
        out["summary"] = [{"type": "summary_text", "text": s.text} for s in item.summary or ()]
        if item.content:
            out["content"] = _content(item.content, assistant=False)
        if item.encrypted_content:
            out["encrypted_content"] = item.encrypted_content
        return out
    out["status"] = "completed"
    return out


def encode_items(items: list[Item]) -> bytes:
    """``items`` (of the carried types) as the store keeps them: a JSON list."""
    return _encode([_item(item) for item in items if item.type in CARRIED])


class _Id(msgspec.Struct, gc=False):
    id: str | None = None


_raw_list = msgspec.json.Decoder(list[msgspec.Raw])
_id_of = msgspec.json.Decoder(_Id)


def _query(query: str) -> tuple[int, bool, str | None]:
    """``limit``, whether ``order`` is ``asc``, ``after``: checked."""
    args = parse_qs(query, keep_blank_values=True)
    limit = read_decimal(args.get("limit", ["20"])[-1])
    if limit is None or not 1 <= limit <= 100:
        raise InvalidRequest("Invalid value for 'limit': an integer from 1 to 100.", param="limit")
    order = args.get("order", ["desc"])[-1]
    if order not in ("asc", "desc"):
        raise InvalidRequest("Invalid value for 'order': 'asc' or 'desc'.", param="order")
    after = args.get("after", [None])[-1]
    return limit, order == "asc", after or None


def list_answer(stored: bytes, query: str = "") -> bytes:
    """The ``input_items`` list of a stored response's ``stored`` input items,
    paged as ``query`` asks (``InvalidRequest`` naming a bad parameter)."""
    limit, ascending, after = _query(query)
    raws = _raw_list.decode(stored)
    if not ascending:
        raws.reverse()
    ids = [_id_of.decode(raw).id for raw in raws]
    start = 0
    if after is not None:
        start = ids.index(after) + 1 if after in ids else len(ids)
    page = raws[start : start + limit]
    page_ids = ids[start : start + limit]
    return (
        b'{"object":"list","data":['
        + b",".join(bytes(raw) for raw in page)
        + b'],"first_id":'
        + _encode(page_ids[0] if page_ids else None)
        + b',"last_id":'
        + _encode(page_ids[-1] if page_ids else None)
        + b',"has_more":'
        + (b"true" if start + limit < len(raws) else b"false")
        + b"}"
    )
