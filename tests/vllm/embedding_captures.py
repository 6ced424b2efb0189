"""The vLLM embeddings captures (``tests/backends/fixtures/vllm/embeddings/``):
where they are, how they are read, and the client's view of an embeddings
answer that the live check (``test_vllm_embeddings``, ``make test-vllm``)
and the replay (``tests/backends/test_vllm_embeddings_fixtures.py``,
``make test``) both compare.

The format is the chat captures' (``tests.backends.vllm_fixtures``, written
by its ``write_capture``), with ``api: "embeddings"``: ``<case>.json`` holds
what the client sent (``request``: the body the ``openai`` SDK wrote),
what vLLM answered the same request sent to it directly (``direct``) and
what the client read through flatgate (``flatgate``), what flatgate's
``openai`` adapter sent vLLM (``adapter_request``) and vLLM's status and
content type; vLLM's body is
``<case>.answer.json`` (200) or ``<case>.error.json``. They live in a
directory of their own so that the chat replay does not read them.

``embeddings_view`` reduces an answer to what a client reads of it: each
vector as its little-endian float32 bytes (decoded from base64, or packed
from the numbers), the numbers themselves when they were numbers, the model
and the usage; an error to its status and error object. Pure: no I/O but
reading captures. Imports nothing of vLLM's (the replay runs without it).
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

__all__ = ["EMBEDDINGS", "embeddings_view", "read_capture", "recorded"]

EMBEDDINGS = Path(__file__).parent.parent / "backends" / "fixtures" / "vllm" / "embeddings"


def recorded() -> list[str]:
    """The recorded cases' names (a record is ``<case>.json``; a body has a
    second suffix)."""
    return sorted(p.name[:-5] for p in EMBEDDINGS.glob("*.json") if p.name.count(".") == 1)


def read_capture(case: str) -> tuple[dict[str, Any], bytes]:
    """A case's record and the raw body vLLM answered flatgate's adapter with."""
    record: dict[str, Any] = json.loads((EMBEDDINGS / f"{case}.json").read_text())
    return record, (EMBEDDINGS / record["backend_file"]).read_bytes()


def _vector(embedding: Any) -> bytes:
    if isinstance(embedding, str):
        return base64.b64decode(embedding, validate=True)
    return struct.pack(f"<{len(embedding)}f", *embedding)


def embeddings_view(status: int, body: bytes | str) -> dict[str, Any]:
    """An embeddings answer as the client reads it (see the module docstring)."""
    parsed = json.loads(body)
    if status != 200:
        error = parsed.get("error") if isinstance(parsed, dict) else parsed
        return {"status": status, "error": error}
    data = sorted(parsed["data"], key=lambda item: item["index"])
    usage = parsed.get("usage") or {}
    return {
        "status": status,
        "object": parsed["object"],
        "model": parsed["model"],
        "indices": [item["index"] for item in data],
        "vectors": [_vector(item["embedding"]) for item in data],
        "numbers": [item["embedding"] for item in data if not isinstance(item["embedding"], str)],
        "usage": {k: usage.get(k) for k in ("prompt_tokens", "total_tokens")},
    }
