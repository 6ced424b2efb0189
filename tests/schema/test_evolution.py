"""The schema may only evolve by appending: checked against the released snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.schema.fbs_parse import Schema, parse, parse_file

ROOT = Path(__file__).resolve().parents[2]
CURRENT = ROOT / "schema" / "gateway.fbs"
RELEASED = ROOT / "schema" / "released" / "gateway.fbs"
# Every wire schema, each held to its own released snapshot.
SCHEMAS = ("gateway.fbs", "embeddings.fbs")


def evolution_errors(old: Schema, new: Schema) -> list[str]:
    """Every way ``new`` breaks the evolution rules relative to ``old``."""
    errors: list[str] = []
    for table, old_fields in old.tables.items():
        new_fields = new.tables.get(table)
        if new_fields is None:
            errors.append(f"table {table} deleted")
            continue
        if len(new_fields) < len(old_fields):
            errors.append(f"table {table}: fields deleted ({len(old_fields)} -> {len(new_fields)})")
        for slot, (was, now) in enumerate(zip(old_fields, new_fields, strict=False)):
            if was.name != now.name:
                errors.append(
                    f"table {table} slot {slot}: {was.name} renamed/reordered to {now.name}"
                )
            if was.type != now.type:
                errors.append(f"table {table}.{was.name}: type {was.type} -> {now.type}")
            if was.default != now.default:
                errors.append(f"table {table}.{was.name}: default {was.default} -> {now.default}")
            if was.deprecated and not now.deprecated:
                errors.append(f"table {table}.{was.name}: un-deprecated")
    for enum, (old_base, old_values) in old.enums.items():
        if enum not in new.enums:
            errors.append(f"enum {enum} deleted")
            continue
        new_base, new_values = new.enums[enum]
        if new_base != old_base:
            errors.append(f"enum {enum}: base {old_base} -> {new_base}")
        for vname, vnum in old_values.items():
            if new_values.get(vname) != vnum:
                errors.append(f"enum {enum}.{vname}: value {vnum} -> {new_values.get(vname)}")
    return errors


@pytest.mark.parametrize("name", SCHEMAS)
def test_current_schema_evolves_released_one(name: str) -> None:
    released = parse_file(ROOT / "schema" / "released" / name)
    assert released.tables, f"schema/released/{name} has no tables"
    assert evolution_errors(released, parse_file(ROOT / "schema" / name)) == []


def test_every_schema_has_a_released_snapshot() -> None:
    assert sorted(p.name for p in (ROOT / "schema").glob("*.fbs")) == sorted(SCHEMAS)
    assert sorted(p.name for p in (ROOT / "schema" / "released").glob("*.fbs")) == sorted(SCHEMAS)


def test_an_embeddings_change_is_caught() -> None:
    text = (ROOT / "schema" / "embeddings.fbs").read_text()
    released = parse_file(ROOT / "schema" / "released" / "embeddings.fbs")
    swapped = text.replace("  count: uint32;", "  count: uint64;", 1)
    assert swapped != text
    assert any(
        "count: type uint32 -> uint64" in e for e in evolution_errors(released, parse(swapped))
    )
    dropped = text.replace("  tokens: [TokenIds];\n", "", 1)
    assert dropped != text
    assert any("renamed/reordered" in e for e in evolution_errors(released, parse(dropped)))


def test_parser_sees_every_table() -> None:
    schema = parse_file(CURRENT)
    assert {"CompletionRequest", "CompletionChunk", "Message", "Tool"} <= set(schema.tables)
    names = [f.name for f in schema.tables["CompletionRequest"]]
    assert names[:6] == [
        "request_id",
        "provider",
        "model_name",
        "max_tokens",
        "temperature",
        "tools",
    ]
    assert schema.enums["ModelProvider"] == ("byte", {"OpenAI": 0, "Anthropic": 1, "SelfHosted": 2})
    embeddings = parse_file(ROOT / "schema" / "embeddings.fbs")
    assert set(embeddings.tables) == {"TokenIds", "EmbeddingRequest", "EmbeddingResponse"}
    assert [f.name for f in embeddings.tables["EmbeddingRequest"]][:3] == names[:3]


BASE = """
enum E : byte { A = 0, B = 1 }
table T { a: string; b: int32; c: [Sub]; }
"""


@pytest.mark.parametrize(
    ("changed", "needle"),
    [
        ("table T { a: string; c: [Sub]; }", "renamed/reordered"),
        ("table T { b: int32; a: string; c: [Sub]; }", "renamed/reordered"),
        ("table T { a: string; b: int64; c: [Sub]; }", "type int32 -> int64"),
        ("table T { a: string; b: int32; }", "fields deleted"),
        ("table T { a: string; b: int32 = 3; c: [Sub]; }", "default"),
    ],
)
def test_breaking_changes_are_caught(changed: str, needle: str) -> None:
    old = parse(BASE)
    new = parse(BASE.replace("table T { a: string; b: int32; c: [Sub]; }", changed))
    errors = evolution_errors(old, new)
    assert any(needle in e for e in errors), errors


def test_allowed_changes_pass() -> None:
    old = parse(BASE)
    appended = BASE.replace("c: [Sub]; }", "c: [Sub]; d: bool; }").replace("B = 1 }", "B = 1, C }")
    deprecated = BASE.replace("b: int32;", "b: int32 (deprecated);")
    assert evolution_errors(old, parse(appended)) == []
    assert evolution_errors(old, parse(deprecated)) == []
    assert "enum E.B" in " ".join(evolution_errors(old, parse(BASE.replace("B = 1", "B = 2"))))
