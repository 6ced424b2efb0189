"""``wire.digits.read_decimal``: only ASCII digits, and not too many of them,
are a number (``str.isdigit`` and ``int`` take more, or raise)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flatgate.proxy.wire.digits import MAX_DIGITS, read_decimal


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("42", 42), ("007", 7), ("9" * MAX_DIGITS, 10**MAX_DIGITS - 1)],
)
def test_ascii_digits_are_numbers(text: str, value: int) -> None:
    assert read_decimal(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "²", "٣", "\uff11", "1²", "+1", "-1", " 1", "1 ", "1_0", "0x1", "1e3", "9" * 4301],
)
def test_anything_else_is_none(text: str) -> None:
    assert read_decimal(text) is None


def test_more_digits_than_allowed_is_none() -> None:
    assert read_decimal("1" * (MAX_DIGITS + 1)) is None
    assert read_decimal("1234", max_digits=3) is None


@given(st.text(max_size=30))
def test_never_raises_and_agrees_with_int_on_ascii_digits(text: str) -> None:
    value = read_decimal(text)
    if value is not None:
        assert text.isascii() and value == int(text)
