"""The stock-builder reference writer of the edge's request translation.

``write_request_stock`` writes the same ``CompletionRequest`` as
``edge_translator.openai.translate.write_request``, through a pooled stock
``flatbuffers.Builder`` and the generated code: the reference the fast writer
is tested against (decoded field by field) and benchmarked against. Benchmark
and test scaffolding, not product code. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import flatbuffers

from flatgate.edge_translator.openai.mapping import (
    ROLE_OF,
    extras_of,
    max_tokens_of,
    stops_of,
    text_of,
    tool_choice_of,
)
from flatgate.generated.LLMGateway import CompletionRequest as _fb_req
from flatgate.generated.LLMGateway import KeyValue as _fb_kv
from flatgate.generated.LLMGateway import Message as _fb_msg
from flatgate.generated.LLMGateway import Tool as _fb_tool
from flatgate.generated.LLMGateway import ToolCall as _fb_call
from flatgate.proxy.apis.openai_chat.request import ChatCompletionRequest
from flatgate.proxy.wire.builders import BuilderPool, finish_bytes
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER

__all__ = ["write_request_stock"]


def _s(b: flatbuffers.Builder, value: str | bytes | None) -> int:
    return b.CreateString(value) if value else 0


def _offsets_vector(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return int(b.EndVector())


def write_request_stock(
    pool: BuilderPool,
    req: ChatCompletionRequest,
    *,
    provider: int,
    model_name: str,
    tenant: str = "",
    request_id: str = "",
) -> bytes:
    """``req`` as a ``CompletionRequest`` buffer via a pooled stock builder."""
    with pool.lease() as b:
        msg_offs = []
        for msg in req.messages:
            calls_off = 0
            name_b, call_id_b, calls = extras_of(msg)
            if calls:
                offs = []
                for call in calls:
                    cid, name, args = (
                        _s(b, call.id),
                        _s(b, call.function.name),
                        _s(b, call.function.arguments),
                    )
                    _fb_call.Start(b)
                    if cid:
                        _fb_call.AddId(b, cid)
                    if name:
                        _fb_call.AddName(b, name)
                    if args:
                        _fb_call.AddArguments(b, args)
                    offs.append(_fb_call.End(b))
                calls_off = _offsets_vector(b, offs)
            content = _s(b, text_of(msg.content))
            name = _s(b, name_b)
            call_id = _s(b, call_id_b)
            _fb_msg.Start(b)
            _fb_msg.AddRole(b, ROLE_OF[type(msg)])
            if content:
                _fb_msg.AddContent(b, content)
            if name:
                _fb_msg.AddName(b, name)
            if calls_off:
                _fb_msg.AddToolCalls(b, calls_off)
            if call_id:
                _fb_msg.AddToolCallId(b, call_id)
            msg_offs.append(_fb_msg.End(b))
        messages = _offsets_vector(b, msg_offs)

        tools = 0
        if req.tools:
            offs = []
            for tool in req.tools:
                fn = tool.function
                params = bytes(fn.parameters)
                name, desc, par = (
                    _s(b, fn.name),
                    _s(b, fn.description),
                    _s(b, b"" if params == b"null" else params),
                )
                _fb_tool.Start(b)
                if name:
                    _fb_tool.AddName(b, name)
                if desc:
                    _fb_tool.AddDescription(b, desc)
                if par:
                    _fb_tool.AddParameters(b, par)
                if fn.strict:
                    _fb_tool.AddStrict(b, True)
                offs.append(_fb_tool.End(b))
            tools = _offsets_vector(b, offs)

        stop_list = stops_of(req)
        stop = _offsets_vector(b, [_s(b, s) for s in stop_list]) if stop_list else 0

        metadata = 0
        if req.metadata:
            offs = []
            for k, v in sorted((k.encode(), v.encode()) for k, v in req.metadata.items()):
                ko, vo = _s(b, k), _s(b, v)
                _fb_kv.Start(b)
                if ko:
                    _fb_kv.AddKey(b, ko)
                if vo:
                    _fb_kv.AddValue(b, vo)
                offs.append(_fb_kv.End(b))
            metadata = _offsets_vector(b, offs)

        choice, choice_name = tool_choice_of(req)
        rf = bytes(req.response_format)
        rid, model, cname, user, ten, rfo = (
            _s(b, request_id),
            _s(b, model_name),
            _s(b, choice_name),
            _s(b, req.user),
            _s(b, tenant),
            _s(b, b"" if rf == b"null" else rf),
        )
        _fb_req.Start(b)
        if rid:
            _fb_req.AddRequestId(b, rid)
        _fb_req.AddProvider(b, provider)
        if model:
            _fb_req.AddModelName(b, model)
        _fb_req.AddMaxTokens(b, max_tokens_of(req))
        if req.temperature is not None:
            _fb_req.AddTemperature(b, req.temperature)
        if tools:
            _fb_req.AddTools(b, tools)
        _fb_req.AddMessages(b, messages)
        _fb_req.AddToolChoice(b, choice)
        if cname:
            _fb_req.AddToolChoiceName(b, cname)
        if req.top_p is not None:
            _fb_req.AddTopP(b, req.top_p)
        if req.top_k:
            _fb_req.AddTopK(b, req.top_k)
        if stop:
            _fb_req.AddStop(b, stop)
        if req.seed is not None:
            _fb_req.AddSeed(b, req.seed)
        if req.presence_penalty is not None:
            _fb_req.AddPresencePenalty(b, req.presence_penalty)
        if req.frequency_penalty is not None:
            _fb_req.AddFrequencyPenalty(b, req.frequency_penalty)
        _fb_req.AddN(b, req.n or 0)
        stream = bool(req.stream)
        _fb_req.AddStream(b, stream)
        if user:
            _fb_req.AddUser(b, user)
        if ten:
            _fb_req.AddTenant(b, ten)
        if metadata:
            _fb_req.AddMetadata(b, metadata)
        _fb_req.AddIncludeUsage(
            b, bool(stream and req.stream_options and req.stream_options.include_usage)
        )
        if req.parallel_tool_calls is not None:
            _fb_req.AddParallelToolCalls(b, req.parallel_tool_calls)
        if rfo:
            _fb_req.AddResponseFormat(b, rfo)
        b.Finish(_fb_req.End(b), REQUEST_IDENTIFIER)
        return finish_bytes(b)
