"""Buffers that share offsets, built by hand with ``flatbuffers.Builder``.

``amplified`` is the attack of issue 18: many ``messages`` entries pointing
at one ``Message`` whose content is large, a small body that decodes to a
large one. ``shared_strings`` is an honest writer's sharing: one small string
(flatc's ``CreateSharedString``) referenced by many messages.
"""

from __future__ import annotations

import flatbuffers

from flatgate.generated.LLMGateway import CompletionRequest as fb_request
from flatgate.generated.LLMGateway import Message as fb_message
from flatgate.generated.LLMGateway import ToolCall as fb_call
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER, Provider, Role

__all__ = ["amplified", "expanded_bytes", "shared_calls", "shared_stop", "shared_strings"]


def _finish(
    b: flatbuffers.Builder,
    messages: int,
    model: str,
    request_id: str,
    *,
    stop: int = 0,
    tenant: str = "",
) -> bytes:
    model_at = b.CreateString(model)
    rid_at = b.CreateString(request_id) if request_id else 0
    tenant_at = b.CreateString(tenant) if tenant else 0
    fb_request.Start(b)
    fb_request.AddModelName(b, model_at)
    fb_request.AddProvider(b, int(Provider.SelfHosted))
    if rid_at:
        fb_request.AddRequestId(b, rid_at)
    if tenant_at:
        fb_request.AddTenant(b, tenant_at)
    if messages:
        fb_request.AddMessages(b, messages)
    if stop:
        fb_request.AddStop(b, stop)
    b.Finish(fb_request.End(b), REQUEST_IDENTIFIER)
    return bytes(memoryview(b.Bytes)[b.Head() :])


def _uoffsets(b: flatbuffers.Builder, targets: list[int]) -> int:
    b.StartVector(4, len(targets), 4)
    for t in reversed(targets):
        b.PrependUOffsetTRelative(t)
    return int(b.EndVector())


def amplified(
    refs: int = 2000,
    content: int = 256 << 10,
    model: str = "echo-1",
    request_id: str = "",
    tenant: str = "",
) -> bytes:
    """``refs`` entries of ``messages``, every one the same user ``Message``
    whose content is ``content`` bytes: about ``content + 4 * refs`` bytes on
    the wire, ``refs * content`` decoded."""
    b = flatbuffers.Builder(content + 4 * refs + 256)
    text = b.CreateString(b"x" * content)
    fb_message.Start(b)
    fb_message.AddRole(b, int(Role.User))
    fb_message.AddContent(b, text)
    message = fb_message.End(b)
    return _finish(b, _uoffsets(b, [message] * refs), model, request_id, tenant=tenant)


def shared_strings(
    messages: int,
    text: bytes = b"ok",
    model: str = "echo-1",
    request_id: str = "",
    tenant: str = "",
) -> bytes:
    """``messages`` distinct user messages whose content is one shared string."""
    b = flatbuffers.Builder(64 * messages + 256)
    shared = b.CreateSharedString(text)
    tables = []
    for _ in range(messages):
        fb_message.Start(b)
        fb_message.AddRole(b, int(Role.User))
        fb_message.AddContent(b, shared)
        tables.append(fb_message.End(b))
    return _finish(b, _uoffsets(b, tables), model, request_id, tenant=tenant)


def shared_stop(refs: int, text: bytes, model: str = "echo-1") -> bytes:
    """A ``stop`` vector of ``refs`` entries, all the same string, and one message."""
    b = flatbuffers.Builder(len(text) + 4 * refs + 256)
    shared = b.CreateString(text)
    stop = _uoffsets(b, [shared] * refs)
    hello = b.CreateString("hello")
    fb_message.Start(b)
    fb_message.AddRole(b, int(Role.User))
    fb_message.AddContent(b, hello)
    message = fb_message.End(b)
    return _finish(b, _uoffsets(b, [message]), model, "", stop=stop)


def shared_calls(calls: int, refs: int, model: str = "echo-1") -> bytes:
    """``refs`` entries of ``messages``, every one the same assistant message,
    whose ``tool_calls`` are ``calls`` entries of one ``ToolCall``: a reader
    that follows every reference visits ``calls * refs`` tool calls."""
    b = flatbuffers.Builder(4 * (calls + refs) + 256)
    name = b.CreateString("f")
    fb_call.Start(b)
    fb_call.AddName(b, name)
    call = fb_call.End(b)
    vector = _uoffsets(b, [call] * calls)
    fb_message.Start(b)
    fb_message.AddRole(b, int(Role.Assistant))
    fb_message.AddToolCalls(b, vector)
    message = fb_message.End(b)
    return _finish(b, _uoffsets(b, [message] * refs), model, "")


def expanded_bytes(messages: int, content: int, model: str = "echo-1", request_id: str = "") -> int:
    """What ``verify_request`` counts for a request of ``messages`` messages of
    ``content`` bytes each (shared or not) and nothing else: the strings with
    their multiplicity and 4 bytes per ``messages`` entry."""
    return messages * (content + 4) + len(model.encode()) + len(request_id.encode())
