"""The Anthropic Messages request as the stub validates it.

msgspec Structs decode the body once; unlike OpenAI, Anthropic refuses unknown
top-level fields ("Extra inputs are not permitted"), and so does the stub.
``to_stub_request`` then checks the rules a type cannot say (roles are
``user`` and ``assistant``, and ``system`` only as below, non-empty text, ``tool_use`` only from the
assistant, ``tool_result`` only from the user, a forced tool that exists) and
reads out a ``StubRequest``. Every failure is an ``Invalid`` whose message
names the field the way Anthropic does (``messages.0.role: ...``).

Roles and texts: ``system`` (top-level, a string or text blocks) is a system
message; a message's text blocks are joined; each ``tool_result`` is a tool
message (its string or text blocks), so the echo's "last user message" is the
last user message that has text.

- A ``{"role": "system"}`` message inside ``messages`` is taken only when the
  request's ``anthropic-beta`` names a ``mid-conversation-system-...`` beta,
  where Anthropic's placement rules allow it (not first, right after a user
  message, not next to another system message); otherwise it is refused in
  Anthropic's words (``Unexpected role "system"...``), which clients such as
  Claude Code read to retry without it.
- An assistant's ``thinking`` block must carry a signature the stub made
  (``signature``: bound to the block's text), a ``redacted_thinking`` block
  the stub's data (``REDACTED_DATA``); anything else is refused as Anthropic
  refuses a forged one (``Invalid `signature` in `thinking` block``).
- ``thinking`` (``enabled`` or ``adaptive``) is kept in ``StubRequest.params``
  for the answer (``anthropic``), which then thinks first.

No I/O.
"""

from __future__ import annotations

import base64
import hashlib

import msgspec

from flatgate.proxy.backends.dialect import StubRequest, split_model
from flatgate.proxy.plumbing.validation import read_validation
from flatgate.proxy.wire.schema import Role

__all__ = [
    "MID_SYSTEM_BETA",
    "REDACTED_DATA",
    "REDACTED_TRIGGER",
    "Invalid",
    "MessagesRequest",
    "decode_messages_request",
    "signature",
    "to_stub_request",
]

_CHOICES = ("auto", "any", "none", "tool")
# The beta (a prefix: the betas are dated) that lets system messages into `messages`.
MID_SYSTEM_BETA = "mid-conversation-system-"
# Anthropic's documented test prompt that makes the model's thinking redacted.
REDACTED_TRIGGER = "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING"
_FAKE = b"flatgate-stub:"
# The data of the stub's redacted_thinking block (a fake it checks).
REDACTED_DATA = base64.b64encode(_FAKE + b"redacted").decode()
_UNEXPECTED_SYSTEM = (
    'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
    'parameter, not "system" as an input message role.'
)


def signature(thinking: str) -> str:
    """The stub's signature of a thinking block's text: a deterministic fake,
    which it checks when the block comes back."""
    digest = hashlib.sha256(thinking.encode()).digest()[:24]
    return base64.b64encode(_FAKE + digest).decode()


class Invalid(ValueError):
    """A request Anthropic would refuse with a 400 ``invalid_request_error``."""


class ResultBlock(msgspec.Struct, gc=False):
    type: str
    text: str | None = None


class Block(msgspec.Struct, gc=False):
    type: str
    text: str | None = None
    # tool_use
    id: str | None = None
    name: str | None = None
    input: dict[str, object] | None = None
    # tool_result
    tool_use_id: str | None = None
    content: str | list[ResultBlock] | None = None
    is_error: bool | None = None
    # thinking, redacted_thinking
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None


class Message(msgspec.Struct, gc=False):
    role: str
    content: str | list[Block]


class Tool(msgspec.Struct, gc=False):
    name: str
    description: str | None = None
    input_schema: dict[str, object] | None = None
    # Absent (or "custom") for a client tool; server tools name a version.
    type: str | None = None


class ToolChoice(msgspec.Struct, gc=False):
    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class MessagesRequest(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    model: str | None = None
    messages: list[Message] | None = None
    max_tokens: int | None = None
    system: str | list[ResultBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    metadata: dict[str, object] | None = None
    # Accepted and not used by the echo.
    thinking: dict[str, object] | None = None
    service_tier: str | None = None
    container: object = None
    context_management: object = None
    mcp_servers: object = None
    output_config: object = None
    output_format: object = None
    inference_geo: object = None


_DECODER = msgspec.json.Decoder(MessagesRequest)


def decode_messages_request(body: bytes) -> MessagesRequest:
    """The body as a ``MessagesRequest``; raises ``Invalid`` naming the field."""
    try:
        return _DECODER.decode(body)
    except msgspec.ValidationError as exc:
        # msgspec's $.messages[0].role is Anthropic's messages.0.role.
        v = read_validation(str(exc))
        if v.missing:
            raise Invalid(f"{v.where(index='.{}', field=v.missing)}: Field required") from None
        if v.unknown:
            field = v.where(index=".{}", field=v.unknown)
            raise Invalid(f"{field}: Extra inputs are not permitted") from None
        where = v.where(index=".{}")
        raise Invalid(
            f"{where}: {v.reason}" if where else f"Invalid request body: {v.reason}"
        ) from None
    except msgspec.DecodeError:
        raise Invalid("There was an issue with the request body: it is not valid JSON.") from None


def _text_of(blocks: list[ResultBlock], where: str) -> str:
    out = []
    for j, b in enumerate(blocks):
        if b.type != "text":
            raise Invalid(
                f"{where}.{j}.type: the stub accepts only 'text' blocks here, not {b.type!r}"
            )
        out.append(_non_empty(b.text, f"{where}.{j}"))
    return "".join(out)


def _non_empty(text: str | None, where: str) -> str:
    if text is None:
        raise Invalid(f"{where}.text: Field required")
    top = where.split(".", 1)[0]
    if not text:
        raise Invalid(f"{top}: text content blocks must be non-empty")
    if not text.strip():
        raise Invalid(f"{top}: text content blocks must contain non-whitespace text")
    return text


def _system_message(i: int, m: Message, before: str | None, after: str | None) -> str:
    """The text of an in-place system message, checked where Anthropic checks it."""
    where = f"messages.{i}"
    if before is None:
        raise Invalid(
            f"{where}: a system message cannot be the first message; use the top-level "
            "`system` parameter"
        )
    if "system" in (before, after):
        raise Invalid(f"{where}: consecutive system messages are not allowed")
    if before != "user":
        raise Invalid(f"{where}: a system message must immediately follow a user message")
    if after not in (None, "assistant"):
        raise Invalid(f"{where}: a system message must be last or be followed by an assistant turn")
    if isinstance(m.content, str):
        return _non_empty(m.content, where)
    texts = []
    for j, b in enumerate(m.content):
        if b.type != "text":
            raise Invalid(f"{where}.content.{j}.type: system messages take text blocks only")
        texts.append(_non_empty(b.text, f"{where}.content.{j}"))
    return "".join(texts)


def _thought(at: str, b: Block) -> None:
    if b.type == "thinking":
        if b.thinking is None or b.signature is None:
            raise Invalid(
                f"{at}.{'thinking' if b.thinking is None else 'signature'}: Field required"
            )
        if b.signature != signature(b.thinking):
            raise Invalid(f"{at}: Invalid `signature` in `thinking` block")
    elif b.data != REDACTED_DATA:
        raise Invalid(f"{at}: Invalid `data` in `redacted_thinking` block")


def _message(i: int, m: Message, last: bool, out: list[tuple[int, str]]) -> None:
    where = f"messages.{i}"
    if m.role not in ("user", "assistant"):
        raise Invalid(f"{where}.role: Input should be 'user' or 'assistant'")
    role = Role.User if m.role == "user" else Role.Assistant
    if not m.content and not (last and m.role == "assistant"):
        raise Invalid(
            f"{where}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    if isinstance(m.content, str):
        out.append((role, m.content))
        return
    texts = []
    for j, b in enumerate(m.content):
        at = f"{where}.content.{j}"
        if b.type == "text":
            texts.append(_non_empty(b.text, at))
        elif b.type == "tool_use":
            if m.role != "assistant":
                raise Invalid(f"{at}: tool_use blocks are only allowed in assistant messages")
            for key in ("id", "name", "input"):
                if getattr(b, key) is None:
                    raise Invalid(f"{at}.{key}: Field required")
        elif b.type == "tool_result":
            if m.role != "user":
                raise Invalid(f"{at}: tool_result blocks are only allowed in user messages")
            if not b.tool_use_id:
                raise Invalid(f"{at}.tool_use_id: Field required")
            content = b.content or ""
            text = content if isinstance(content, str) else _text_of(content, f"{at}.content")
            out.append((Role.Tool, text))
        elif b.type in ("thinking", "redacted_thinking"):
            if m.role != "assistant":
                raise Invalid(f"{at}: {b.type} blocks are only allowed in assistant messages")
            _thought(at, b)
        else:
            raise Invalid(
                f"{at}.type: the stub accepts 'text', 'tool_use', 'tool_result', 'thinking' "
                f"and 'redacted_thinking' blocks, not {b.type!r}"
            )
    if texts:
        out.append((role, "".join(texts)))


def _forced_tool(r: MessagesRequest) -> str:
    choice = r.tool_choice
    if choice is None:
        return ""
    if choice.type not in _CHOICES:
        raise Invalid(
            f"tool_choice.type: Input tag {choice.type!r} does not match any of the expected "
            "tags: 'auto', 'any', 'tool', 'none'"
        )
    if choice.type in ("any", "tool") and not r.tools:
        raise Invalid("tool_choice: may only be specified while providing tools")
    if choice.type != "tool":
        return ""
    if not choice.name:
        raise Invalid("tool_choice.name: Field required")
    if choice.name not in {t.name for t in r.tools or ()}:
        raise Invalid(f"tool_choice.name: tool {choice.name!r} not found in tools")
    return choice.name


def _bounded(name: str, value: float | None, high: float | None) -> None:
    if value is None:
        return
    if value < 0:
        raise Invalid(f"{name}: Input should be greater than or equal to 0")
    if high is not None and value > high:
        raise Invalid(f"{name}: Input should be less than or equal to {high:g}")


def to_stub_request(r: MessagesRequest, request_id: str, betas: str = "") -> StubRequest:
    """Check what the types cannot say, and read out the ``StubRequest``
    (``betas``: the request's ``anthropic-beta`` header)."""
    if r.model is None:
        raise Invalid("model: Field required")
    if not r.model:
        raise Invalid("model: String should have at least 1 character")
    if r.messages is None:
        raise Invalid("messages: Field required")
    if r.max_tokens is None:
        raise Invalid("max_tokens: Field required")
    if r.max_tokens < 1:
        raise Invalid("max_tokens: Input should be greater than or equal to 1")
    if not r.messages:
        raise Invalid("messages: at least one message is required")
    _bounded("temperature", r.temperature, 1.0)
    _bounded("top_p", r.top_p, 1.0)
    _bounded("top_k", r.top_k, None)
    messages: list[tuple[int, str]] = []
    if isinstance(r.system, str):
        if r.system:
            messages.append((Role.System, r.system))
    elif r.system:
        messages.append((Role.System, _text_of(r.system, "system")))
    n = len(r.messages)
    mid_system = any(b.strip().startswith(MID_SYSTEM_BETA) for b in betas.split(","))
    roles = [m.role for m in r.messages]
    for i, m in enumerate(r.messages):
        if m.role == "system":
            if not mid_system:
                raise Invalid(_UNEXPECTED_SYSTEM)
            prev = roles[i - 1] if i else None
            nxt = roles[i + 1] if i + 1 < n else None
            messages.append((Role.System, _system_message(i, m, prev, nxt)))
            continue
        _message(i, m, i == n - 1, messages)
    for i, tool in enumerate(r.tools or ()):
        if tool.type in (None, "custom") and tool.input_schema is None:
            raise Invalid(f"tools.{i}.custom.input_schema: Field required")
    forced = _forced_tool(r)
    model, fault, after = split_model(r.model)
    return StubRequest(
        request_id=request_id,
        model=model,
        messages=tuple(messages),
        max_tokens=r.max_tokens,
        forced_tool=forced,
        stream=bool(r.stream),
        fault=fault,
        fault_after=after,
        stop=tuple(r.stop_sequences or ()),
        params={"thinking": r.thinking} if _thinks(r.thinking) else {},
    )


def _thinks(thinking: dict[str, object] | None) -> bool:
    return thinking is not None and thinking.get("type") in ("enabled", "adaptive")
