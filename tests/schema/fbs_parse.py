"""A small parser for the subset of the FlatBuffers schema language we write.

Enough to compare two versions of a schema file (``schema/gateway.fbs``,
``schema/embeddings.fbs``) for the evolution rules and to check hand-written
field tables against the schemas. Test code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_COMMENT = re.compile(r"//[^\n]*")
_BLOCK = re.compile(r"\b(table|struct|enum)\s+(\w+)\s*(?::\s*(\w+))?\s*\{(.*?)\}", re.S)
_FIELD = re.compile(r"(\w+)\s*:\s*(\[?\s*\w+\s*\]?)\s*(?:=\s*([^;(]+?))?\s*(\([^)]*\))?\s*;")
_ENUM_VAL = re.compile(r"(\w+)\s*(?:=\s*(-?\d+))?\s*,?")
_INCLUDE = re.compile(r'^include\s+"([^"]+)"\s*;', re.M)


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    default: str | None
    deprecated: bool


@dataclass
class Schema:
    tables: dict[str, list[Field]] = field(default_factory=dict)
    enums: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)


def parse(text: str) -> Schema:
    schema = Schema()
    for kind, name, base, body in _BLOCK.findall(_COMMENT.sub("", text)):
        if kind == "enum":
            values: dict[str, int] = {}
            nxt = 0
            for vname, vnum in _ENUM_VAL.findall(body):
                nxt = int(vnum) if vnum else nxt
                values[vname] = nxt
                nxt += 1
            schema.enums[name] = (base, values)
        else:
            schema.tables[name] = [
                Field(
                    name=fname,
                    type=re.sub(r"\s+", "", ftype),
                    default=(fdefault or None) and fdefault.strip(),
                    deprecated="deprecated" in (attrs or ""),
                )
                for fname, ftype, fdefault, attrs in _FIELD.findall(body)
            ]
    return schema


def parse_file(path: Path) -> Schema:
    return parse(path.read_text())


def includes(path: Path) -> list[Path]:
    """The files ``path`` includes, relative to its folder (as flatc resolves them)."""
    return [path.parent / name for name in _INCLUDE.findall(_COMMENT.sub("", path.read_text()))]


def parse_with_includes(path: Path) -> Schema:
    """``path``'s tables and enums and those of every file it includes, at any depth."""
    merged = Schema()
    todo, seen = [path], set()
    while todo:
        one = todo.pop()
        if one in seen:
            continue
        seen.add(one)
        schema = parse_file(one)
        merged.tables.update(schema.tables)
        merged.enums.update(schema.enums)
        todo.extend(includes(one))
    return merged
