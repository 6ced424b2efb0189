"""How many tokens a request's prompt is, estimated without a tokenizer.

Owns the one estimate flatgate uses wherever it must count a prompt before a
backend has: the edge's ``POST /v1/messages/count_tokens`` answers with it, and
the limits work reserves token budgets with it (on the ``CompletionRequest``
it routes, so both count exactly the same text)::

    tokens = ceil(UTF-8 bytes of the text the model reads / 4) + 4 per message
             + each non-text content part's tokens (below)

Why this and not a tokenizer: tokenizers are per model (Claude's is not
public, a Llama's differs from GPT's), loading one costs memory per worker
and running one costs tens of microseconds per kilobyte, while a gateway
routes one request shape to many models. Byte-pair encodings average close
to 4 bytes of English prose per token (OpenAI's rule of thumb is 4 characters,
Anthropic's about 3.5), and every chat template adds a few tokens per message
for the role and its delimiters (OpenAI's cookbook counts 3 to 4). It is an
estimate: within some tens of percent for prose, above the truth for dense
ASCII such as code and JSON, below it for CJK text (3 bytes a character and
about a token each). The text counted: every message's content (or its text
parts, and a document's text, title and context), each tool call's name and
arguments, and each tool definition's name, description and parameter schema.

Content parts (``Message.parts``), each by its kind and its bytes, read in
place (``wire.media``: a bounded prefix of the header, nothing decoded):

- an image, by its size in pixels and the formula of the provider whose API
  it came in (the part's ``dialect``): Anthropic's (docs.anthropic.com,
  "Vision", "Calculate image costs"): scaled down to fit a long edge of
  1,568 px and about 1,600 tokens (1.2 megapixels; its table's largest
  square, 1092 x 1092, is 1,590), then ``width * height / 750``
  (``anthropic_image_tokens``); OpenAI's for GPT-4o and the o-series
  (platform.openai.com, "Images and vision", "Calculating costs"):
  ``detail: low`` is 85; otherwise scaled to fit 2048 x 2048, then down so
  its shortest side is 768 px, 170 per 512 px tile plus 85
  (``openai_image_tokens``); a part of no dialect (an internal ``.fbs``
  caller's) the larger of the two. An image whose size the gateway cannot
  read (a URL, a file id, a header it does not know) counts as the largest
  its formula gives (``UNREAD_IMAGE_TOKENS``): a bound, as the limits want;
- a PDF, by a bound from its bytes, its pages not counted (that would read
  the whole file): one page per ``PDF_BYTES_PER_PAGE`` (at least one, at most
  ``PDF_MAX_PAGES``, both providers' page limit), ``PDF_PAGE_TOKENS`` a page
  (Anthropic, "PDF support": each page is its text, 1,500 to 3,000 tokens,
  and its image; OpenAI's file inputs likewise give the model each page's
  text and image);
- audio, by its length: the bytes over the byte rate its header says
  (``wire.media.audio_byte_rate``; 16,000 bytes a second, a 128 kbit/s MP3,
  when it says none) at ``AUDIO_TOKENS_PER_SECOND`` (OpenAI's realtime guide,
  "Managing costs": a token per 100 ms of a user's audio; the Chat
  Completions API's audio input documents no rate of its own);
- a plain-text document, or bytes of no media type the gateway knows: its
  bytes, as text;
- a document or file the gateway does not see (a URL, a file id) counts as
  one PDF page (``UNSEEN_DOCUMENT_TOKENS``), audio it does not see as
  ``UNSEEN_AUDIO_TOKENS``: the backend's usage says the truth afterwards.

Bounded, whatever the buffer: the proxy estimates a request before anything
verifies it, so ``estimate_request`` never raises on a buffer ``read_route``
accepted (an offset that leaves the buffer ends the count there), reads at
most ``MAX_OBJECTS`` tables, and counts at most ``max_bytes`` (default
``MAX_BYTES``, the verifier's bound on what a buffer expands to) of text and
parts: each part is charged its data's bytes and ``PART_BYTES`` (at least what
a part weighs unshared), once per reference, and parts stop counting where
that passes the bound. Offsets shared many times over (2,000 messages that
are one 256 KiB message, or 60,000 references to one image header that says
it is 10,000 px square) cannot make the estimate, and so a token
reservation, exceed that of an honest request of ``max_bytes``. A shared part
is read once (``wire.media``'s reads are bounded too), so sharing costs no
time either.

Pure: no I/O; ``estimate_request`` reads lengths and headers only (no string
is decoded).
"""

from __future__ import annotations

import math
import struct

from flatgate.proxy.wire.buffer import I8, I32, U16, U32, elements, entries, field_at
from flatgate.proxy.wire.layout import (
    COMPLETION_REQUEST,
    CONTENT_PART,
    MESSAGE,
    TOOL,
    TOOL_CALL,
)
from flatgate.proxy.wire.media import audio_byte_rate, image_size, sniff
from flatgate.proxy.wire.request.verify import MAX_BYTES, MAX_OBJECTS
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = [
    "AUDIO_TOKENS_PER_SECOND",
    "BYTES_PER_TOKEN",
    "PART_BYTES",
    "PDF_BYTES_PER_PAGE",
    "PDF_MAX_PAGES",
    "PDF_PAGE_TOKENS",
    "TOKENS_PER_MESSAGE",
    "UNREAD_IMAGE_TOKENS",
    "UNSEEN_AUDIO_TOKENS",
    "UNSEEN_DOCUMENT_TOKENS",
    "anthropic_image_tokens",
    "audio_tokens",
    "estimate_request",
    "estimate_tokens",
    "image_tokens",
    "openai_image_tokens",
    "pdf_tokens",
    "reservation",
]

BYTES_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4

# Anthropic: the long edge and the pixels an image is scaled down to fit.
ANTHROPIC_LONG_EDGE = 1568
ANTHROPIC_MAX_PIXELS = 1_200_000
ANTHROPIC_PIXELS_PER_TOKEN = 750
# OpenAI (GPT-4o, o-series): the square fitted, the shortest side, the tile.
OPENAI_FIT = 2048
OPENAI_SHORT_SIDE = 768
OPENAI_TILE = 512
OPENAI_TILE_TOKENS = 170
OPENAI_BASE_TOKENS = 85
_ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
_OPENAI = frozenset({int(ApiDialect.OPENAI_CHAT), int(ApiDialect.OPENAI_RESPONSES)})

PDF_BYTES_PER_PAGE = 64 << 10
PDF_MAX_PAGES = 100
# The middle of Anthropic's 1,500 to 3,000 text tokens, and the page's image.
PDF_PAGE_TOKENS = 2_250 + 1_600
AUDIO_TOKENS_PER_SECOND = 10
# Bytes a second of audio whose header says no rate: a 128 kbit/s MP3.
AUDIO_BYTES_PER_SECOND = 16_000
UNSEEN_DOCUMENT_TOKENS = PDF_PAGE_TOKENS
# A minute of audio.
UNSEEN_AUDIO_TOKENS = 60 * AUDIO_TOKENS_PER_SECOND
# What a part is charged against max_bytes besides its data: its uoffset in
# the parts vector, its smallest table and its data's length word (4 + 12 +
# 4), rounded up: no less than it weighs unshared.
PART_BYTES = 24

_R_MESSAGES = COMPLETION_REQUEST.voffset("messages")
_R_TOOLS = COMPLETION_REQUEST.voffset("tools")
_R_MAX_TOKENS = COMPLETION_REQUEST.voffset("max_tokens")
_R_N = COMPLETION_REQUEST.voffset("n")
_M_CONTENT = MESSAGE.voffset("content")
_M_CALLS = MESSAGE.voffset("tool_calls")
_M_PARTS = MESSAGE.voffset("parts")
_C_TEXT = (TOOL_CALL.voffset("name"), TOOL_CALL.voffset("arguments"))
_T_TEXT = (TOOL.voffset("name"), TOOL.voffset("description"), TOOL.voffset("parameters"))
_P_FIELDS = len(CONTENT_PART.fields)
_S_KIND, _S_DATA, _S_DIALECT, _S_DETAIL = (
    CONTENT_PART.slot(f) for f in ("kind", "data", "dialect", "detail")
)
# The strings a model reads as text: a text part's, a document's and its
# title and context.
_S_WORDS = tuple(CONTENT_PART.slot(f) for f in ("text", "title", "context"))
# The strings charged against max_bytes but not counted as text.
_S_REFS = tuple(CONTENT_PART.slot(f) for f in ("url", "file_id"))
_IMAGE = int(PartKind.IMAGE)
_AUDIO = int(PartKind.AUDIO)
_TEXT = int(PartKind.TEXT)


def anthropic_image_tokens(width: int, height: int) -> int:
    """Anthropic's tokens for an image of ``width`` x ``height`` px: scaled
    down (never up) to fit a long edge of 1,568 px and 1.2 megapixels,
    then ``width * height / 750``, rounded up."""
    pixels = width * height
    scale = min(1.0, ANTHROPIC_LONG_EDGE / max(width, height))
    scaled = min(pixels * scale * scale, ANTHROPIC_MAX_PIXELS)
    return math.ceil(scaled / ANTHROPIC_PIXELS_PER_TOKEN)


def openai_image_tokens(width: int, height: int, *, low: bool = False) -> int:
    """OpenAI's tokens for an image of ``width`` x ``height`` px (GPT-4o and
    the o-series): 85 at ``detail: low``; otherwise scaled down to fit 2048 x
    2048, then so that its shortest side is 768 px (never up), 170 for each
    512 px tile that covers it, plus 85."""
    if low:
        return OPENAI_BASE_TOKENS
    w, h = float(width), float(height)
    scale = min(1.0, OPENAI_FIT / max(w, h))
    w, h = w * scale, h * scale
    scale = min(1.0, OPENAI_SHORT_SIDE / min(w, h))
    tiles = math.ceil(w * scale / OPENAI_TILE) * math.ceil(h * scale / OPENAI_TILE)
    return OPENAI_BASE_TOKENS + OPENAI_TILE_TOKENS * tiles


# The largest each formula gives (an image whose size is not read).
_ANTHROPIC_MOST = math.ceil(ANTHROPIC_MAX_PIXELS / ANTHROPIC_PIXELS_PER_TOKEN)
_OPENAI_MOST = openai_image_tokens(OPENAI_SHORT_SIDE, OPENAI_FIT)
UNREAD_IMAGE_TOKENS = max(_ANTHROPIC_MOST, _OPENAI_MOST)


def image_tokens(size: tuple[int, int] | None, dialect: int, *, low: bool = False) -> int:
    """An image's tokens by the formula of ``dialect`` (``schema.ApiDialect``;
    unset: the larger of both), ``low`` its OpenAI ``detail``; ``size``
    ``None`` (or empty): the largest that formula gives."""
    anthropic = dialect == _ANTHROPIC or dialect not in _OPENAI
    openai = dialect != _ANTHROPIC
    if size is None or not size[0] or not size[1]:
        most = OPENAI_BASE_TOKENS if low else _OPENAI_MOST
        return max(_ANTHROPIC_MOST if anthropic else 0, most if openai else 0)
    w, h = size
    return max(
        anthropic_image_tokens(w, h) if anthropic else 0,
        openai_image_tokens(w, h, low=low) if openai else 0,
    )


def pdf_tokens(size: int) -> int:
    """A PDF of ``size`` bytes: a page per ``PDF_BYTES_PER_PAGE`` (1 to
    ``PDF_MAX_PAGES``), ``PDF_PAGE_TOKENS`` each."""
    pages = min(max(1, -(-size // PDF_BYTES_PER_PAGE)), PDF_MAX_PAGES)
    return pages * PDF_PAGE_TOKENS


def audio_tokens(data: bytes | memoryview, media_type: str = "") -> int:
    """Audio of ``data``: its seconds (bytes over the header's byte rate) at
    ``AUDIO_TOKENS_PER_SECOND``, rounded up."""
    rate = audio_byte_rate(data, media_type) or AUDIO_BYTES_PER_SECOND
    return -(-len(data) * AUDIO_TOKENS_PER_SECOND // rate)


def estimate_tokens(text_bytes: int, messages: int) -> int:
    """The estimate for ``text_bytes`` of UTF-8 text in ``messages`` messages."""
    return -(-text_bytes // BYTES_PER_TOKEN) + TOKENS_PER_MESSAGE * messages


def _length(buf: bytes | memoryview, table: int, voffset: int) -> int:
    """The byte length of the string field at ``voffset`` (0: absent)."""
    at = field_at(buf, table, voffset)
    if not at:
        return 0
    n: int = U32(buf, at + U32(buf, at)[0])[0]
    return n


def _tables(buf: bytes | memoryview, table: int, voffset: int, most: int) -> list[int]:
    """The tables of the vector field at ``voffset`` (none when absent), at
    most ``most`` of them."""
    at = field_at(buf, table, voffset)
    if not at or most <= 0:
        return []
    return elements(buf, at, most)


def _size_at(buf: bytes | memoryview, at: int) -> int:
    """The length word of the string or vector whose uoffset is at ``at``."""
    n: int = U32(buf, at + U32(buf, at)[0])[0]
    return n


def _part(buf: bytes | memoryview, view: memoryview, p: int) -> tuple[int, int, int]:
    """``(bytes charged, tokens, text bytes)`` of the ``ContentPart`` at ``p``;
    ``struct.error`` for an offset that leaves the buffer."""
    f = entries(buf, p, _P_FIELDS)
    off = f[_S_KIND]
    kind = I8(buf, p + off)[0] if off else _TEXT
    words = refs = 0
    for slot in _S_WORDS:
        if f[slot]:
            words += _size_at(buf, p + f[slot])
    for slot in _S_REFS:
        if f[slot]:
            refs += _size_at(buf, p + f[slot])
    charge = PART_BYTES + refs
    if kind == _TEXT:
        return charge, 0, words
    off = f[_S_DATA]
    data = None
    if off:
        a = p + off
        v = a + U32(buf, a)[0]
        n = U32(buf, v)[0]
        if v + 4 + n > len(buf):
            raise struct.error("part data past the buffer")
        data = view[v + 4 : v + 4 + n]
        charge += n
    if kind == _IMAGE:
        off = f[_S_DIALECT]
        dialect = I8(buf, p + off)[0] if off else 0
        off = f[_S_DETAIL]
        low = False
        if off:  # OpenAI's detail "low": its length word and bytes
            at = p + off + U32(buf, p + off)[0]
            low = bytes(view[at : at + 7]) == b"\x03\x00\x00\x00low"
        size = image_size(data) if data else None
        return charge, image_tokens(size, dialect, low=low), words
    if not data:  # a document's text or spanned parts, or what the gateway does not see
        if not refs:
            return charge, 0, words
        return charge, UNSEEN_AUDIO_TOKENS if kind == _AUDIO else UNSEEN_DOCUMENT_TOKENS, words
    media = sniff(data)
    if media == "application/pdf":
        return charge, pdf_tokens(len(data)), words
    if media.startswith("audio/") or kind == _AUDIO:
        return charge, audio_tokens(data, media), words
    if media.startswith("image/"):  # an image carried as a file
        return charge, image_tokens(image_size(data, media), 0), words
    return charge, 0, words + len(data)  # text, or bytes read as text


def estimate_request(buf: bytes | memoryview, *, max_bytes: int = MAX_BYTES) -> int:
    """The estimate for a ``CompletionRequest`` that ``read_route`` accepted,
    its text and parts counted up to ``max_bytes`` (see the module docstring)."""
    text = 0
    media = 0  # the tokens of parts
    spent = 0  # the bytes parts were charged
    messages: list[int] = []
    try:
        root = U32(buf, 0)[0]
        messages = _tables(buf, root, _R_MESSAGES, MAX_OBJECTS)
        left = MAX_OBJECTS - len(messages)
        u16, u32 = U16, U32
        seen: dict[int, tuple[int, int, int]] = {}
        full = False
        for m in messages:  # _length and field_at inlined: this loop is the cost
            vt = m - I32(buf, m)[0]
            size = u16(buf, vt)[0]
            off = u16(buf, vt + _M_CONTENT)[0] if size >= _M_CONTENT + 2 else 0
            if off:
                at = m + off
                text += u32(buf, at + u32(buf, at)[0])[0]
            if size >= _M_CALLS + 2 and u16(buf, vt + _M_CALLS)[0]:
                calls = _tables(buf, m, _M_CALLS, left)
                left -= len(calls)
                for call in calls:
                    text += sum(_length(buf, call, v) for v in _C_TEXT)
            if size >= _M_PARTS + 2 and u16(buf, vt + _M_PARTS)[0]:
                parts = _tables(buf, m, _M_PARTS, left)
                left -= len(parts)
                view = memoryview(buf)
                for p in parts:
                    counted = seen.get(p)
                    if counted is None:
                        counted = seen[p] = _part(buf, view, p)
                    charge, tokens, words = counted
                    if full or spent + charge + text + words > max_bytes:
                        full = True  # past what an honest request of max_bytes holds
                        text += words  # text is cut at the end, as content is
                        continue
                    spent += charge
                    media += tokens
                    text += words
        for tool in _tables(buf, root, _R_TOOLS, left):
            text += sum(_length(buf, tool, v) for v in _T_TEXT)
    except struct.error:  # an offset past the buffer: what was read so far
        pass
    room = max_bytes - spent
    return estimate_tokens(text if text < room else room, len(messages)) + media


def _root_int(buf: bytes | memoryview, voffset: int, default: int) -> int:
    """The root's int32 field at ``voffset``; ``default`` when absent or outside
    the buffer."""
    try:
        at = field_at(buf, U32(buf, 0)[0], voffset)
        value: int = I32(buf, at)[0] if at else default
    except struct.error:
        return default
    return value


def reservation(
    buf: bytes | memoryview, default_max_tokens: int, *, max_bytes: int = MAX_BYTES
) -> int:
    """The tokens a request may use at most, reserved against its tenant's
    token limits before it is sent: the prompt's estimate plus, for each of
    its ``n`` choices, its ``max_tokens`` (``default_max_tokens`` when it sets
    none). For a ``CompletionRequest`` that ``read_route`` accepted."""
    most = _root_int(buf, _R_MAX_TOKENS, 0)
    if most <= 0:
        most = default_max_tokens
    n = _root_int(buf, _R_N, 1)
    return estimate_request(buf, max_bytes=max_bytes) + most * max(n, 1)
