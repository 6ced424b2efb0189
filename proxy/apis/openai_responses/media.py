"""A Responses message's content parts as the wire's ``ContentPart``s: what
an ``input_image`` or ``input_file`` part means, once, for the edge (which
writes them) and the stub (which reads back what an adapter wrote).

Owns ``content_parts`` (and ``has_media``, whether a list of parts holds
more than text). Each part becomes one ``ContentPart`` of dialect
``OpenAIResponses``, in the client's order:

- ``input_text``, ``output_text``, ``refusal``: a text part;
- ``input_image``: an image, from one source: ``image_url`` as a
  ``data:`` URL (its base64 decoded here, once: the raw bytes with the
  declared media type, which must be an image type and agree with the
  bytes' magic numbers), ``image_url`` as an ``http(s)`` URL (carried as a
  URL, never fetched), or ``file_id`` (an OpenAI file); ``detail`` kept;
- ``input_file``: ``file_data``, a ``data:`` URL (decoded, as an image's:
  a document of its media type), ``file_url`` (a document by URL) or
  ``file_id`` (a file by id); ``filename`` and ``detail`` kept. OpenAI's
  guide documents ``file_data`` as a data URL (and OpenAI answers a bare
  base64 string with a 400 asking for one): a bare string is refused the
  same way, naming the part;
- ``input_audio`` is not a Responses part (the API takes text, images and
  files; audio input is Chat Completions'): refused,
  ``unsupported_content_type``.

A part with no source, two sources, a URL of another scheme, a malformed
data URL or base64, or bytes that are not what they are declared as is an
``InvalidRequest`` whose ``param`` is the part's field in the edge's
notation (``input.[1].content.[0].image_url``). ``check_part`` says what
can be said without decoding (the sources, the schemes), when the request
is decoded; the data is decoded once, when it is written. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.apis.media import check_declared, data_url
from flatgate.proxy.apis.openai_responses.items import (
    InputAudio,
    InputFile,
    InputImage,
    InputText,
    OutputText,
    Part,
    Refusal,
)
from flatgate.proxy.apis.openai_responses.tools import invalid, missing
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = ["audio_refused", "check_part", "content_parts", "has_media"]

_DIALECT = int(ApiDialect.OPENAI_RESPONSES)
_TEXT, _IMAGE, _DOCUMENT, _FILE = (
    int(k) for k in (PartKind.TEXT, PartKind.IMAGE, PartKind.DOCUMENT, PartKind.FILE)
)
_WEB = ("https://", "http://")
_DATA = "data:"
_IMAGE_SOURCES = ("image_url", "file_id")
_FILE_SOURCES = ("file_data", "file_url", "file_id")


def has_media(parts: Sequence[Part]) -> bool:
    """Whether ``parts`` hold an image or a file (else the text path serves)."""
    return any(isinstance(p, InputImage | InputFile) for p in parts)


def audio_refused(param: str) -> InvalidRequest:
    """The 400 for an ``input_audio`` part (at ``param``, its ``type``)."""
    return InvalidRequest(
        "Content parts of type 'input_audio' are not supported by the Responses API (it "
        "takes text, images and files): send audio as a Chat Completions input_audio part.",
        param=param,
        code=codes.UNSUPPORTED_CONTENT_TYPE,
    )


def _source(part: InputImage | InputFile, where: str) -> str:
    """The one source field ``part`` gives (empty strings count as absent),
    its URL's scheme checked: what can be said without decoding anything."""
    names = _IMAGE_SOURCES if isinstance(part, InputImage) else _FILE_SOURCES
    given = [n for n in names if getattr(part, n)]
    if not given:
        raise missing(f"{where}.{names[0]}")
    if len(given) > 1:
        raise invalid(f"{where}.{given[1]}", f"give only one of {', '.join(names)}.")
    source: str = given[0]
    value: str = getattr(part, source)
    if source == "image_url" and not value.startswith((_DATA, *_WEB)):
        raise invalid(f"{where}.{source}", "expected an http(s) URL or a base64-encoded data URL.")
    if source == "file_url" and not value.startswith(_WEB):
        raise invalid(f"{where}.{source}", "expected an http(s) URL.")
    if source == "file_data" and not value.startswith(_DATA):
        data_url(value, f"{where}.{source}")  # raises, saying what a data URL is
    return source


def check_part(part: InputImage | InputFile, where: str) -> None:
    """``part`` (at ``where``: ``input.[1].content.[0]``) checked as far as
    it can be without decoding its data (the request's decode calls it:
    ``content_parts`` decodes, when the request is written)."""
    _source(part, where)


def _decoded(url: str, param: str, *, image: bool) -> tuple[str, bytes]:
    media, data = data_url(url, param)
    if image and not media.startswith("image/"):
        raise InvalidRequest(
            f"{param}: the data URL's media type is '{media}', not an image type.",
            param=param,
            code=codes.INVALID_MEDIA,
        )
    check_declared(data, media, param)
    return media, data


def _image(part: InputImage, where: str) -> ContentPart:
    detail = part.detail or ""
    if _source(part, where) == "file_id":
        return ContentPart(kind=_IMAGE, file_id=part.file_id or "", dialect=_DIALECT, detail=detail)
    url = part.image_url or ""
    param = f"{where}.image_url"
    if url.startswith(_DATA):
        media, data = _decoded(url, param, image=True)
        return ContentPart(
            kind=_IMAGE, data=data, media_type=media, dialect=_DIALECT, detail=detail
        )
    return ContentPart(kind=_IMAGE, url=url, dialect=_DIALECT, detail=detail)


def _file(part: InputFile, where: str) -> ContentPart:
    name = part.filename or ""
    detail = part.detail or ""
    source = _source(part, where)
    if source == "file_id":
        return ContentPart(
            kind=_FILE, file_id=part.file_id or "", dialect=_DIALECT, filename=name, detail=detail
        )
    if source == "file_url":
        url = part.file_url or ""
        return ContentPart(kind=_DOCUMENT, url=url, dialect=_DIALECT, filename=name, detail=detail)
    media, data = _decoded(part.file_data or "", f"{where}.file_data", image=False)
    return ContentPart(
        kind=_DOCUMENT,
        data=data,
        media_type=media,
        dialect=_DIALECT,
        filename=name,
        detail=detail,
    )


def content_parts(parts: Sequence[Part], where: str, index: str = ".[{}]") -> list[ContentPart]:
    """``parts`` (at ``where``: ``input.[1].content``) as the wire's parts;
    ``InvalidRequest`` naming the part that cannot be one (its index
    written as ``index`` writes it: the stub passes OpenAI's ``[{}]``)."""
    out: list[ContentPart] = []
    for j, part in enumerate(parts):
        at = where + index.format(j)
        if isinstance(part, InputText | OutputText):
            out.append(ContentPart(kind=_TEXT, text=part.text, dialect=_DIALECT))
        elif isinstance(part, Refusal):
            out.append(ContentPart(kind=_TEXT, text=part.refusal, dialect=_DIALECT))
        elif isinstance(part, InputImage):
            out.append(_image(part, at))
        elif isinstance(part, InputFile):
            out.append(_file(part, at))
        elif isinstance(part, InputAudio):
            raise audio_refused(f"{at}.type")
        else:
            raise invalid(f"{at}.type", f"'{part.__struct_config__.tag}' is not a message part.")
    return out
