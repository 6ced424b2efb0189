"""Responses API events written by hand, for the tests of
``backends.responses.stream`` (and ``streams``, which runs the
stream-end tests over it): each builder gives one event's JSON, ``events``
frames them as the API does (``event:`` + ``data:``, sequence numbers in
order).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "call_item",
    "completed",
    "created",
    "events",
    "function_call",
    "incomplete",
    "item_added",
    "item_done",
    "message",
    "reasoning_item",
    "text_delta",
]

Event = dict[str, Any]


def events(*payloads: Event | list[Event]) -> bytes:
    """A body of ``payloads`` (lists flattened), each with its sequence number."""
    flat: list[Event] = []
    for p in payloads:
        flat += p if isinstance(p, list) else [p]
    out = []
    for i, p in enumerate(flat):
        data = json.dumps({**p, "sequence_number": i})
        out.append(f"event: {p['type']}\ndata: {data}\n\n")
    return "".join(out).encode()


def response(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": status,
        "model": "gpt-test",
        "output": [],
        "usage": None,
        **fields,
    }


def created(model: str = "gpt-test") -> Event:
    return {"type": "response.created", "response": response("in_progress", model=model)}


def usage(
    input_tokens: int = 5, output_tokens: int = 2, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def completed(**u: int) -> Event:
    return {"type": "response.completed", "response": response("completed", usage=usage(**u))}


def incomplete(reason: str) -> Event:
    details = {"reason": reason}
    return {
        "type": "response.incomplete",
        "response": response("incomplete", incomplete_details=details, usage=usage()),
    }


def item_added(index: int, item: dict[str, Any]) -> Event:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def item_done(index: int, item: dict[str, Any]) -> Event:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def text_delta(index: int, text: str) -> Event:
    return {
        "type": "response.output_text.delta",
        "item_id": f"msg_{index}",
        "output_index": index,
        "content_index": 0,
        "delta": text,
    }


def message(index: int, *texts: str, done: bool = True) -> list[Event]:
    """A message item at ``index``: added, a delta per text, and (``done``)
    its done event."""
    item = {"id": f"msg_{index}", "type": "message", "role": "assistant", "content": []}
    out = [item_added(index, {**item, "status": "in_progress"})]
    out += [text_delta(index, t) for t in texts]
    if done:
        part = {"type": "output_text", "text": "".join(texts), "annotations": []}
        out.append(item_done(index, {**item, "status": "completed", "content": [part]}))
    return out


def call_item(call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def function_call(index: int, call_id: str, name: str, *fragments: str) -> list[Event]:
    """A function call at ``index``: added, its argument fragments, done."""
    whole = "".join(fragments)
    return [
        item_added(index, call_item(call_id, name)),
        *(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": f"fc_{call_id}",
                "output_index": index,
                "delta": f,
            }
            for f in fragments
        ),
        item_done(index, call_item(call_id, name, whole)),
    ]


def reasoning_item(item_id: str, *summary: str, encrypted: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": s} for s in summary],
    }
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item
