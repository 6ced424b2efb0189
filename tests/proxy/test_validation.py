"""msgspec's validation messages, taken apart once and written each API's way."""

from __future__ import annotations

import msgspec
import pytest

from flatgate.proxy.plumbing.config import key_path
from flatgate.proxy.plumbing.validation import quoted_span, read_validation


class Inner(msgspec.Struct, forbid_unknown_fields=True):
    role: str


class Outer(msgspec.Struct):
    messages: list[Inner]
    metadata: dict[str, list[int]] = {}


def message(data: object) -> str:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert(data, Outer)
    return str(info.value)


def test_a_path_with_an_index() -> None:
    v = read_validation(message({"messages": [{"role": 1}]}))
    assert (v.reason, v.path, v.missing, v.unknown) == (
        "Expected `str`, got `int`",
        ("messages", 0, "role"),
        "",
        "",
    )
    assert v.where() == "messages[0].role"  # the config's keys
    assert v.where(index=".[{}]") == "messages.[0].role"  # OpenAI's param
    assert v.where(index=".{}") == "messages.0.role"  # Anthropic's
    assert v.where(root="backends[2]") == "backends[2].messages[0].role"


def test_a_missing_and_an_unknown_field() -> None:
    v = read_validation(message({"messages": [{}]}))
    assert (v.missing, v.path) == ("role", ("messages", 0))
    assert v.where(index=".{}", field=v.missing) == "messages.0.role"
    v = read_validation(message({"messages": [{"role": "u", "colour": 1}]}))
    assert v.unknown == "colour" and not v.missing
    v = read_validation(message({}))
    assert (v.missing, v.path, v.where(field=v.missing)) == ("messages", (), "messages")


def test_a_dict_value_has_no_key() -> None:
    v = read_validation(message({"messages": [], "metadata": {"k": ["x"]}}))
    assert v.path == ("metadata", None, 0)
    assert v.where() == "metadata[...][0]"
    assert v.where(index=".[{}]", value="") == "metadata.[0]"


def test_no_location_is_all_reason() -> None:
    v = read_validation(message([1]))
    assert (v.reason, v.path) == ("Expected `object`, got `array`", ())
    # A quoted value that looks like a location is not one.
    text = "Invalid enum value 'x - at `$.y`'"
    assert read_validation(text) == (text, (), "", "")


@pytest.mark.parametrize(
    ("data", "where", "expected"),
    [
        ({"messages": [{"role": 1}]}, "", "messages[0].role: Expected `str`, got `int`"),
        ({"messages": [{}]}, "x", "x.messages[0].role: required key is missing"),
        ({}, "routes[1]", "routes[1].messages: required key is missing"),
        ([1], "proxy", "proxy: Expected `object`, got `array`"),
    ],
)
def test_config_keys(data: object, where: str, expected: str) -> None:
    assert key_path(message(data), where) == expected


def test_the_quoted_value() -> None:
    text = "Invalid enum value 'a'b' - at `$.role`"
    start, end = quoted_span(text) or (0, 0)
    assert text[start:end] == "a'b"
    assert quoted_span("Expected `int`, got `str` - at `$.n`") is None
