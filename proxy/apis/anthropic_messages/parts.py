"""A Messages request's text, image and document blocks as the wire's
``ContentPart``s: the one reading of them, for the edge (``translate``,
which writes a message holding an image or a document as parts) and the
stub (``backends.anthropic.stub_request``, which echoes them).

``block_parts`` appends a block's parts, every one of dialect
``ANTHROPIC_MESSAGES``:

- ``text``: a ``Text`` part;
- ``image``: an ``Image`` part whose source is its ``data`` (a ``base64``
  source, decoded by msgspec as the body was parsed) with its
  ``media_type``, its ``url`` (a ``url`` source, passed on as a URL: never
  fetched) or its ``file_id`` (a ``file`` source: Anthropic's Files API);
- ``document``: a ``Document`` part: a PDF's bytes (``base64``), a plain
  text (``text``: ``text`` and media type ``text/plain``), a URL, a file id,
  or (a ``content`` source) ``span`` N followed by the N parts of its
  blocks (a string content: one text part); with its ``title``,
  ``context`` and ``citations.enabled``.

Bytes are held to their declared media type (``apis.media.check_declared``:
a PNG declared as JPEG is a 400 naming the part); empty base64 data is a
400 too. A block's fields with no slot on a part (its ``cache_control``, a
text's ``citations``, and the fields flatgate does not know, given by the
caller) are the part's ``extras``: one JSON object text, as the client wrote
them (``{"cache_control":{"type":"ephemeral"}}``), which an Anthropic
backend merges into the block it writes. Failures are ``InvalidRequest``s
naming the block's path (``messages.0.content.1.source.data: ...``). Pure:
no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.anthropic_messages.blocks import (
    Base64Image,
    Base64Pdf,
    ContentSource,
    DocumentBlock,
    ImageBlock,
    TextBlock,
    TextSource,
    UrlSource,
)
from flatgate.proxy.apis.anthropic_messages.request import Fields, not_utf8
from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.apis.media import check_declared
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = ["MEDIA", "block_parts", "has_media"]

# The blocks that make a message one of parts.
MEDIA = (ImageBlock, DocumentBlock)
_ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
_TEXT = int(PartKind.TEXT)
_IMAGE = int(PartKind.IMAGE)
_DOCUMENT = int(PartKind.DOCUMENT)
_NULL = b"null"
_encode = msgspec.json.Encoder().encode


def has_media(blocks: list[object]) -> bool:
    """Whether ``blocks`` hold an image or a document."""
    return any(type(b) in MEDIA for b in blocks)


def _extras(
    block: TextBlock | ImageBlock | DocumentBlock, fields: Fields | None, where: str
) -> str:
    found: dict[str, msgspec.Raw] = {}
    if block.cache_control:
        found["cache_control"] = block.cache_control
    if type(block) is TextBlock and block.citations and bytes(block.citations) != _NULL:
        found["citations"] = block.citations
    if fields:
        found.update(fields)
    if not found:
        return ""
    try:
        return _encode(found).decode()
    except UnicodeDecodeError:
        raise not_utf8(where) from None


def _data(data: bytes, media_type: str, where: str) -> bytes:
    if not data:
        raise InvalidRequest(
            f"{where}: the base64 data is empty.", param=where, code=codes.INVALID_MEDIA
        )
    check_declared(data, media_type, where)
    return data


def _image(block: ImageBlock, where: str, extras: str) -> ContentPart:
    src = block.source
    if isinstance(src, Base64Image):
        data = _data(src.data, src.media_type, f"{where}.source.data")
        return ContentPart(
            _IMAGE, data=data, media_type=src.media_type, dialect=_ANTHROPIC, extras=extras
        )
    if isinstance(src, UrlSource):
        return ContentPart(_IMAGE, url=src.url, dialect=_ANTHROPIC, extras=extras)
    return ContentPart(_IMAGE, file_id=src.file_id, dialect=_ANTHROPIC, extras=extras)


def _document(block: DocumentBlock, where: str, extras: str, out: list[ContentPart]) -> None:
    src = block.source
    inner: list[ContentPart] = []
    data, text, media, url, file_id = b"", "", "", "", ""
    if isinstance(src, Base64Pdf):
        data = _data(src.data, src.media_type, f"{where}.source.data")
        media = src.media_type
    elif isinstance(src, TextSource):
        text, media = src.data, src.media_type
    elif isinstance(src, ContentSource):
        content = src.content
        blocks = [TextBlock(content)] if isinstance(content, str) else content
        for k, b in enumerate(blocks):
            block_parts(b, f"{where}.source.content.{k}", inner)
    elif isinstance(src, UrlSource):
        url = src.url
    else:
        file_id = src.file_id
    cites = block.citations
    out.append(
        ContentPart(
            _DOCUMENT,
            text=text,
            data=data,
            media_type=media,
            url=url,
            file_id=file_id,
            dialect=_ANTHROPIC,
            title=block.title or "",
            context=block.context or "",
            citations=bool(cites and cites.enabled),
            span=len(inner),
            extras=extras,
        )
    )
    out += inner


def block_parts(
    block: TextBlock | ImageBlock | DocumentBlock,
    where: str,
    out: list[ContentPart],
    fields: Fields | None = None,
) -> None:
    """Append ``block``'s parts to ``out`` (``where``: its path; ``fields``:
    its fields flatgate does not know, for its extras)."""
    extras = _extras(block, fields, where)
    kind = type(block)
    if kind is TextBlock:
        out.append(ContentPart(_TEXT, text=block.text, dialect=_ANTHROPIC, extras=extras))  # type: ignore[union-attr]
    elif kind is ImageBlock:
        out.append(_image(block, where, extras))  # type: ignore[arg-type]
    else:
        _document(block, where, extras, out)  # type: ignore[arg-type]
