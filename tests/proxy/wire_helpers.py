"""Shared by the wire tests: building requests and decoding them completely.

``full_decode`` is the verifier's promise made executable: every generated
accessor of every table reachable from the root, then the object API.
"""

from __future__ import annotations

from typing import Any

import flatbuffers

from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest, CompletionRequestT
from flatgate.generated.LLMGateway.KeyValue import KeyValueT
from flatgate.generated.LLMGateway.Message import MessageT
from flatgate.generated.LLMGateway.Tool import ToolT
from flatgate.generated.LLMGateway.ToolCall import ToolCallT
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER

__all__ = ["build", "field_position", "full_decode", "sample_request", "string_position"]


def build(
    t: CompletionRequestT,
    *,
    force_defaults: bool = False,
    identifier: bytes | None = REQUEST_IDENTIFIER,
) -> bytes:
    builder = flatbuffers.Builder(256)
    builder.ForceDefaults(force_defaults)
    if identifier is None:
        builder.Finish(t.Pack(builder))
    else:
        builder.Finish(t.Pack(builder), identifier)
    return bytes(memoryview(builder.Bytes)[builder.Head() :])


def sample_request(model: str = "gpt-4o-mini", provider: int = 1) -> CompletionRequestT:
    """Every field of every table set."""
    return CompletionRequestT(
        requestId="req-1",
        provider=provider,
        modelName=model,
        maxTokens=256,
        temperature=0.5,
        tools=[
            ToolT(name="get_weather", description="weather", parameters='{"type":"object"}'),
            ToolT(name="search", description="search", parameters="{}", strict=True),
        ],
        messages=[
            MessageT(role=1, content="You are terse."),
            MessageT(role=0, content="Weather in Paris?", name="ann"),
            MessageT(
                role=3,
                toolCalls=[
                    ToolCallT(id="call_1", name="get_weather", arguments='{"city":"Paris"}')
                ],
            ),
            MessageT(role=4, content="18C, rain", toolCallId="call_1"),
        ],
        toolChoice=4,
        toolChoiceName="get_weather",
        topP=0.9,
        stop=["\n\n", "END"],
        seed=1234567890123,
        presencePenalty=0.1,
        frequencyPenalty=-0.2,
        n=2,
        stream=True,
        user="u-1",
        tenant="acme",
        metadata=[KeyValueT(key="a", value="1"), KeyValueT(key="b", value="2")],
        includeUsage=True,
        parallelToolCalls=False,
        responseFormat='{"type":"json_object"}',
    )


def _walk(obj: Any, depth: int = 0) -> list[Any]:
    """Call every zero-argument accessor; recurse through vector accessors."""
    out: list[Any] = []
    cls = type(obj)
    for name in sorted(vars(cls)):
        if name.startswith(("_", "GetRootAs", "Init")) or name[0].islower():
            continue
        if name.endswith(("Length", "IsNone", "AsNumpy")) or "BufferHasIdentifier" in name:
            continue
        attr = getattr(obj, name)
        length = getattr(obj, f"{name}Length", None)
        if length is not None:
            getattr(obj, f"{name}IsNone")()
            for j in range(length()):
                item = attr(j)
                out.append(item if isinstance(item, bytes) else _walk(item, depth + 1))
        else:
            out.append(attr())
    return out


def full_decode(buf: bytes | memoryview) -> CompletionRequestT:
    """Decode everything with the accessors and the object API (both ways in)."""
    _walk(CompletionRequest.GetRootAs(buf, 0))
    CompletionRequestT.InitFromBuf(buf, CompletionRequest.GetRootAs(buf, 0)._tab.Pos)
    return CompletionRequestT.InitFromPackedBuf(buf, 0)


def field_position(table: Any, voffset: int) -> int:
    """Absolute position of a present field of a generated table object."""
    off = table._tab.Offset(voffset)
    assert off, f"field at voffset {voffset} absent"
    return int(table._tab.Pos + off)


def string_position(buf: bytes, table: Any, voffset: int) -> int:
    """Absolute position of the length word of the string field at ``voffset``."""
    at = field_position(table, voffset)
    return at + int.from_bytes(buf[at : at + 4], "little")
