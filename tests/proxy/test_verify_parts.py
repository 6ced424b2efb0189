"""The verifier's bounds on content parts: spans that hold, the parts' bytes
against max_bytes (once per reference), their number against max_objects."""

from __future__ import annotations

import pytest

from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import PartKind
from tests.proxy.part_requests import HUGE_HEADER, request, shared_parts

DOC = int(PartKind.DOCUMENT)
TEXT = ContentPart(kind=int(PartKind.TEXT), text="page one")
IMAGE = ContentPart(kind=int(PartKind.IMAGE), data=HUGE_HEADER, media_type="image/png")


def test_a_document_spanning_the_parts_after_it_is_taken() -> None:
    doc = ContentPart(kind=DOC, span=2, title="report")
    buf = request([doc, TEXT, IMAGE, TEXT], [doc, TEXT, IMAGE])
    verify_request(buf)
    parts = read_request(buf).messages[0].parts
    assert parts is not None
    assert [p.span for p in parts] == [2, 0, 0, 0]


@pytest.mark.parametrize(
    ("parts", "check"),
    [
        (
            [ContentPart(kind=DOC, span=3), TEXT, TEXT],
            "messages[0].parts[0].span: span 3 past the 2 parts after it",
        ),
        (
            [TEXT, ContentPart(kind=DOC, span=1)],
            "messages[0].parts[1].span: span 1 past the 0 parts after it",
        ),
        (
            [ContentPart(kind=DOC, span=-1), TEXT],
            "messages[0].parts[0].span: span -1 past",
        ),
        (
            [ContentPart(kind=int(PartKind.IMAGE), span=1, data=HUGE_HEADER), TEXT],
            "messages[0].parts[0].span: span 1 on a part of kind 1: only a Document spans parts",
        ),
        (
            [ContentPart(kind=DOC, span=2), ContentPart(kind=DOC, span=1), TEXT],
            "messages[0].parts[1].span: span 1 on a document inside another document's span",
        ),
    ],
)
def test_a_span_that_does_not_hold_is_refused(parts: list[ContentPart], check: str) -> None:
    with pytest.raises(MalformedBuffer) as failed:
        verify_request(request(parts, checked=False))
    assert f"CompletionRequest.{check}" in str(failed.value)


def test_a_parts_data_counts_toward_max_bytes() -> None:
    big = ContentPart(kind=int(PartKind.IMAGE), data=bytes(100_000), media_type="image/png")
    buf = request([big])
    verify_request(buf, max_bytes=100_100)
    with pytest.raises(MalformedBuffer, match=r"max_bytes"):
        verify_request(buf, max_bytes=99_000)


def test_a_shared_part_is_charged_once_per_reference() -> None:
    """1,000 references to one 24-byte image: 24 KB of data decoded from a
    buffer of 4 KB, held to what its copies would weigh."""
    buf = shared_parts(1000, HUGE_HEADER)
    assert len(buf) < 5_000
    verify_request(buf, max_bytes=30_000)
    with pytest.raises(MalformedBuffer, match=r"max_bytes"):
        verify_request(buf, max_bytes=20_000)


def test_the_parts_count_is_bounded_by_max_objects() -> None:
    buf = shared_parts(1000, HUGE_HEADER)
    verify_request(buf, max_objects=2_100)
    with pytest.raises(MalformedBuffer, match=r"max_objects"):
        verify_request(buf, max_objects=1_500)
