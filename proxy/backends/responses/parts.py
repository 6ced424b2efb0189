"""A wire message's content parts as the Responses API's: what the
``openai-responses`` adapter writes for a message (or a tool result) that
holds more than text.

Owns ``written_parts``, one ``ContentPart`` (``wire.parts``) at a time, in
the message's order:

- text -> ``input_text``;
- an image: its bytes -> ``input_image`` with ``image_url`` a ``data:`` URL
  (``apis.media.encode_data_url``: the one base64 encode, here), a URL ->
  ``image_url`` as it is (never fetched), an OpenAI file id (a part of the
  Chat Completions or Responses dialect) -> ``file_id``; ``detail`` as sent
  (``auto`` when none: OpenAI's default, which its SDK types require);
- a document or a file: its bytes -> ``input_file`` with ``file_data`` a
  ``data:`` URL and a ``filename`` (the part's, else its ``title``, else
  ``document`` with the media type's extension), a URL -> ``file_url``, an
  OpenAI file id -> ``file_id``; ``detail`` when it is one ``input_file``
  takes; a document's ``context``, when it has one, goes before it as an
  ``input_text``;
- a plain-text document (Anthropic's ``text`` source) -> one
  ``input_text``: its title, context and text in that order, a blank line
  between;
- a document made of parts (Anthropic's ``content`` source, ``span``): an
  ``input_text`` of its title and context (when it has them), then its
  parts, inline, each as above;
- a file id of another provider (an Anthropic ``file`` source), and audio
  (the Responses API takes none) cannot be sent: refused with
  ``Untranslatable`` naming the part (``messages[1].content[0]``, the
  wire's message index), or, with the backend's ``drop_unsupported``,
  left out and named so in ``omitted``;
- Anthropic's fields on a part, as on a text block (as the ``openai``
  adapter treats them): ``citations`` mapped to nothing, named
  ``messages.content.citations``; its extras' ``cache_control`` mapped to
  nothing, named (OpenAI caches prompts by itself); any other extras field
  refused naming ``messages.content.<field>`` unless dropped. A part of
  the Responses dialect has no extras (its edge writes none).

No I/O.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from flatgate.proxy.apis.media import encode_data_url
from flatgate.proxy.apis.openai_responses.items import InputFile, InputImage, InputText, Part
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import NOTHING, read_extras, unsupported
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = ["written_parts"]

_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
# The dialects whose file ids are OpenAI's.
_OPENAI = frozenset({int(ApiDialect.OPENAI_CHAT), _RESPONSES})
_TEXT, _IMAGE, _DOCUMENT, _AUDIO = (
    int(k) for k in (PartKind.TEXT, PartKind.IMAGE, PartKind.DOCUMENT, PartKind.AUDIO)
)
_IMAGE_DETAIL = frozenset({"auto", "low", "high", "original"})
_FILE_DETAIL = frozenset({"auto", "low", "high"})
_CITATIONS = "messages.content.citations"


def _cannot(where: str, why: str, omitted: list[str], drop: bool) -> None:
    """A part this backend cannot take: refused, or left out and named."""
    if drop:
        omitted.append(where)
        return
    raise Untranslatable(
        f"{where}: {why} cannot be sent to an openai-responses backend: remove it, or set "
        "drop_unsupported = true on the backend to leave it out"
    )


def _filename(part: ContentPart) -> str:
    if part.filename or part.title:
        return part.filename or part.title
    return "document" + (mimetypes.guess_extension(part.media_type) or "")


def _joined(*texts: str) -> str:
    return "\n\n".join(t for t in texts if t)


def _fields(part: ContentPart, omitted: list[str], drop: bool) -> None:
    """A part's Anthropic fields with no Responses form, as on a text block:
    ``citations`` mapped to nothing, named; each extras field mapped to
    nothing where ``extras.NOTHING`` says so (``cache_control``), named,
    else refused naming ``messages.content.<field>`` unless dropped; a null
    one asks for nothing. A part of the Responses dialect has no extras."""
    if part.citations:
        omitted.append(_CITATIONS)
    if not part.extras or part.dialect == _RESPONSES:
        return
    nothing = NOTHING.get(part.dialect, {})
    for key, raw in read_extras(part.extras).items():
        if bytes(raw) == b"null":
            continue
        if key in nothing:
            omitted.append(key)
        else:
            unsupported(f"messages.content.{key}", omitted, drop)


def _image(part: ContentPart, where: str, omitted: list[str], drop: bool) -> list[Part]:
    # Checked against the values the Literal allows: ``Any`` for the type.
    detail: Any = part.detail if part.detail in _IMAGE_DETAIL else "auto"
    if part.data:
        return [InputImage(image_url=encode_data_url(part.media_type, part.data), detail=detail)]
    if part.url:
        return [InputImage(image_url=part.url, detail=detail)]
    if part.file_id and part.dialect in _OPENAI:
        return [InputImage(file_id=part.file_id, detail=detail)]
    _cannot(where, "an image by another provider's file id", omitted, drop)
    return []


def _file(part: ContentPart, where: str, omitted: list[str], drop: bool) -> list[Part]:
    if part.span:  # its parts follow it in the list, each written as itself
        head = _joined(part.title, part.context)
        return [InputText(head)] if head else []
    if part.text:
        return [InputText(_joined(part.title, part.context, part.text))]
    detail: Any = part.detail if part.detail in _FILE_DETAIL else None
    lead: list[Part] = [InputText(part.context)] if part.context else []
    if part.data:
        data = encode_data_url(part.media_type, part.data)
        return [*lead, InputFile(file_data=data, filename=_filename(part), detail=detail)]
    name = part.filename or part.title or None
    if part.url:
        return [*lead, InputFile(file_url=part.url, filename=name, detail=detail)]
    if part.file_id and part.dialect in _OPENAI:
        return [*lead, InputFile(file_id=part.file_id, filename=name, detail=detail)]
    _cannot(where, "a file by another provider's file id", omitted, drop)
    return []


def written_parts(
    parts: list[ContentPart], where: str, omitted: list[str], drop: bool
) -> list[Part]:
    """``parts`` of the message at ``where`` (``messages[1]``) as Responses
    parts (see the module docstring)."""
    out: list[Part] = []
    for j, part in enumerate(parts):
        at = f"{where}.content[{j}]"
        kind = part.kind
        _fields(part, omitted, drop)
        if kind == _TEXT:
            out.append(InputText(part.text))
        elif kind == _IMAGE:
            out += _image(part, at, omitted, drop)
        elif kind == _AUDIO:
            _cannot(at, "audio (the Responses API takes no audio input)", omitted, drop)
        else:
            out += _file(part, at, omitted, drop)
    return out
