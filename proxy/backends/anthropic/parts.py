"""A wire message's content parts as the content blocks an ``anthropic``
backend is sent (``adapter``'s messages, for a message with parts).

``part_blocks`` writes a user message's or a tool result's parts, in order:

- a text part: a ``text`` block (an empty one is left out, as the adapter
  leaves out every empty text);
- an image: an ``image`` block whose source is ``base64`` (the bytes,
  encoded here, with the part's media type when it is one of the four
  Anthropic takes, else the one its magic numbers say: OpenAI clients'
  ``image/jpg`` is ``image/jpeg``), ``url`` (the URL as it came: never
  fetched), or ``file`` (a file id of the Messages dialect: Anthropic's,
  which needs the ``files-api-2025-04-14`` beta, added to the request's
  betas); OpenAI's ``detail`` has no field in the Messages API and is left
  out, named ``detail`` (``auto`` means nothing and is not named);
- a document or a file: a ``document`` block whose source is ``base64`` (a
  PDF's bytes), ``text`` (a plain text, or bytes of a ``text/`` type that
  are UTF-8), ``content`` (a document part's ``span`` parts: its text and
  image blocks), ``url`` or ``file``, with its ``title`` (the part's, else
  its ``filename``), ``context`` and ``citations: {"enabled": true}``; a
  file whose bytes are an image is an ``image`` block;
- a part's ``extras``, when the part is of the Messages dialect, are merged
  into its block as the client wrote them (its ``cache_control`` and any
  field: spliced, never over a field this module writes); another
  dialect's are judged as that dialect's top-level extras are
  (``backends.extras.report_all``).

What the Messages API cannot take is refused with ``Untranslatable`` naming
the part (``messages[1].content[0]``: the wire message's index and the
part's), unless the backend's ``drop_unsupported``, then left out and named
so in ``omitted``: audio (Anthropic has no audio input), a file id of
another provider (an OpenAI ``file-...``), a file of a media type neither a
PDF, a text nor an image, and, in a system or an assistant message
(``text_of``: their text parts joined), any part but text. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from flatgate.proxy.apis.anthropic_messages.blocks import (
    Base64Image,
    Base64Pdf,
    Block,
    CitationsConfig,
    ContentSource,
    DocumentBlock,
    FileSource,
    ImageBlock,
    TextBlock,
    TextSource,
    UrlSource,
)
from flatgate.proxy.backends.base import PartRefused, PartsOut, Untranslatable
from flatgate.proxy.backends.extras import read_extras, report_all, splice
from flatgate.proxy.wire.media import IMAGE_TYPES, sniff
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = ["FILES_BETA", "PartRefused", "part_blocks", "text_of"]

# The beta Anthropic's file sources need (its Files API).
FILES_BETA = "files-api-2025-04-14"
_DIALECT = int(ApiDialect.ANTHROPIC_MESSAGES)
_TEXT = int(PartKind.TEXT)
_IMAGE = int(PartKind.IMAGE)
_DOCUMENT = int(PartKind.DOCUMENT)
_AUDIO = int(PartKind.AUDIO)
_PDF = "application/pdf"
_encode = msgspec.json.Encoder().encode
# The fields this module writes of an image and a document block, which a
# part's extras never replace.
_WRITES = {
    ImageBlock: frozenset(("type", "source")),
    DocumentBlock: frozenset(("type", "source", "title", "context", "citations")),
    TextBlock: frozenset(("type", "text")),
}


class _Out(PartsOut):
    """What writing the parts reports: names left out, betas needed."""

    __slots__ = ("betas",)
    target = "an anthropic backend"

    def __init__(self, omitted: list[str], betas: list[str], drop: bool) -> None:
        super().__init__(omitted, drop)
        self.betas = betas


def _file_id(part: ContentPart, where: str, out: _Out) -> FileSource | None:
    if part.dialect != _DIALECT:
        out.refuse(where, f"a file id of another provider ('{part.file_id[:40]}')")
        return None
    out.betas.append(FILES_BETA)
    return FileSource(part.file_id)


def _image(part: ContentPart, where: str, out: _Out) -> ImageBlock | None:
    if part.detail and part.detail != "auto":
        out.omitted.append("detail")
    if part.data:
        media = part.media_type
        if media not in IMAGE_TYPES:  # "image/jpg", or none: as the bytes say
            media = sniff(part.data) or media
        return ImageBlock(Base64Image(media, part.data))  # type: ignore[arg-type]
    if part.url:
        return ImageBlock(UrlSource(part.url))
    if part.file_id:
        source = _file_id(part, where, out)
        return ImageBlock(source) if source is not None else None
    out.refuse(where, "an image with no data, URL or file id")
    return None


def _data_source(part: ContentPart, where: str, out: _Out) -> Base64Pdf | TextSource | None:
    media = part.media_type or sniff(part.data)
    if media == _PDF:
        return Base64Pdf("application/pdf", part.data)
    if media.startswith("text/"):
        try:
            return TextSource(part.data.decode())
        except UnicodeDecodeError:
            pass
    out.refuse(where, f"a file of type '{media or 'unknown'}' (a document is a PDF or a text)")
    return None


def _document(
    part: ContentPart, inner: Sequence[ContentPart], where: str, out: _Out
) -> Block | None:
    if part.data and (part.media_type or sniff(part.data)).startswith("image/"):
        return _image(part, where, out)
    source: Base64Pdf | TextSource | ContentSource | UrlSource | FileSource | None
    if part.data:
        source = _data_source(part, where, out)
    elif part.span:
        blocks = part_blocks(inner, where, omitted=out.omitted, betas=out.betas, drop=out.drop)
        source = ContentSource(blocks)  # type: ignore[arg-type]
    elif part.text:
        source = TextSource(part.text)
    elif part.url:
        source = UrlSource(part.url)
    elif part.file_id:
        source = _file_id(part, where, out)
    else:
        out.refuse(where, "a document with no data, text, URL or file id")
        return None
    if source is None:
        return None
    return DocumentBlock(
        source,
        part.title or part.filename or None,
        part.context or None,
        CitationsConfig(True) if part.citations else None,
    )


def _merged(block: Block, part: ContentPart, where: str, out: _Out) -> Block:
    """``block`` with the part's extras: spliced in (Messages dialect), or
    judged as that dialect's fields."""
    fields = read_extras(part.extras)
    if part.dialect != _DIALECT:
        report_all(fields, part.dialect, out.omitted, out.drop)
        return block
    writes = _WRITES.get(type(block), frozenset())
    for name in fields:
        if name in writes:
            raise Untranslatable(f"{where}.extras: {name!r} is a field the adapter writes")
    spliced = splice(_encode(block), ((k, bytes(v)) for k, v in fields.items()))
    return msgspec.Raw(spliced)  # type: ignore[return-value]


def part_blocks(
    parts: Sequence[ContentPart],
    where: str,
    *,
    omitted: list[str],
    betas: list[str],
    drop: bool,
) -> list[Block]:
    """``parts`` (of wire message ``where``, or a document's span) as
    content blocks; a block with merged extras is its JSON (``msgspec.Raw``)."""
    blocks: list[Block] = []
    out = _Out(omitted, betas, drop)
    k = 0
    n = len(parts)
    while k < n:
        part = parts[k]
        at = f"{where}.content[{k}]"
        kind = part.kind
        block: Block | None = None
        if kind == _TEXT:
            block = TextBlock(part.text) if part.text else None
        elif kind == _IMAGE:
            block = _image(part, at, out)
        elif kind == _AUDIO:
            out.refuse(at, "audio (the Messages API takes no audio input)")
        else:  # a document, a file
            inner = parts[k + 1 : k + 1 + part.span] if part.span else ()
            block = _document(part, inner, at, out)
            k += part.span
        if block is not None:
            blocks.append(_merged(block, part, at, out) if part.extras else block)
        k += 1
    return blocks


def text_of(parts: Sequence[ContentPart], where: str, omitted: list[str], drop: bool) -> str:
    """A system or an assistant message's parts as its text (``PartsOut.text_of``)."""
    return _Out(omitted, [], drop).text_of(parts, where)
