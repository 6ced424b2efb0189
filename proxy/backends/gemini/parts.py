"""A wire message's content parts as Gemini parts (the ``gemini`` and
``vertex`` backends' request, ``encode``'s contents).

``user_parts`` writes a user message's parts, in order:

- text: a ``text`` part (an empty one is left out);
- an image, audio, a document or a file with its bytes: ``inlineData`` with
  the bytes (base64 in the JSON) and their ``mimeType`` (the part's media
  type, ``image/jpg`` as ``image/jpeg``, else the one its magic numbers
  say; none known is refused naming the part);
- a part by URL (``gs://``, ``https://``, a Files API URI) or a Gemini file
  id (``files/...``, a part of the Gemini dialect): ``fileData`` with the
  URI and, when the part says it or the URL's extension does, its
  ``mimeType``; a ``data:`` URL never gets here (the edge decodes it); the
  file id of another provider (OpenAI's ``file-...``, Anthropic's) means
  nothing to Google and is refused naming the part;
- a document's text: a ``text`` part; a document made of span parts: their
  text parts (any other refused); its title, context and a file's name
  have no field and are named in ``omitted`` (``title``, ``context``,
  ``filename``), as are its ``citations`` (Gemini has no such switch);
- OpenAI's image ``detail`` (other than ``auto``) has no per-part field
  in the Gemini API and is named in ``omitted``;
- a part's extras: of the Gemini dialect, ``videoMetadata`` and
  ``mediaResolution`` are carried onto the part, any other field refused;
  another dialect's are judged as its top-level extras are
  (``backends.extras.report_all``: Anthropic's ``cache_control`` is named,
  prompt caching being implicit at Gemini).

``response_parts`` writes a tool result's parts: the text parts joined are
the result's text; any part with bytes of a known media type (an image, a
document, audio) is a ``functionResponse.parts`` entry (``inlineData``: Gemini 3's multimodal
function responses); anything else is refused.

What Gemini cannot take is refused with ``Untranslatable`` naming the part
(``messages[1].content[0]``), unless the backend's ``drop_unsupported``:
then it is left out and named so in ``omitted``. Pure: no I/O.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Sequence

import msgspec

from flatgate.proxy.apis.gemini.content import (
    Blob,
    FileData,
    FunctionResponseBlob,
    FunctionResponsePart,
    Part,
    VideoMetadata,
    b64,
)
from flatgate.proxy.backends.base import PartRefused, PartsOut
from flatgate.proxy.backends.extras import read_extras, report_all
from flatgate.proxy.wire.media import sniff
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = ["PartRefused", "Parts", "mime_of", "response_parts", "user_parts"]

_GEMINI = int(ApiDialect.GEMINI)
_TEXT = int(PartKind.TEXT)
_IMAGE = int(PartKind.IMAGE)
_AUDIO = int(PartKind.AUDIO)
_ALIASES = {"image/jpg": "image/jpeg", "audio/mp3": "audio/mpeg", "audio/x-wav": "audio/wav"}
_URL_SCHEMES = ("gs://", "https://", "http://")


class Parts(PartsOut):
    """What writing the parts reports: names left out; whether to drop."""

    __slots__ = ()
    target = "a gemini backend"


def mime_of(part: ContentPart) -> str:
    """The part's media type as Gemini names it, else its bytes' ("": none)."""
    media = part.media_type.lower().split(";")[0].strip()
    if not media and part.data:
        media = sniff(part.data)
    return _ALIASES.get(media, media)


def _uri_mime(part: ContentPart, uri: str) -> str | None:
    media = part.media_type.lower().split(";")[0].strip()
    if not media:
        media = mimetypes.guess_type(uri.split("?", maxsplit=1)[0])[0] or ""
    return _ALIASES.get(media, media) or None


def _by_reference(part: ContentPart, where: str, out: Parts) -> Part | None:
    if part.url:
        if not part.url.startswith(_URL_SCHEMES):
            out.refuse(where, "a URL that is not gs://, https:// or http://")
            return None
        return Part(file_data=FileData(part.url, _uri_mime(part, part.url)))
    if part.file_id:
        if part.dialect != _GEMINI:
            out.refuse(where, "another provider's file id")
            return None
        return Part(file_data=FileData(part.file_id, _uri_mime(part, part.file_id)))
    out.refuse(where, "a part with no data, URL or file id")
    return None


def _inline(part: ContentPart, where: str, out: Parts) -> Part | None:
    mime = mime_of(part)
    if not mime:
        out.refuse(where, "bytes of no known media type")
        return None
    return Part(inline_data=Blob(mime, b64(part.data)))


class _PartExtras(msgspec.Struct, rename="camel", gc=False):
    video_metadata: VideoMetadata | None = None
    media_resolution: msgspec.Raw = msgspec.Raw()


def _extras(part: ContentPart, made: Part, where: str, out: Parts) -> None:
    fields = read_extras(part.extras)
    if part.dialect != _GEMINI:
        report_all(fields, part.dialect, out.omitted, out.drop)
        return
    for name in fields:
        if name not in ("videoMetadata", "mediaResolution"):
            out.refuse(f"{where}.{name}", f"the part field '{name}'")
    try:
        own = msgspec.json.decode(part.extras, type=_PartExtras)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        out.refuse(where, f"part fields that are not Gemini's ({exc})")
        return
    made.video_metadata = own.video_metadata
    if len(own.media_resolution):  # an empty Raw is written as nothing: never set one
        made.media_resolution = own.media_resolution


def _document(
    part: ContentPart, inner: Sequence[ContentPart], where: str, out: Parts
) -> list[Part]:
    if part.title:
        out.omitted.append("title")
    if part.context:
        out.omitted.append("context")
    if part.citations:
        out.omitted.append("citations")
    if part.filename:  # the Gemini API takes no name with a blob (displayName is Vertex's)
        out.omitted.append("filename")
    if part.data:
        made = _inline(part, where, out)
        return [made] if made is not None else []
    if part.span:
        texts = []
        for k, p in enumerate(inner):
            if p.kind != _TEXT:
                out.refuse(f"{where}.content[{k}]", "a part other than text in a document")
            elif p.text:
                texts.append(Part(text=p.text))
        return texts
    if part.text:
        return [Part(text=part.text)]
    made = _by_reference(part, where, out)
    return [made] if made is not None else []


def user_parts(parts: Sequence[ContentPart], where: str, out: Parts) -> list[Part]:
    """``parts`` (of wire message ``where``) as Gemini parts, in order."""
    made: list[Part] = []
    k = 0
    n = len(parts)
    while k < n:
        part = parts[k]
        at = f"{where}.content[{k}]"
        kind = part.kind
        new: list[Part]
        if kind == _TEXT:
            new = [Part(text=part.text)] if part.text else []
        elif kind in (_IMAGE, _AUDIO):
            if part.detail and part.detail != "auto":
                out.omitted.append("detail")
            one = _inline(part, at, out) if part.data else _by_reference(part, at, out)
            new = [one] if one is not None else []
        else:  # a document, a file
            inner = parts[k + 1 : k + 1 + part.span] if part.span else ()
            new = _document(part, inner, at, out)
            k += part.span
        if part.extras and new:
            _extras(part, new[-1], at, out)
        made.extend(new)
        k += 1
    return made


def response_parts(
    parts: Sequence[ContentPart], where: str, out: Parts
) -> tuple[str, list[FunctionResponsePart]]:
    """A tool result's parts: its text, and its media as function-response parts."""
    texts: list[str] = []
    media: list[FunctionResponsePart] = []
    k = 0
    while k < len(parts):
        part = parts[k]
        at = f"{where}.content[{k}]"
        if part.kind == _TEXT:
            texts.append(part.text)
        elif part.span:
            inner = parts[k + 1 : k + 1 + part.span]
            texts.extend(p.text for p in inner if p.kind == _TEXT)
            k += part.span
        elif part.data and mime_of(part):
            blob = FunctionResponseBlob(mime_of(part), b64(part.data))
            media.append(FunctionResponsePart(inline_data=blob))
        elif part.text:
            texts.append(part.text)
        else:
            out.refuse(at, "a part other than text or bytes in a tool's result")
        k += 1
    return "".join(texts), media
