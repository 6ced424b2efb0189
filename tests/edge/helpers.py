"""Test helpers for the edge: decoding a ``CompletionRequest`` into plain data."""

from __future__ import annotations

from typing import Any

from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest, CompletionRequestT


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "__dict__"):
        return {k: _plain(v) for k, v in vars(value).items()}
    return value


def decode_request_fb(buf: bytes) -> dict[str, Any]:
    """Every field of a ``CompletionRequest`` buffer, through the generated accessors."""
    assert CompletionRequest.CompletionRequestBufferHasIdentifier(buf, 0)
    root = CompletionRequest.GetRootAs(buf, 0)
    out: dict[str, Any] = _plain(CompletionRequestT.InitFromObj(root))
    return out
