"""The vLLM captures (``fixtures/vllm/``): their format, and the client's view
of an answer that both the live check (``tests/vllm``, ``make test-vllm``)
and the replay (``test_vllm_fixtures``) compare.

One capture per case: ``<case>.json`` holds what the client sent (``api``:
``chat`` for ``/v1/chat/completions``, ``messages`` for ``/v1/messages``;
``request``), what vLLM answered the same request sent to it directly
(``direct``: status and raw body, Chat cases only; a Messages case has the
Chat answer it is compared with in ``chat_text`` / ``chat_tool``), what
flatgate's ``openai`` adapter sent vLLM (``adapter_request``) and the status
and content type vLLM answered it with; the body of that answer, as vLLM
wrote it, is ``<case>.sse`` (a stream: the client streamed),
``<case>.answer.json`` (a whole ``chat.completion``: the client did not, and
the adapter asked for it whole) or ``<case>.error.json`` (an error)
(``backend_file``).

``chat_view`` and ``messages_view`` reduce an answer (whole JSON or SSE) to
what a client reads of it: per choice the text, finish reason, logprobs
entries, tool calls (name, parsed arguments) and their arguments' text as
sent, and the usage counts; an error to its status and error object. Pure:
no I/O but reading captures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "CAPTURES",
    "Capture",
    "captures",
    "chat_view",
    "messages_view",
    "read_capture",
    "sse_payloads",
    "write_capture",
]

CAPTURES = Path(__file__).parent / "fixtures" / "vllm"

Capture = dict[str, Any]
# The suffixes of the backend bodies kept beside the records.
_BODIES = (".answer.json", ".error.json")


def captures() -> list[str]:
    """The recorded cases' names."""
    return sorted(p.stem for p in CAPTURES.glob("*.json") if not p.name.endswith(_BODIES))


def read_capture(case: str) -> tuple[Capture, bytes]:
    """A case's record and the raw body vLLM answered flatgate's adapter with."""
    record: Capture = json.loads((CAPTURES / f"{case}.json").read_text())
    return record, (CAPTURES / record["backend_file"]).read_bytes()


def write_capture(directory: Path, record: Capture, backend_body: bytes) -> None:
    """``record`` (its ``case`` names it) and vLLM's raw body into ``directory``."""
    case = record["case"]
    backend = record["backend"]
    if backend["content_type"].startswith("text/event-stream"):
        name = f"{case}.sse"
    elif backend["status"] == 200:
        name = f"{case}.answer.json"
    else:
        name = f"{case}.error.json"
    record = {**record, "backend_file": name}
    (directory / f"{case}.json").write_text(json.dumps(record, indent=1) + "\n")
    (directory / name).write_bytes(backend_body)


def sse_payloads(body: bytes) -> list[Any]:
    """Each ``data:`` event's JSON, in order (``[DONE]`` left out)."""
    out = []
    for line in body.decode().splitlines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data and data != "[DONE]":
                out.append(json.loads(data))
    return out


def _usage(u: Any) -> dict[str, Any] | None:
    if not u:
        return None
    keys = ("prompt_tokens", "completion_tokens", "total_tokens", "input_tokens", "output_tokens")
    return {k: u[k] for k in keys if k in u}


def _error(status: int, body: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = body.decode(errors="replace")
    return {"status": status, "error": parsed.get("error") if isinstance(parsed, dict) else parsed}


def chat_view(status: int, body: bytes, stream: bool) -> dict[str, Any]:
    """A Chat Completions answer as the client reads it (see the module docstring)."""
    if status != 200:
        return _error(status, body)
    choices: dict[int, dict[str, Any]] = {}

    def choice(i: int) -> dict[str, Any]:
        return choices.setdefault(
            i,
            {
                "text": "",
                "finish_reason": None,
                "logprobs": None,
                "tool_calls": {},
                "arguments": [],
            },
        )

    usage = None
    if stream:
        for chunk in sse_payloads(body):
            usage = _usage(chunk.get("usage")) or usage
            for c in chunk.get("choices") or []:
                out = choice(c["index"])
                delta = c.get("delta") or {}
                out["text"] += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    got = out["tool_calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                    fn = call.get("function") or {}
                    got["name"] += fn.get("name") or ""
                    got["arguments"] += fn.get("arguments") or ""
                if (c.get("logprobs") or {}).get("content") is not None:
                    out["logprobs"] = (out["logprobs"] or []) + c["logprobs"]["content"]
                out["finish_reason"] = c.get("finish_reason") or out["finish_reason"]
    else:
        answer = json.loads(body)
        usage = _usage(answer.get("usage"))
        for c in answer["choices"]:
            out = choice(c["index"])
            message = c["message"]
            out["text"] = message.get("content") or ""
            for i, call in enumerate(message.get("tool_calls") or []):
                out["tool_calls"][i] = dict(call["function"])
            if (c.get("logprobs") or {}).get("content") is not None:
                out["logprobs"] = c["logprobs"]["content"]
            out["finish_reason"] = c["finish_reason"]
    for out in choices.values():
        out["arguments"] = [call["arguments"] for _, call in sorted(out["tool_calls"].items())]
        out["tool_calls"] = [
            (call["name"], json.loads(call["arguments"] or "{}"))
            for _, call in sorted(out["tool_calls"].items())
        ]
    return {"status": status, "choices": choices, "usage": usage}


def messages_view(status: int, body: bytes, stream: bool) -> dict[str, Any]:
    """An Anthropic Messages answer as the client reads it: text, stop reason
    and sequence, tool calls (name, input) and usage."""
    if status != 200:
        return _error(status, body)
    text, calls, stop = "", [], {}
    usage: dict[str, Any] = {}
    if stream:
        partial: dict[int, dict[str, Any]] = {}
        for event in sse_payloads(body):
            kind = event["type"]
            if kind == "message_start":
                usage.update(_usage(event["message"].get("usage")) or {})
            elif kind == "content_block_start" and event["content_block"]["type"] == "tool_use":
                block = event["content_block"]
                partial[event["index"]] = {"name": block["name"], "json": ""}
            elif kind == "content_block_delta":
                delta = event["delta"]
                if delta["type"] == "text_delta":
                    text += delta["text"]
                elif delta["type"] == "input_json_delta":
                    partial[event["index"]]["json"] += delta["partial_json"]
            elif kind == "message_delta":
                stop = event["delta"]
                usage.update(_usage(event.get("usage")) or {})
        calls = [(p["name"], json.loads(p["json"] or "{}")) for _, p in sorted(partial.items())]
    else:
        answer = json.loads(body)
        for block in answer["content"]:
            if block["type"] == "text":
                text += block["text"]
            elif block["type"] == "tool_use":
                calls.append((block["name"], block["input"]))
        stop = answer
        usage = _usage(answer.get("usage")) or {}
    return {
        "status": status,
        "text": text,
        "tool_calls": calls,
        "stop_reason": stop.get("stop_reason"),
        "stop_sequence": stop.get("stop_sequence"),
        "usage": usage,
    }
