"""What an OpenAI chat request means on the wire, field by field.

Owns the decisions the request writer (``translate.write_request``) and its
stock-builder reference share: the model a name or alias resolves to, each
message's wire role and text, ``max_completion_tokens`` over ``max_tokens``,
the stop list, the tool choice, a message's extras and an assistant
message's reasoning. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from flatgate.edge_translator.ids import new_id
from flatgate.proxy.apis.openai_chat.request import (
    AssistantMessage,
    ChatCompletionRequest,
    ContentPart,
    DeveloperMessage,
    Message,
    RefusalPart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolChoiceFunction,
    ToolMessage,
    UserMessage,
)
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, Role, ToolChoiceMode

__all__ = [
    "ROLE_OF",
    "extras_of",
    "max_tokens_of",
    "new_request_id",
    "reasoning_of",
    "stops_of",
    "text_of",
    "tool_choice_of",
]

# Message type -> wire role.
ROLE_OF: dict[type, int] = {
    UserMessage: Role.User,
    SystemMessage: Role.System,
    DeveloperMessage: Role.Developer,
    AssistantMessage: Role.Assistant,
    ToolMessage: Role.Tool,
}
_CHOICE: dict[str, int] = {
    "auto": ToolChoiceMode.Auto,
    "none": ToolChoiceMode.None_,
    "required": ToolChoiceMode.Required,
}


_CHAT = int(ApiDialect.OPENAI_CHAT)


def new_request_id() -> str:
    """A fresh OpenAI-style completion id (``ids.new_id``)."""
    return new_id("chatcmpl-")


def text_of(content: str | list[ContentPart] | None) -> str:
    """A message's text: the string, or its text (and refusal) parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        p.text if isinstance(p, TextPart) else p.refusal if isinstance(p, RefusalPart) else ""
        for p in content
    )


def max_tokens_of(req: ChatCompletionRequest) -> int:
    if req.max_completion_tokens is not None:
        return req.max_completion_tokens
    return req.max_tokens or 0


def stops_of(req: ChatCompletionRequest) -> list[str]:
    stop = req.stop
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    return [s for s in stop if s]


def tool_choice_of(req: ChatCompletionRequest) -> tuple[int, str]:
    choice = req.tool_choice
    if choice is None:
        return ToolChoiceMode.Unset, ""
    if isinstance(choice, ToolChoiceFunction):
        return ToolChoiceMode.Function, choice.function.name
    return _CHOICE[choice], ""


def extras_of(msg: Message) -> tuple[bytes, bytes, Sequence[ToolCall]]:
    """A message's name, tool call id and tool calls (by type: a failed
    ``getattr`` raises and catches an exception, which costs a microsecond)."""
    if isinstance(msg, ToolMessage):
        return (msg.name or "").encode(), msg.tool_call_id.encode(), ()
    name = msg.name.encode() if msg.name else b""
    if isinstance(msg, AssistantMessage):
        return name, b"", msg.tool_calls or ()
    return name, b"", ()


def reasoning_of(msg: AssistantMessage) -> list[ReasoningPart]:
    """An assistant message's reasoning (DeepSeek's ``reasoning_content``, or
    ``reasoning`` as vLLM names it, replayed by the Agents SDK) as the
    wire's reasoning part: none without any."""
    text = msg.reasoning_content or msg.reasoning
    return [ReasoningPart(text=text, dialect=_CHAT)] if text else []
