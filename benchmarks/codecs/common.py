"""What every codec module shares: the chunk delta, the client's request forms,
the decoded view's shape, and the edge's model table.

The codecs all start from one ``benchmarks.payloads.make_request`` dict. This
module turns it into the forms a caller holds before an operation: the JSON
body a client sends (``json_body``), the edge's validated
``ChatCompletionRequest`` (``edge_request``, what the FlatBuffers and protobuf
writers map from). It also fixes the one streamed delta every ``chunk`` op
builds (``DELTA``) and the tuple shape every ``decode`` returns (``Decoded``).

Nothing here is timed: inputs are built once, before measuring. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import msgspec

from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.openai_chat.request import ChatCompletionRequest, decode_request

__all__ = [
    "DELTA",
    "MODELS",
    "REQUEST_ID",
    "Decoded",
    "Delta",
    "MessageView",
    "ToolView",
    "edge_request",
    "json_body",
]

# A fixed id: the edge's own ``new_request_id`` draws from os.urandom.
REQUEST_ID = "chatcmpl-5f0c8a1e9d3b4c7a2e6f1d08"

# The edge's model table for ``translate``: the generator's model, routed to OpenAI.
MODELS: dict[str, ModelConfig] = {
    "gpt-4o-mini": ModelConfig(name="gpt-4o-mini", provider="OpenAI"),
}


@dataclass(frozen=True, slots=True)
class Delta:
    """One streamed token delta: the fields every ``chunk`` op writes."""

    request_id: str
    content: str
    model: str
    index: int = 0


DELTA = Delta(request_id=REQUEST_ID, content=" forecast", model="gpt-4o-mini")

# What ``decode`` hands a backend, the same shape for every codec. Values keep
# each codec's own types (a role is "user" in JSON and 0 on the wire; text is
# ``str`` from JSON and protobuf, ``bytes`` from the FlatBuffers accessors).
# (role, content, ((call id, name, arguments), ...), tool_call_id)
MessageView: TypeAlias = tuple[Any, Any, tuple[tuple[Any, Any, Any], ...], Any]
# (name, description, parameters, strict)
ToolView: TypeAlias = tuple[Any, Any, Any, Any]
# (model, messages, tools, (temperature, top_p, max_tokens, stop, seed, n,
#  presence_penalty, frequency_penalty, stream, user, tool_choice))
Decoded: TypeAlias = tuple[Any, list[MessageView], list[ToolView], tuple[Any, ...]]


def json_body(request: dict[str, Any]) -> bytes:
    """The request as a client sends it: compact UTF-8 JSON."""
    return msgspec.json.encode(request)


def edge_request(request: dict[str, Any]) -> ChatCompletionRequest:
    """The request as the edge holds it after validating the client's JSON."""
    return decode_request(json_body(request))
