"""A Chat Completions message's content parts as the wire's ``ContentPart``
values: what an ``image_url``, ``input_audio`` or ``file`` part means, read
once for the edge (``edge_translator.openai.translate``) and for the stub
that serves the API (``backends.openai.stub_request``).

- ``text`` (and an assistant's ``refusal``): kind Text, its text;
- ``image_url``: a ``data:`` URL decoded (``apis.media.data_url``) to kind
  Image with its bytes and media type (an ``image/*`` one, held to the
  bytes' magic numbers: ``check_declared``); an ``https`` or ``http`` URL
  kept as ``url``, never fetched; any other scheme refused; ``detail``
  carried;
- ``input_audio``: its base64 ``data`` decoded (``decode_base64``) to kind
  Audio, the media type its ``format`` says (wav -> ``audio/wav``, mp3 ->
  ``audio/mpeg``), held to the bytes;
- ``file``: ``file_data`` (a data URL) decoded to kind Document (a PDF, a
  text file, any other type), or Image or Audio when its media type says
  so, with its ``filename``; ``file_id`` -> kind File, the id OpenAI's.

Every part carries ``dialect`` OpenAI Chat. A part that does not decode is
``InvalidRequest`` (code ``invalid_media``) naming the field in the
caller's notation (``messages.[0].content.[1].image_url.url``; the stub's is
``messages[0].content[1]...``: ``index``). Pure: no I/O.
"""

from __future__ import annotations

from flatgate.proxy.apis.errors import InvalidRequest, shown
from flatgate.proxy.apis.media import check_declared, data_url, decode_base64
from flatgate.proxy.apis.openai_chat.request import (
    ContentPart,
    FilePart,
    ImageUrlPart,
    InputAudioPart,
    RefusalPart,
    TextPart,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.parts import ContentPart as Part
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = ["AUDIO_TYPES", "has_media", "part_of", "parts_of"]

_CHAT = int(ApiDialect.OPENAI_CHAT)
_TEXT = int(PartKind.TEXT)
_IMAGE = int(PartKind.IMAGE)
_DOCUMENT = int(PartKind.DOCUMENT)
_AUDIO = int(PartKind.AUDIO)
_FILE = int(PartKind.FILE)
# ``input_audio.format`` -> its media type (and back: ``backends.openai``).
AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg"}
_TEXTUAL = (TextPart, RefusalPart)
_SCHEMES = ("https://", "http://")


def has_media(content: list[ContentPart]) -> bool:
    """Whether a content list holds a part that is not text."""
    return not all(type(p) in _TEXTUAL for p in content)


def _invalid(message: str, where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {message}", param=where, code=codes.INVALID_MEDIA)


def _kind_of(media: str) -> int:
    top = media.partition("/")[0]
    return _IMAGE if top == "image" else _AUDIO if top == "audio" else _DOCUMENT


def _image(part: ImageUrlPart, at: str) -> Part:
    url = part.image_url.url
    detail = part.image_url.detail or ""
    where = f"{at}.image_url.url"
    if url.startswith("data:"):
        media, data = data_url(url, where)
        if not media.startswith("image/"):
            got = shown(media)
            raise _invalid(f"expected an image's data URL, got one of type '{got}'.", where)
        check_declared(data, media, where)
        return Part(kind=_IMAGE, data=data, media_type=media, detail=detail, dialect=_CHAT)
    if url[:8].lower().startswith(_SCHEMES):
        return Part(kind=_IMAGE, url=url, detail=detail, dialect=_CHAT)
    raise _invalid(
        "expected an https or http URL, or a base64 data URL ('data:<media type>;base64,"
        f"<data>'), got '{shown(url[:40])}' (flatgate passes a URL on; it never fetches one).",
        where,
    )


def _audio(part: InputAudioPart, at: str) -> Part:
    audio = part.input_audio
    where = f"{at}.input_audio.data"
    data = decode_base64(audio.data, where)
    media = AUDIO_TYPES[audio.format]
    check_declared(data, media, where)
    return Part(kind=_AUDIO, data=data, media_type=media, dialect=_CHAT)


def _file(part: FilePart, at: str) -> Part:
    f = part.file
    filename = f.filename or ""
    if f.file_id:  # the request's check: one source of the two
        return Part(kind=_FILE, file_id=f.file_id, filename=filename, dialect=_CHAT)
    where = f"{at}.file.file_data"
    media, data = data_url(f.file_data or "", where)
    check_declared(data, media, where)
    return Part(kind=_kind_of(media), data=data, media_type=media, filename=filename, dialect=_CHAT)


def part_of(part: ContentPart, at: str) -> Part:
    """One content part as the wire's (``at``: its path, for the errors)."""
    if isinstance(part, TextPart):
        return Part(kind=_TEXT, text=part.text, dialect=_CHAT)
    if isinstance(part, RefusalPart):
        return Part(kind=_TEXT, text=part.refusal, dialect=_CHAT)
    if isinstance(part, ImageUrlPart):
        return _image(part, at)
    if isinstance(part, InputAudioPart):
        return _audio(part, at)
    return _file(part, at)


def parts_of(content: list[ContentPart], where: str, index: str = ".[{}]") -> list[Part]:
    """A message's content list as the wire's parts, in its order; ``where``
    is the content's path (``messages.[1].content``), ``index`` how a part's
    index is written after it."""
    return [part_of(p, where + index.format(j)) for j, p in enumerate(content)]
