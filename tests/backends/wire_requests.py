"""``CompletionRequest`` buffers with what no client API's edge writes yet
(reasoning parts, extras of any dialect), written with the wire's own
``RequestWriter`` and read back as the proxy reads them (verified, then
``read_request``), for the adapters' request tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.request.writer import RequestWriter, WireMessage
from flatgate.proxy.wire.schema import ApiDialect, Provider, Role

__all__ = ["ANTHROPIC", "CHAT", "RESPONSES", "assistant", "msg", "tool_result", "wire"]

CHAT = int(ApiDialect.OPENAI_CHAT)
ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
RESPONSES = int(ApiDialect.OPENAI_RESPONSES)


def msg(role: Role, text: str, name: str = "") -> WireMessage:
    return (int(role), text.encode(), name.encode(), b"", (), False)


def assistant(
    text: str = "",
    calls: Sequence[tuple[str, str, str]] = (),
    reasoning: Sequence[ReasoningPart] = (),
) -> WireMessage:
    wired = [(i.encode(), n.encode(), a.encode()) for i, n, a in calls]
    return (int(Role.Assistant), text.encode(), b"", b"", wired, False, reasoning)


def tool_result(call_id: str, text: str, failed: bool = False) -> WireMessage:
    return (int(Role.Tool), text.encode(), b"", call_id.encode(), (), failed)


def wire(
    messages: Sequence[WireMessage],
    *,
    extras: Mapping[str, Any] | str | None = None,
    dialect: int = 0,
    tools: Sequence[tuple[str, str, str, bool]] = (),
    tool_choice_name: str = "",
    response_format: str = "",
    stops: Sequence[str] = (),
    metadata: Mapping[str, str] | None = None,
    user: str = "",
    **finish: Any,
) -> Request:
    """The request these make, as the proxy decodes it."""
    w = RequestWriter()
    text = extras if isinstance(extras, str) else json.dumps(extras) if extras else ""
    w.strings(
        request_id="req-1",
        model_name="routed-model",
        tenant="",
        user=user,
        tool_choice_name=tool_choice_name,
        response_format=response_format.encode(),
        extras=text.encode(),
    )
    w.messages(messages)
    if tools:
        w.tools([(n.encode(), d.encode(), p.encode(), s) for n, d, p, s in tools])
    if stops:
        w.stops([s.encode() for s in stops])
    if metadata:
        w.metadata(metadata)
    body = w.finish(provider=int(Provider.OpenAI), extras_dialect=dialect, **finish)
    verify_request(body)
    return read_request(body)
