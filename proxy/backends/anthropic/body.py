"""The Messages API body an ``anthropic`` backend is sent, and where the
client's marks and fields go on it.

Owns the body's msgspec Structs (``MessagesRequest`` and its blocks, tools,
tool choice), the ``$cache_control``, ``$tools`` and ``$blocks`` entries of
Messages extras (``edge_translator.anthropic.extras`` writes them), and their
placing: ``mark`` puts each ``cache_control`` on the last block built from its
wire message (or on its tool); ``place`` splices each ``$tools`` entry's
fields into its tool and each ``$blocks`` entry's into its block (the text
block, the ``n``-th ``tool_use`` or the ``tool_result`` built from wire
message ``index``, or the block of its ``n``-th reasoning part), as the
client wrote them: the block's JSON with those members appended, never
re-encoded. A field the adapter writes itself is never spliced over
(``Untranslatable``). Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import splice

__all__ = [
    "Block",
    "BlockFields",
    "Made",
    "Mark",
    "Markable",
    "Message",
    "MessagesRequest",
    "Metadata",
    "RedactedThinking",
    "Text",
    "Thinking",
    "Tool",
    "ToolChoice",
    "ToolFields",
    "ToolResult",
    "ToolUse",
    "mark",
    "place",
]


class Text(msgspec.Struct, tag="text", tag_field="type", omit_defaults=True, gc=False):
    text: str
    cache_control: msgspec.Raw | None = None


class ToolUse(msgspec.Struct, tag="tool_use", tag_field="type", omit_defaults=True, gc=False):
    id: str
    name: str
    input: msgspec.Raw
    cache_control: msgspec.Raw | None = None


class ToolResult(msgspec.Struct, tag="tool_result", tag_field="type", omit_defaults=True):
    tool_use_id: str
    content: str = ""
    is_error: bool = False
    cache_control: msgspec.Raw | None = None


class Thinking(msgspec.Struct, tag="thinking", tag_field="type", gc=False):
    thinking: str
    signature: str


class RedactedThinking(msgspec.Struct, tag="redacted_thinking", tag_field="type", gc=False):
    data: str


Block = Text | ToolUse | ToolResult | Thinking | RedactedThinking
Markable = Text | ToolUse | ToolResult
# The blocks built from one wire message, and its reasoning parts' blocks by
# the part's index (``None``: a part left out).
Made = tuple[list[Block], list[Block | None]]


class Message(msgspec.Struct, gc=False):
    role: str
    # A block, or (with ``$blocks`` fields spliced in) its JSON text.
    content: list[Block | msgspec.Raw]


class Tool(msgspec.Struct, omit_defaults=True, gc=False):
    name: str
    input_schema: msgspec.Raw
    description: str = ""
    # Structured tool use (Anthropic's strict tools): sent only when true.
    strict: bool | None = None
    cache_control: msgspec.Raw | None = None


class ToolChoice(msgspec.Struct, omit_defaults=True, gc=False):
    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Metadata(msgspec.Struct, gc=False):
    user_id: str


class MessagesRequest(msgspec.Struct, omit_defaults=True, gc=False):
    model: str
    max_tokens: int
    messages: list[Message]
    # Required: omit_defaults would drop it if it had a default.
    stream: bool
    system: list[Text | msgspec.Raw] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    # Function tools (``Tool``), then the client's own (server tools, as sent).
    tools: list[Tool | msgspec.Raw] | None = None
    tool_choice: ToolChoice | None = None
    metadata: Metadata | None = None


class Mark(msgspec.Struct, gc=False):
    """One ``$cache_control`` entry."""

    at: str
    index: int
    cache_control: msgspec.Raw


class ToolFields(msgspec.Struct, gc=False):
    """One ``$tools`` entry."""

    index: int
    fields: dict[str, msgspec.Raw]


class BlockFields(msgspec.Struct, gc=False):
    """One ``$blocks`` entry."""

    index: int
    block: str
    n: int
    fields: dict[str, msgspec.Raw]


_encode = msgspec.json.Encoder().encode
_KINDS: dict[str, type] = {"text": Text, "tool_use": ToolUse, "tool_result": ToolResult}


def mark(marks: list[Mark], made: list[Made], tools: list[Tool | msgspec.Raw] | None) -> None:
    """Put each ``$cache_control`` entry's object where it says."""
    for j, mark in enumerate(marks):
        where = f"extras.$cache_control[{j}]"
        target: Markable | Tool | None = None
        if mark.at in ("system", "messages"):
            built = made[mark.index][0] if 0 <= mark.index < len(made) else None
            block = built[-1] if built else None
            if block is not None and not isinstance(block, Markable):
                raise Untranslatable(f"{where}: a thinking block cannot be marked for caching")
            target = block
        elif mark.at == "tools":
            tool = tools[mark.index] if tools and 0 <= mark.index < len(tools) else None
            target = tool if isinstance(tool, Tool) else None
        else:
            raise Untranslatable(f"{where}.at: {mark.at!r} is not system, messages or tools")
        if target is None:
            raise Untranslatable(f"{where}: no content at {mark.at}[{mark.index}] to mark")
        target.cache_control = mark.cache_control


def _with_fields(value: msgspec.Struct, fields: dict[str, msgspec.Raw], where: str) -> msgspec.Raw:
    """``value``'s JSON with ``fields`` (as the client wrote them) spliced in."""
    for name in fields:
        if name in value.__struct_fields__ or name == "type":
            raise Untranslatable(f"{where}: {name!r} is a field the adapter writes")
    return msgspec.Raw(splice(_encode(value), ((k, bytes(v)) for k, v in fields.items())))


def _block_target(entry: BlockFields, made: list[Made], where: str) -> Block | None:
    if not 0 <= entry.index < len(made):
        raise Untranslatable(f"{where}: no wire message {entry.index}")
    blocks, thinking = made[entry.index]
    if entry.block == "thinking":
        if not 0 <= entry.n < len(thinking):
            raise Untranslatable(f"{where}: no reasoning part {entry.n} there")
        return thinking[entry.n]  # None: the part is left out, and so are its fields
    kind = _KINDS.get(entry.block)
    if kind is None:
        raise Untranslatable(f"{where}.block: {entry.block!r} is not a block it builds")
    of_kind = [b for b in blocks if type(b) is kind]
    if not 0 <= entry.n < len(of_kind):
        raise Untranslatable(f"{where}: no {entry.block} block {entry.n} there")
    return of_kind[entry.n]


def place(
    tool_fields: list[ToolFields],
    blocks: list[BlockFields],
    *,
    made: list[Made],
    system: list[Text | msgspec.Raw],
    messages: list[Message],
    tools: list[Tool | msgspec.Raw] | None,
    omitted: list[str],
) -> None:
    """Splice each ``$tools`` and ``$blocks`` entry's fields into its tool or
    block (after ``_mark``: the cache marks are on the objects)."""
    for j, t in enumerate(tool_fields):
        where = f"extras.$tools[{j}]"
        tool = tools[t.index] if tools and 0 <= t.index < len(tools) else None
        if tools is None or not isinstance(tool, Tool):
            raise Untranslatable(f"{where}: no tool {t.index}")
        tools[t.index] = _with_fields(tool, t.fields, where)
    found: dict[int, tuple[Block, dict[str, msgspec.Raw]]] = {}
    for j, entry in enumerate(blocks):
        block = _block_target(entry, made, f"extras.$blocks[{j}]")
        if block is None:
            omitted.extend(f"messages.content.{name}" for name in entry.fields)
            continue
        _, fields = found.setdefault(id(block), (block, {}))
        fields.update(entry.fields)
    if not found:
        return
    spliced = {k: _with_fields(b, f, "extras.$blocks") for k, (b, f) in found.items()}
    contents: list[list[Text | msgspec.Raw] | list[Block | msgspec.Raw]] = [system]
    contents += [m.content for m in messages]
    for content in contents:
        for k, b in enumerate(content):
            if id(b) in spliced:
                content[k] = spliced[id(b)]
