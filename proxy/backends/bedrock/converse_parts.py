"""A wire message's content parts as Converse content blocks (the
``bedrock`` backend's Converse request, ``converse``'s messages).

``part_blocks`` writes a user message's or a tool result's parts, in order:

- text: a ``text`` block (an empty one is left out: Converse refuses blank
  text);
- an image: an ``image`` block with the bytes (``source.bytes``, base64 in
  the JSON) and its ``format`` (png, jpeg, gif or webp: the part's media
  type, else the one its magic numbers say, so OpenAI clients'
  ``image/jpg`` is ``jpeg``), or an ``s3://`` URL as ``source.s3Location``;
  an http(s) URL cannot be sent (Converse never fetches one: it takes bytes
  or an S3 object) and is refused naming the part; OpenAI's ``detail`` has
  no field and is named in ``omitted`` (``auto`` means nothing);
- a document or a file: a ``document`` block with its ``name`` (the part's
  title, else its filename, else ``document-<n>``, in the characters the
  service allows), ``format`` (pdf, csv, doc, docx, xls, xlsx, html, txt, md,
  from the media type, else the magic numbers), ``context`` and
  ``citations``, its source the bytes, an ``s3://`` URL, the part's text
  (``source.text``) or a document's span parts (``source.content``: text
  only); a file whose bytes are an image is an ``image`` block;
- audio: an ``audio`` block with the bytes or an ``s3://`` URL and its
  ``format`` (mp3, wav, ogg, flac, aac, webm, m4a, opus, from the media type);
- a part's extras of the Messages dialect: its ``cache_control`` becomes a
  ``cachePoint`` block after it (``ttl`` ``5m`` or ``1h`` carried); any other
  of its fields has no place in Converse and is refused (or dropped); another
  dialect's are judged as that dialect's top-level extras are
  (``backends.extras.report_all``).

What Converse cannot take is refused with ``Untranslatable`` naming the part
(``messages[1].content[0]``: the wire message's index and the part's),
unless the backend's ``drop_unsupported``, then left out and named so in
``omitted``: a URL that is not ``s3://``, a file id (Converse has no files
API), a media type it has no format for, audio in a tool result, and, in a
system or an assistant message (``PartsOut.text_of``), any part but text. Pure: no
I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from flatgate.proxy.apis.bedrock_converse.blocks import (
    AudioBlock,
    CachePoint,
    CitationsConfig,
    ContentBlock,
    DocumentBlock,
    DocumentSource,
    DocumentText,
    ImageBlock,
    MediaSource,
    S3Location,
)
from flatgate.proxy.backends.base import PartRefused, PartsOut, Untranslatable
from flatgate.proxy.backends.extras import read_extras, report_all
from flatgate.proxy.wire.media import sniff
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = ["PartRefused", "Parts", "cache_point", "part_blocks"]

_MESSAGES = int(ApiDialect.ANTHROPIC_MESSAGES)
_TEXT = int(PartKind.TEXT)
_IMAGE = int(PartKind.IMAGE)
_AUDIO = int(PartKind.AUDIO)
_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
_DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
}
_AUDIO_FORMATS = {
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/ogg": "ogg",
    "audio/flac": "flac",
    "audio/aac": "aac",
    "audio/webm": "webm",
    "audio/mp4": "m4a",
    "audio/m4a": "m4a",
    "audio/x-m4a": "m4a",
    "audio/opus": "opus",
}
_TTLS = frozenset({"5m", "1h"})
# A document's name: alphanumerics, whitespace (never two in a row),
# hyphens, parentheses and square brackets, at most 200 characters (the
# service's rule; anything else would be refused by it).
_NAME_OUT = re.compile(r"[^A-Za-z0-9\s\-()\[\]]+")
_SPACES = re.compile(r"\s+")


class Parts(PartsOut):
    """What writing the parts reports: names left out; whether to drop."""

    __slots__ = ()
    target = "a bedrock backend's Converse API"


def _s3(url: str) -> S3Location | None:
    return S3Location(url) if url.startswith("s3://") else None


def _media(part: ContentPart) -> str:
    return (part.media_type or sniff(part.data)).lower().split(";")[0].strip()


def _image(part: ContentPart, where: str, out: Parts) -> ContentBlock | None:
    if part.detail and part.detail != "auto":
        out.omitted.append("detail")
    if part.data:
        fmt = _IMAGE_FORMATS.get(part.media_type.lower()) or _IMAGE_FORMATS.get(sniff(part.data))
        if fmt is None:
            out.refuse(where, f"an image of type '{part.media_type or 'unknown'}'")
            return None
        return ContentBlock(image=ImageBlock(fmt, MediaSource(data=part.data)))
    if part.url:
        s3 = _s3(part.url)
        fmt = _IMAGE_FORMATS.get(part.media_type.lower())
        if s3 is None or fmt is None:
            why = "an image by URL (Converse takes an image's bytes or an s3:// location)"
            out.refuse(where, why if s3 is None else "an image in S3 of no known type")
            return None
        return ContentBlock(image=ImageBlock(fmt, MediaSource(s3_location=s3)))
    out.refuse(where, "a file id" if part.file_id else "an image with no data or URL")
    return None


def _name(part: ContentPart, n: int) -> str:
    name = _NAME_OUT.sub(" ", part.title or part.filename)
    name = _SPACES.sub(" ", name).strip()[:200].strip()
    return name or f"document-{n}"


def _document(
    part: ContentPart, inner: Sequence[ContentPart], where: str, n: int, out: Parts
) -> ContentBlock | None:
    media = _media(part) if part.data else part.media_type.lower()
    if part.data and media.startswith("image/"):
        return _image(part, where, out)
    fmt: str | None = _DOCUMENT_FORMATS.get(media)
    if part.data:
        if fmt is None:
            out.refuse(where, f"a document of type '{media or 'unknown'}'")
            return None
        source = DocumentSource(data=part.data)
    elif part.span:
        texts = []
        for k, p in enumerate(inner):
            if p.kind != _TEXT:
                out.refuse(f"{where}.content[{k}]", "a part other than text in a document")
            elif p.text:
                texts.append(DocumentText(p.text))
        source = DocumentSource(content=texts)
        fmt = fmt or "txt"
    elif part.text:
        source = DocumentSource(text=part.text)
        fmt = fmt or "txt"
    elif part.url:
        s3 = _s3(part.url)
        if s3 is None:
            out.refuse(where, "a document by URL (Converse takes its bytes or an s3:// location)")
            return None
        source = DocumentSource(s3_location=s3)
    else:
        out.refuse(where, "a file id" if part.file_id else "a document with no data, text or URL")
        return None
    return ContentBlock(
        document=DocumentBlock(
            _name(part, n),
            source,
            fmt,
            part.context or None,
            CitationsConfig(True) if part.citations else None,
        )
    )


def _audio(part: ContentPart, where: str, out: Parts) -> ContentBlock | None:
    fmt = _AUDIO_FORMATS.get(part.media_type.lower().split(";")[0].strip())
    if fmt is None:
        out.refuse(where, f"audio of type '{part.media_type or 'unknown'}'")
        return None
    if part.data:
        return ContentBlock(audio=AudioBlock(fmt, MediaSource(data=part.data)))
    s3 = _s3(part.url)
    if s3 is None:
        out.refuse(where, "audio by URL or file id (Converse takes its bytes or an s3:// location)")
        return None
    return ContentBlock(audio=AudioBlock(fmt, MediaSource(s3_location=s3)))


class _CacheControl(msgspec.Struct, gc=False):
    type: str = "ephemeral"
    ttl: str | None = None


_decode_cache_control = msgspec.json.Decoder(_CacheControl).decode


def cache_point(raw: bytes | msgspec.Raw, where: str) -> CachePoint:
    """A Messages ``cache_control`` object as a Converse cache point (its
    ``ttl`` carried: Converse takes ``5m`` and ``1h``, as Anthropic does)."""
    try:
        cc = _decode_cache_control(raw)
    except msgspec.DecodeError:
        raise Untranslatable(f"{where}.cache_control: not a cache_control object") from None
    if cc.ttl is not None and cc.ttl not in _TTLS:
        raise Untranslatable(f"{where}.cache_control.ttl: Converse takes '5m' or '1h'")
    return CachePoint("default", cc.ttl)


def _extras(part: ContentPart, where: str, out: Parts) -> CachePoint | None:
    """The part's extras: its cache_control as a cache point; the rest refused."""
    fields = read_extras(part.extras)
    if part.dialect != _MESSAGES:
        report_all(fields, part.dialect, out.omitted, out.drop)
        return None
    point = None
    for name, raw in fields.items():
        if name == "cache_control":
            point = cache_point(raw, where)
        elif not out.drop:
            raise PartRefused(f"{where}.{name}", f"the block field '{name}'", Parts.target)
        else:
            out.omitted.append(f"{where}.{name}")
    return point


def part_blocks(
    parts: Sequence[ContentPart], where: str, out: Parts, *, tool_result: bool = False
) -> list[ContentBlock]:
    """``parts`` (of wire message ``where``) as content blocks, a cache
    point after a part that asked for one; ``tool_result``: the parts of a
    tool's result (no audio there)."""
    blocks: list[ContentBlock] = []
    k = 0
    n = len(parts)
    documents = 0
    while k < n:
        part = parts[k]
        at = f"{where}.content[{k}]"
        kind = part.kind
        block: ContentBlock | None = None
        if kind == _TEXT:
            block = ContentBlock(text=part.text) if part.text else None
        elif kind == _IMAGE:
            block = _image(part, at, out)
        elif kind == _AUDIO:
            if tool_result:
                out.refuse(at, "audio in a tool's result")
            else:
                block = _audio(part, at, out)
        else:  # a document, a file
            inner = parts[k + 1 : k + 1 + part.span] if part.span else ()
            documents += 1
            block = _document(part, inner, at, documents, out)
            k += part.span
        if block is not None:
            blocks.append(block)
            if part.extras:
                point = _extras(part, at, out)
                if point is not None:
                    blocks.append(ContentBlock(cache_point=point))
        k += 1
    return blocks
