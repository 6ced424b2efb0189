"""``backends.sse.SSEParser``: events out of a byte stream, however it is cut.

Every fixture is parsed whole, byte by byte and cut in two at every offset,
and must give the same events each way; then the line-end, field and size
rules, one at a time.
"""

from __future__ import annotations

import pytest

from flatgate.proxy.backends.sse import SSEError, SSEParser
from tests.backends.helpers import FIXTURES, bytewise, fixture

Events = list[tuple[bytes, bytes]]
ALL_SSE = sorted(p.name for p in FIXTURES.glob("*.sse"))


def parse(pieces: list[bytes], max_event: int | None = None) -> Events:
    p = SSEParser() if max_event is None else SSEParser(max_event)
    out: Events = []
    for piece in pieces:
        out += p.feed(piece)
    return out + p.end()


def whole(data: bytes) -> Events:
    return parse([data])


def test_a_blank_line_ends_each_event_and_data_loses_its_prefix() -> None:
    events = whole(fixture("openai_text.sse"))
    assert len(events) == 4
    assert all(name == b"" for name, _ in events)
    assert events[1][1].startswith(b'{"id":"chatcmpl-123"')
    assert events[-1] == (b"", b"[DONE]")


def test_feed_returns_an_event_as_soon_as_its_blank_line_arrives() -> None:
    p = SSEParser()
    assert p.feed(b"data: one\n") == []
    assert p.feed(b"\n") == [(b"", b"one")]
    assert p.feed(b"data: two\n\ndata: thr") == [(b"", b"two")]
    assert p.end() == [(b"", b"thr")]


@pytest.mark.parametrize("name", ALL_SSE)
def test_every_two_piece_split_of_a_fixture_gives_the_same_events(name: str) -> None:
    data = fixture(name)
    want = whole(data)
    for cut in range(len(data) + 1):
        assert parse([data[:cut], data[cut:]]) == want, f"{name} cut at {cut}"


@pytest.mark.parametrize("name", ALL_SSE)
def test_a_fixture_fed_byte_by_byte_gives_the_same_events(name: str) -> None:
    data = fixture(name)
    assert parse(bytewise(data)) == whole(data)


def test_empty_pieces_change_nothing() -> None:
    data = fixture("openai_text.sse")
    pieces = [b""]
    for b in bytewise(data):
        pieces += [b, b""]
    assert parse(pieces) == whole(data)


def test_crlf_line_ends_give_the_same_events_as_lf() -> None:
    assert whole(fixture("openai_text_crlf.sse")) == whole(fixture("openai_text.sse"))


def test_cr_line_ends_give_the_same_events_as_lf() -> None:
    lf = fixture("openai_text.sse")
    assert whole(lf.replace(b"\n", b"\r")) == whole(lf)


def test_cr_at_the_end_of_one_piece_and_lf_at_the_start_of_the_next_are_one_line_end() -> None:
    # Were they two line ends, the blank line between them would end the event
    # after "a" and make "b" a second event.
    assert parse([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [(b"", b"a\nb")]


def test_a_lone_cr_at_the_end_of_a_piece_still_ends_its_line() -> None:
    assert parse([b"data: a\r", b"data: b\r\r"]) == [(b"", b"a\nb")]


def test_mixed_line_ends_in_one_stream() -> None:
    data = b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\r\n\n"
    want = [(b"", b"a"), (b"", b"b"), (b"", b"c"), (b"", b"d")]
    assert whole(data) == want
    assert parse(bytewise(data)) == want


def test_comment_lines_are_ignored() -> None:
    with_comments = whole(fixture("deepseek_keepalive_prefix.sse"))
    assert with_comments == whole(fixture("deepseek_reasoning.sse"))
    # a comment between two data lines of one event
    assert whole(b"data: a\n: keep-alive\ndata: b\n\n") == [(b"", b"a\nb")]


def test_a_comment_only_stream_has_no_events() -> None:
    openrouter = whole(fixture("openrouter_comment_and_midstream_error.sse"))
    assert len(openrouter) == 1
    assert openrouter[0][1].startswith(b'{"id":"cmpl-abc123"')
    assert whole(b": OPENROUTER PROCESSING\n\n: x\n\n") == []


def test_data_without_a_space_after_the_colon() -> None:
    events = whole(fixture("compat_data_nospace_reasoning_excerpt.sse"))
    assert len(events) == 3
    assert all(data.startswith(b'{"model":"deepseek-r1"') for _, data in events)
    assert whole(b"data:x\n\n") == [(b"", b"x")]


def test_only_one_space_after_the_colon_is_dropped() -> None:
    assert whole(b"data:  two\n\n") == [(b"", b" two")]
    assert whole(b"data: \n\n") == [(b"", b"")]


def test_multi_line_data_is_joined_with_lf() -> None:
    assert whole(b'data: {"a":\ndata: 1}\n\n') == [(b"", b'{"a":\n1}')]
    assert whole(b"data: a\ndata:\ndata: c\n\n") == [(b"", b"a\n\nc")]


def test_the_event_field_names_the_event() -> None:
    events = whole(fixture("anthropic_text.sse"))
    assert [name for name, _ in events] == [
        b"message_start",
        b"content_block_start",
        b"ping",
        b"content_block_delta",
        b"content_block_delta",
        b"content_block_stop",
        b"message_delta",
        b"message_stop",
    ]
    assert whole(b"data: x\nevent: late\n\n") == [(b"late", b"x")]


def test_unknown_fields_are_ignored() -> None:
    assert whole(b"id: 7\nretry: 100\ndata: x\nfoo: bar\n\n") == [(b"", b"x")]


def test_an_event_without_data_is_not_dispatched() -> None:
    assert whole(b"event: ping\n\nid: 3\n\nretry: 9\n\n") == []


def test_the_legacy_llamacpp_error_field_is_not_an_event() -> None:
    # `error: {...}` is no SSE field: the only event is the [DONE] after it.
    assert whole(fixture("llamacpp_legacy_error_field.sse")) == [(b"", b"[DONE]")]


def test_done_without_a_trailing_blank_line_is_flushed_by_end() -> None:
    p = SSEParser()
    assert p.feed(fixture("llamacpp_legacy_error_field.sse")) == []
    assert p.end() == [(b"", b"[DONE]")]
    assert p.end() == []


def test_an_event_ending_in_one_line_end_is_flushed_by_end() -> None:
    p = SSEParser()
    events = p.feed(fixture("anthropic_error.sse"))
    assert events == []
    assert p.end() == [
        (
            b"error",
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
        )
    ]


def test_the_blank_lines_between_events_may_be_several() -> None:
    assert whole(b"\n\n\ndata: a\n\n\n\n\ndata: b\n\n\n") == [(b"", b"a"), (b"", b"b")]


def test_pending_counts_the_bytes_held_back() -> None:
    p = SSEParser()
    assert p.pending == 0
    p.feed(b"data: abc")
    assert p.pending == len(b"data: abc")
    p.feed(b"\n\n")
    assert p.pending == 0


def test_utf8_in_data_is_passed_through_as_bytes() -> None:
    events = whole(fixture("deepseek_reasoning.sse"))
    assert "打招呼".encode() in events[1][1]


def test_an_event_longer_than_max_event_raises_sse_error() -> None:
    p = SSEParser(max_event=16)
    p.feed(b"data: 0123456789")  # 16 bytes: at the limit, held
    with pytest.raises(SSEError):
        p.feed(b"x")


def test_an_event_growing_byte_by_byte_past_max_event_raises() -> None:
    with pytest.raises(SSEError):
        parse(bytewise(b"data: " + b"x" * 100), max_event=64)


def test_a_stream_without_blank_lines_cannot_grow_without_bound() -> None:
    p = SSEParser(max_event=64)
    with pytest.raises(SSEError):
        for _ in range(100):
            p.feed(b": keep-alive\n")


def test_an_event_at_max_event_is_accepted() -> None:
    assert parse([b"data: 0123456789", b"\n\n"], max_event=16) == [(b"", b"0123456789")]


def test_an_oversized_event_raises_however_the_reads_cut_it() -> None:
    # The limit is a property of the event, not of the reads it arrived in: the
    # same bytes must not fail byte by byte and pass in one read.
    data = b"data: " + b"x" * 100 + b"\n\n"
    with pytest.raises(SSEError):
        parse(bytewise(data), max_event=64)
    with pytest.raises(SSEError):
        parse([data], max_event=64)


def test_a_leading_utf8_bom_is_skipped() -> None:
    # WHATWG decodes the stream as UTF-8, which drops a leading BOM; kept, it
    # turns the first line's field name into "\ufeffdata" and the event is lost.
    assert whole(b"\xef\xbb\xbfdata: first\n\ndata: second\n\n") == [
        (b"", b"first"),
        (b"", b"second"),
    ]
