"""The estimate of content parts: images by their pixel size and each
provider's formula, PDFs, audio and text documents, and its bounds against
shared offsets and hostile headers."""

from __future__ import annotations

import io
import wave

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.media import JPEG_SEGMENTS, audio_byte_rate, image_size
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.estimate import (
    AUDIO_TOKENS_PER_SECOND,
    PART_BYTES,
    PDF_BYTES_PER_PAGE,
    PDF_MAX_PAGES,
    PDF_PAGE_TOKENS,
    UNREAD_IMAGE_TOKENS,
    UNSEEN_DOCUMENT_TOKENS,
    anthropic_image_tokens,
    estimate_request,
    estimate_tokens,
    image_tokens,
    openai_image_tokens,
    pdf_tokens,
)
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.schema import ApiDialect, PartKind
from tests.proxy.part_requests import HUGE_HEADER, picture, request, shared_parts

ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
CHAT = int(ApiDialect.OPENAI_CHAT)
RESPONSES = int(ApiDialect.OPENAI_RESPONSES)


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("PNG", {}),
        ("JPEG", {}),
        ("JPEG", {"progressive": True}),
        ("GIF", {}),
        ("WEBP", {}),
        ("WEBP", {"lossless": True}),
    ],
)
def test_image_size_reads_the_header(fmt: str, options: dict[str, bool]) -> None:
    data = picture(fmt, 1000, 600, **options)
    assert image_size(data) == (1000, 600)
    assert image_size(memoryview(data)[:4096]) == (1000, 600)  # the header is enough


def image(
    data: bytes = b"",
    dialect: int = ANTHROPIC,
    *,
    detail: str = "",
    url: str = "",
    file_id: str = "",
) -> ContentPart:
    return ContentPart(
        kind=int(PartKind.IMAGE),
        data=data,
        dialect=dialect,
        detail=detail,
        url=url,
        file_id=file_id,
    )


# --- The formulas, at the providers' documented examples. ---


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        # docs.anthropic.com, Vision, "Calculate image costs": 200 x 200 ~54,
        # 1000 x 1000 ~1334, 1092 x 1092 ~1590; larger ones are scaled down
        # to about 1,600 tokens.
        ((200, 200), 54),
        ((1000, 1000), 1334),
        ((1092, 1092), 1590),
        ((4000, 3000), 1600),
        ((1568, 200), 419),
        ((3136, 400), 419),  # scaled to a 1,568 px long edge first
    ],
)
def test_anthropic_formula(size: tuple[int, int], tokens: int) -> None:
    assert anthropic_image_tokens(*size) == tokens


@pytest.mark.parametrize(
    ("size", "low", "tokens"),
    [
        # platform.openai.com, Images and vision, "Calculating costs".
        ((1024, 1024), False, 765),
        ((2048, 4096), False, 1105),
        ((4096, 8192), True, 85),
        ((512, 512), False, 255),  # never scaled up
        ((100, 5000), False, 765),  # 2048 long, 41 wide: 1 x 4 tiles
    ],
)
def test_openai_formula(size: tuple[int, int], low: bool, tokens: int) -> None:
    assert openai_image_tokens(*size, low=low) == tokens


def test_a_part_of_no_dialect_counts_the_larger() -> None:
    assert image_tokens((1000, 1000), 0) == 1334
    assert image_tokens((512, 2048), 0) == max(
        anthropic_image_tokens(512, 2048), openai_image_tokens(512, 2048)
    )
    assert image_tokens(None, 0) == UNREAD_IMAGE_TOKENS


# --- Images in a request, read in place. ---


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
@pytest.mark.parametrize("dialect", [ANTHROPIC, CHAT, RESPONSES])
def test_an_image_counts_by_its_pixels(fmt: str, dialect: int) -> None:
    data = picture(fmt, 1000, 600)
    buf = request([ContentPart(kind=int(PartKind.TEXT), text="what is it?"), image(data, dialect)])
    formula = (
        anthropic_image_tokens(1000, 600)
        if dialect == ANTHROPIC
        else openai_image_tokens(1000, 600)
    )
    assert estimate_request(buf) == estimate_tokens(len("what is it?"), 1) + formula


def test_openai_detail_low_is_85() -> None:
    data = picture("PNG", 3000, 2000)
    assert estimate_request(request([image(data, CHAT, detail="low")])) == 4 + 85
    assert estimate_request(request([image(data, CHAT, detail="high")])) == 4 + 1105
    assert estimate_request(request([image(data, CHAT, detail="auto")])) == 4 + 1105


@pytest.mark.parametrize(
    ("part", "tokens"),
    [
        (image(url="https://example.com/a.png"), 1600),
        (image(url="https://example.com/a.png", dialect=CHAT), 1445),
        (image(url="https://example.com/a.png", dialect=CHAT, detail="low"), 85),
        (image(file_id="file-1", dialect=RESPONSES), 1445),
        (image(b"\x89PNG\r\n\x1a\n but cut short"), 1600),
        (image(b"not an image at all"), 1600),
    ],
)
def test_an_image_of_no_readable_size_is_its_formulas_largest(
    part: ContentPart, tokens: int
) -> None:
    assert estimate_request(request([part])) == 4 + tokens


def test_a_pdf_counts_pages_by_its_bytes() -> None:
    pdf = b"%PDF-1.7\n" + b"x" * (3 * PDF_BYTES_PER_PAGE)
    doc = ContentPart(kind=int(PartKind.DOCUMENT), data=pdf, media_type="application/pdf")
    assert estimate_request(request([doc])) == 4 + 4 * PDF_PAGE_TOKENS
    assert pdf_tokens(1) == PDF_PAGE_TOKENS
    assert pdf_tokens(10**9) == PDF_MAX_PAGES * PDF_PAGE_TOKENS
    as_file = ContentPart(kind=int(PartKind.FILE), data=pdf, filename="a.pdf")
    assert estimate_request(request([as_file])) == 4 + 4 * PDF_PAGE_TOKENS


def test_a_text_document_counts_its_text_title_and_context() -> None:
    doc = ContentPart(
        kind=int(PartKind.DOCUMENT),
        text="x" * 400,
        media_type="text/plain",
        title="t" * 40,
        context="c" * 40,
    )
    assert estimate_request(request([doc])) == estimate_tokens(480, 1)
    plain = ContentPart(kind=int(PartKind.FILE), data=b"y" * 400, media_type="text/plain")
    assert estimate_request(request([plain])) == estimate_tokens(400, 1)


def test_a_document_of_parts_counts_its_parts() -> None:
    data = picture("PNG", 200, 200)
    doc = ContentPart(kind=int(PartKind.DOCUMENT), span=2, title="abcd")
    text = ContentPart(kind=int(PartKind.TEXT), text="x" * 8)
    assert estimate_request(request([doc, text, image(data)])) == estimate_tokens(12, 1) + 54


def test_documents_the_gateway_does_not_see_count_one_page() -> None:
    by_id = ContentPart(kind=int(PartKind.FILE), file_id="file-abc", dialect=CHAT)
    by_url = ContentPart(kind=int(PartKind.DOCUMENT), url="https://example.com/a.pdf")
    assert estimate_request(request([by_id, by_url])) == 4 + 2 * UNSEEN_DOCUMENT_TOKENS


def wav(seconds: float, rate: int = 24_000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(rate * seconds))
    return out.getvalue()


def test_audio_counts_its_seconds() -> None:
    data = wav(3.0)
    assert audio_byte_rate(data) == 48_000
    part = ContentPart(kind=int(PartKind.AUDIO), data=data, media_type="audio/wav")
    seconds = len(data) / 48_000  # the header's 44 bytes round it up a token
    assert estimate_request(request([part])) == 4 + -(-int(seconds * 10 * 1000) // 1000)
    assert estimate_request(request([part])) == 4 + 3 * AUDIO_TOKENS_PER_SECOND + 1


def test_an_mp3_rate_is_its_first_frame_s() -> None:
    frame = bytes.fromhex("fffb9064") + bytes(400)  # MPEG-1 layer III, 128 kbit/s
    assert audio_byte_rate(frame) == 16_000
    tag = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10)
    assert audio_byte_rate(tag + frame) == 16_000
    assert audio_byte_rate(tag + bytes.fromhex("fff39064") + bytes(400)) == 10_000  # MPEG-2
    assert audio_byte_rate(b"ID3" + bytes(20)) is None


# --- Bounds. ---


def test_shared_image_parts_count_no_more_than_an_honest_request_of_max_bytes() -> None:
    """60,000 references to one 24-byte header of a 10,000 px square image:
    counted while their charge (data and PART_BYTES each) fits max_bytes, as
    many as distinct parts of that size would fit in an honest request."""
    max_bytes = 256 << 10
    buf = shared_parts(60_000, HUGE_HEADER)
    assert len(buf) < max_bytes  # the buffer is small: its expansion is not
    read_route(buf)
    counted = max_bytes // (PART_BYTES + len(HUGE_HEADER))
    assert estimate_request(buf, max_bytes=max_bytes) == 4 + counted * 1600
    # An honest request of those parts, unshared, weighs at least max_bytes.
    honest = request([image(HUGE_HEADER)] * counted)
    assert len(honest) > max_bytes - 4096
    assert estimate_request(honest, max_bytes=len(honest)) == estimate_request(
        buf, max_bytes=max_bytes
    )


def test_parts_and_text_share_the_bound() -> None:
    data = picture("PNG", 100, 100)
    parts = [ContentPart(kind=int(PartKind.TEXT), text="x" * 1000), image(data), image(data)]
    buf = request(parts)
    whole = estimate_request(buf)
    assert whole == estimate_tokens(1000, 1) + 2 * anthropic_image_tokens(100, 100)
    one = PART_BYTES + len(data)
    # Room for the text part and one image: the second is not counted.
    assert estimate_request(
        buf, max_bytes=PART_BYTES + 1000 + one
    ) == whole - anthropic_image_tokens(100, 100)
    # Room for less than the text: the text is cut at max_bytes, no image counted.
    assert estimate_request(buf, max_bytes=400) == estimate_tokens(400, 1)


def test_a_jpeg_header_walk_is_bounded() -> None:
    """Fill bytes and empty segments cost a step each: past JPEG_SEGMENTS of
    them the frame header is given up on, however far the buffer goes."""
    sof = b"\xff\xc0\x00\x11\x08\x00\x20\x00\x40" + bytes(14)
    near = b"\xff\xd8" + b"\xff" * (JPEG_SEGMENTS - 2) + sof
    far = b"\xff\xd8" + b"\xff" * (JPEG_SEGMENTS + 1) + sof
    assert image_size(near) == (64, 32)
    assert image_size(far) is None
    empty = b"\xff\xfe\x00\x02"  # a COM segment of no bytes
    assert image_size(b"\xff\xd8" + empty * (JPEG_SEGMENTS + 1) + sof) is None


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_it_never_raises_on_a_buffer_read_route_accepts(data: st.DataObject) -> None:
    doc = ContentPart(kind=int(PartKind.DOCUMENT), data=b"%PDF-1.4 " + bytes(64))
    audio = ContentPart(kind=int(PartKind.AUDIO), data=wav(0.01))
    buf = bytearray(request([image(picture("PNG", 40, 30), CHAT, detail="low"), doc, audio]))
    cut = data.draw(st.integers(16, len(buf)))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(8, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    hostile = bytes(buf[:cut])
    try:
        read_route(hostile)
    except MalformedBuffer:
        return
    assert estimate_request(hostile) >= 0
