"""Where the client's marks and fields go on the body an ``anthropic``
backend is sent.

The body is the one model's (``apis.anthropic_messages.blocks``); the
``$cache_control``, ``$tools`` and ``$blocks`` entries are read by
``apis.anthropic_messages.extras``. Owns their placing: ``mark`` puts each
``cache_control`` on the last block built from its wire message (or on its
tool); ``place`` splices each ``$tools`` entry's fields into its tool and
each ``$blocks`` entry's into its block (the text block, the ``n``-th
``tool_use`` or the ``tool_result`` built from wire message ``index``, or
the block of its ``n``-th reasoning part), as the client wrote them: the
block's JSON with those members appended, never re-encoded, standing in its
place in the body's list (the Structs' lists are typed for decoding; msgspec
writes a ``msgspec.Raw`` as it is, wherever it stands). A field the adapter
writes itself is never spliced over (``Untranslatable``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

import msgspec

from flatgate.proxy.apis.anthropic_messages.blocks import (
    Block,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
)
from flatgate.proxy.apis.anthropic_messages.extras import BlockFields, Mark, ToolFields
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import splice

__all__ = ["Made", "Markable", "mark", "place"]

Markable: TypeAlias = TextBlock | ToolUseBlock | ToolResultBlock
# The blocks built from one wire message, and its reasoning parts' blocks by
# the part's index (``None``: a part left out).
Made: TypeAlias = tuple[list[Block], list[Block | None]]

_encode = msgspec.json.Encoder().encode
_KINDS: dict[str, type] = {
    "text": TextBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
}
# The fields the adapter writes of each block and tool, which a client's
# fields never replace: a Struct's own and its type, but a text's
# ``citations`` (the adapter never sets them: they come as a ``$blocks``
# field).
_WRITES: dict[type, frozenset[str]] = {
    cls: frozenset((*cls.__struct_fields__, "type")) - {"citations"}
    for cls in (
        TextBlock,
        ToolUseBlock,
        ToolResultBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        ToolDef,
    )
}


def mark(marks: list[Mark], made: list[Made], tools: list[ToolDef] | None) -> None:
    """Put each ``$cache_control`` entry's object where it says."""
    for j, mark in enumerate(marks):
        where = f"extras.$cache_control[{j}]"
        target: Markable | ToolDef | None = None
        if mark.at in ("system", "messages"):
            built = made[mark.index][0] if 0 <= mark.index < len(made) else None
            block = built[-1] if built else None
            if block is not None and not isinstance(block, Markable):
                raise Untranslatable(f"{where}: a thinking block cannot be marked for caching")
            target = block
        elif mark.at == "tools":
            tool = tools[mark.index] if tools and 0 <= mark.index < len(tools) else None
            # A client's own tool (a Raw) is not the adapter's to mark.
            target = tool if isinstance(tool, ToolDef) else None
        else:
            raise Untranslatable(f"{where}.at: {mark.at!r} is not system, messages or tools")
        if target is None:
            raise Untranslatable(f"{where}: no content at {mark.at}[{mark.index}] to mark")
        target.cache_control = mark.cache_control


def _with_fields(value: msgspec.Struct, fields: dict[str, msgspec.Raw], where: str) -> msgspec.Raw:
    """``value``'s JSON with ``fields`` (as the client wrote them) spliced in."""
    writes = _WRITES[type(value)]
    for name in fields:
        if name in writes:
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
    contents: Iterable[list[Any]],
    tools: list[ToolDef] | None,
    omitted: list[str],
) -> None:
    """Splice each ``$tools`` and ``$blocks`` entry's fields into its tool or
    block (after ``mark``: the cache marks are on the objects); ``contents``:
    the lists the blocks stand in (the system's, each message's)."""
    for j, t in enumerate(tool_fields):
        where = f"extras.$tools[{j}]"
        tool = tools[t.index] if tools and 0 <= t.index < len(tools) else None
        if tools is None or not isinstance(tool, ToolDef):
            raise Untranslatable(f"{where}: no tool {t.index}")
        tools[t.index] = _with_fields(tool, t.fields, where)  # type: ignore[call-overload]
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
    for content in contents:
        for k, b in enumerate(content):
            if id(b) in spliced:
                content[k] = spliced[id(b)]
