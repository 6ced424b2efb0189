"""The protocol-neutral echo: deltas, the answer, the fault suffix."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flatgate.proxy.backends.dialect import (
    BEFORE_HEAD,
    FAULTS,
    MID_STREAM,
    answer,
    is_streamed,
    split_model,
)
from flatgate.proxy.stub import StubRequest, deltas_of
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.schema import FinishReason, Role


def request(
    text: str = "one two three",
    *,
    max_tokens: int = 0,
    tool: str = "",
    rid: str = "r1",
    system: str = "be brief",
) -> StubRequest:
    messages = ((Role.System, system), (Role.User, "earlier words"), (Role.User, text))
    return StubRequest(rid, "m", messages, max_tokens, tool, True)


@given(st.text(alphabet=" \t\nab\u00e9\u4e2d", max_size=40))
def test_deltas_join_back_to_the_text(text: str) -> None:
    deltas = deltas_of(text)
    assert "".join(deltas) == text
    assert all(d.strip() for d in deltas) or not text.strip()


@given(st.text(alphabet=" ab", max_size=30), st.integers(1, 5))
def test_a_limit_keeps_one_more_delta_than_it_allows(text: str, limit: int) -> None:
    full = deltas_of(text)
    assert deltas_of(text, limit) == full[: limit + 1]


def test_the_echo_is_the_last_user_message_word_by_word() -> None:
    ans = answer(request("  hello  big\tworld "))
    assert ans.deltas == ("  hello  ", "big\t", "world ")
    assert ans.finish == FinishReason.STOP
    # prompt tokens count every message's words: 2 + 2 + 3
    assert ans.usage == Usage(7, 3)
    assert ans.tool_call is None


def test_max_tokens_cuts_with_length() -> None:
    ans = answer(request("a b c d", max_tokens=2))
    assert ans.deltas == ("a ", "b ")
    assert ans.finish == FinishReason.LENGTH
    assert ans.usage.completion_tokens == 2
    assert answer(request("a b", max_tokens=2)).finish == FinishReason.STOP


def test_a_forced_tool_is_one_call_with_the_user_text() -> None:
    ans = answer(request('say "hi" \u00e9', tool="lookup"))
    call = ans.tool_call
    assert call is not None
    assert (call.id, call.name) == ("call_r1", "lookup")
    assert json.loads(call.arguments) == {"input": 'say "hi" \u00e9'}
    assert ans.finish == FinishReason.TOOL_CALLS
    assert ans.usage.completion_tokens == 1
    fragments = call.fragments()
    assert len(fragments) >= 2 and "".join(fragments) == call.arguments
    assert answer(request(tool="f", rid=""), "toolu_").tool_call.id == "toolu_stub"  # type: ignore[union-attr]


def test_no_user_message_echoes_nothing() -> None:
    req = StubRequest("r", "m", ((Role.System, "sys"),), 0, "", True)
    assert req.last_user == ""
    assert answer(req).deltas == ()


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("echo@die:2", ("echo", "die", 2)),
        ("echo@hang", ("echo", "hang", 0)),
        ("a@b@rate_limit", ("a@b", "rate_limit", 0)),
        ("user@example.com", ("user@example.com", "", 0)),
        ("echo@die:x", ("echo@die:x", "", 0)),
        ("echo@die:2x", ("echo@die:2x", "", 0)),
        ("echo", ("echo", "", 0)),
    ],
)
def test_a_model_suffix_names_a_fault(model: str, expected: tuple[str, str, int]) -> None:
    assert split_model(model) == expected


def test_every_fault_can_be_named_by_suffix() -> None:
    for fault in FAULTS:
        assert split_model(f"m@{fault}:3") == ("m", fault, 3)


def test_canned_mode_reads_only_the_stream_flag() -> None:
    assert is_streamed(b'{"model": "x", "stream": true, "messages": [1, 2]}')
    assert not is_streamed(b'{"stream": false}')
    assert not is_streamed(b"not json")
    assert not is_streamed(b"{}")


def test_every_fault_strikes_somewhere() -> None:
    assert BEFORE_HEAD | MID_STREAM | {"stall"} == set(FAULTS)
    assert not BEFORE_HEAD & MID_STREAM
