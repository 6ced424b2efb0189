"""Property tests: any request the generated builders write routes and verifies.

Requests come from hypothesis through the object API (``CompletionRequestT``
``.Pack``), every field independently present or absent, with and without
``ForceDefaults``; then arbitrary bytes and arbitrary edits of valid buffers.
"""

from __future__ import annotations

import contextlib
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest, CompletionRequestT
from flatgate.generated.LLMGateway.KeyValue import KeyValueT
from flatgate.generated.LLMGateway.Message import MessageT
from flatgate.generated.LLMGateway.Tool import ToolT
from flatgate.generated.LLMGateway.ToolCall import ToolCallT
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request
from tests.proxy.wire_helpers import build, full_decode

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

text = st.text(max_size=40) | st.binary(max_size=40)
maybe_text = st.none() | text
int8 = st.integers(-128, 127)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
float32 = st.floats(width=32, allow_nan=False)
maybe = st.none().__or__

tool_calls = st.builds(ToolCallT, id=maybe_text, name=maybe_text, arguments=maybe_text)
messages = st.builds(
    MessageT,
    role=int8,
    content=maybe_text,
    name=maybe_text,
    toolCalls=maybe(st.lists(tool_calls, max_size=3)),
    toolCallId=maybe_text,
)
tools = st.builds(
    ToolT, name=maybe_text, description=maybe_text, parameters=maybe_text, strict=st.booleans()
)
requests = st.builds(
    CompletionRequestT,
    requestId=maybe_text,
    provider=int8,
    modelName=maybe_text,
    maxTokens=int32,
    temperature=maybe(float32),
    tools=maybe(st.lists(tools, max_size=4)),
    messages=maybe(st.lists(messages, max_size=6)),
    toolChoice=int8,
    toolChoiceName=maybe_text,
    topP=maybe(float32),
    stop=maybe(st.lists(text, max_size=4)),
    seed=maybe(int64),
    presencePenalty=maybe(float32),
    frequencyPenalty=maybe(float32),
    n=int32,
    stream=st.booleans(),
    user=maybe_text,
    tenant=maybe_text,
    metadata=maybe(st.lists(st.builds(KeyValueT, key=maybe_text, value=maybe_text), max_size=3)),
    includeUsage=st.booleans(),
    parallelToolCalls=maybe(st.booleans()),
    responseFormat=maybe_text,
)


def encoded(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


@SETTINGS
@given(request=requests, force_defaults=st.booleans())
def test_built_requests_route_like_the_accessors_and_verify(
    request: CompletionRequestT, force_defaults: bool
) -> None:
    buf = build(request, force_defaults=force_defaults)
    verify_request(buf)
    r = CompletionRequest.GetRootAs(buf, 0)
    if request.modelName is None:
        try:
            read_route(buf)
        except MalformedBuffer as exc:
            assert "model_name absent" in str(exc)
        else:
            raise AssertionError("a request without model_name routed")
    else:
        provider, model = read_route(buf)
        assert provider == r.Provider() == request.provider
        assert bytes(model) == r.ModelName() == encoded(request.modelName)
        assert model.obj is buf
    decoded = full_decode(buf)
    # The object API gets back what was written: packing it again is identical.
    assert build(decoded, force_defaults=force_defaults) == buf


@SETTINGS
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_only_raise_malformed(data: bytes) -> None:
    for candidate in (data, data[:4] + b"FGRQ" + data[8:]):
        with contextlib.suppress(MalformedBuffer):
            read_route(candidate)
        try:
            verify_request(candidate)
        except MalformedBuffer:
            continue
        full_decode(candidate)


@SETTINGS
@given(
    request=requests,
    edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 0xFFFFFFFF)), max_size=6),
)
def test_edited_buffers_only_raise_malformed_and_verified_ones_decode(
    request: CompletionRequestT, edits: list[tuple[int, int]]
) -> None:
    out = bytearray(build(request))
    for where, value in edits:
        at = where % len(out)
        if at + 4 <= len(out):
            struct.pack_into("<I", out, at, value)
        else:
            out[at] = value & 0xFF
    buf = bytes(out)
    try:
        route = read_route(buf)
    except MalformedBuffer:
        route = None
    try:
        verify_request(buf)
    except MalformedBuffer:
        return
    decoded = full_decode(buf)
    if decoded.modelName is not None:
        assert route is not None
        assert (route[0], bytes(route[1])) == (decoded.provider, decoded.modelName)
