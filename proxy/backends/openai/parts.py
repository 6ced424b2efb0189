"""The ``openai`` backend's content parts: a wire message's ``parts`` (an
image, a document, audio, a file by id, from any client API) as Chat
Completions content parts, written with the API's one model
(``apis.openai_chat.request``'s part Structs).

Each part, whatever dialect it came in:

- text -> a ``text`` part;
- an image's bytes -> ``image_url`` with a ``data:`` URL
  (``apis.media.encode_data_url``), its URL -> ``image_url`` with the URL
  (never fetched), ``detail`` with either; an image by file id is refused
  (Chat Completions takes images by URL only);
- audio: ``audio/wav`` and ``audio/mpeg`` bytes -> ``input_audio`` (``wav``,
  ``mp3``); any other type, a URL or a file id refused;
- a document: a plain-text one (its ``text``, or ``text/*`` bytes that are
  UTF-8) -> one ``text`` part, its title, context and text in that order,
  a blank line between; other bytes (a PDF) -> ``file`` with ``file_data``
  (a data URL) and ``filename`` (the part's, else its title, else
  ``document`` and the type's extension: OpenAI asks for one), after a
  ``text`` part of its context when it has one; a document made of parts
  (``span``) -> a ``text`` part of its title and context, then its parts,
  each as above; a document by URL is refused (Chat Completions' ``file``
  has no URL, and flatgate never fetches one);
- a file by id -> ``file`` with ``file_id`` (and ``filename``) when the id
  is OpenAI's (dialect OpenAI Chat or Responses); another provider's id is
  refused.

Anthropic's fields on a part are treated as on a text block: ``citations``
is mapped to nothing and named ``messages.content.citations``; its extras'
``cache_control`` mapped to nothing and named ``cache_control`` (OpenAI
caches prompts by itself; a text block's is named ``$cache_control``); any
other extras field refused naming ``messages.content.<field>`` (as a text
block's own fields are) unless the backend drops it; a null one asks for
nothing. ``title`` and ``context`` are mapped (below). A document's or a
file's ``detail`` (the Responses API's ``input_file`` has one) has no field
here: left out, named ``detail`` (``auto``, the default, is not named).

Where the parts go: a user message's as its content list. A tool message
takes text only in Chat Completions: its text parts are its content, joined
(a failed call's marked as ``failed_result`` marks it), and its other parts
move to one ``user`` message written right after the run of tool messages
it is in (OpenAI wants every result of a turn's calls right after it).
Parts other than text in a system, developer or assistant message (no
client API sends them) are refused. A refused part is an ``Untranslatable``
naming it (``messages[1].content[0]``, the wire's indexes), unless the
backend sets ``drop_unsupported``: then it is left out and named so. Pure:
no I/O.
"""

from __future__ import annotations

import base64
import mimetypes
from typing import TypeAlias

import msgspec

from flatgate.proxy.apis.media import encode_data_url
from flatgate.proxy.apis.openai_chat.parts import AUDIO_TYPES
from flatgate.proxy.apis.openai_chat.request import ContentPart as ChatPart
from flatgate.proxy.apis.openai_chat.request import (
    File,
    FilePart,
    ImageUrl,
    ImageUrlPart,
    InputAudio,
    InputAudioPart,
    TextPart,
    ToolMessage,
    UserMessage,
)
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import NOTHING, read_extras, unsupported
from flatgate.proxy.backends.json_api import failed_result
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import Message
from flatgate.proxy.wire.schema import ApiDialect, PartKind

__all__ = ["Written", "message_with_parts", "user_message"]

# A part as written: text, or a media part (the API's union).
Written: TypeAlias = ChatPart

_TEXT = int(PartKind.TEXT)
_IMAGE = int(PartKind.IMAGE)
_AUDIO = int(PartKind.AUDIO)
_OPENAI = frozenset({int(ApiDialect.OPENAI_CHAT), int(ApiDialect.OPENAI_RESPONSES)})
# Media type -> input_audio's format (with the types clients spell otherwise).
_FORMATS = {
    **{media: fmt for fmt, media in AUDIO_TYPES.items()},
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mp3": "mp3",
}
_CITATIONS = "messages.content.citations"


def _cannot(at: str, why: str, omitted: list[str], drop: bool) -> list[Written]:
    """A part the backend cannot take: refused naming it, or dropped and named."""
    if not drop:
        raise Untranslatable(
            f"{at}: {why}; remove it, or set drop_unsupported = true on the backend to drop it"
        )
    omitted.append(at)
    return []


def _fields(part: ContentPart, omitted: list[str], drop: bool) -> None:
    """A part's Anthropic fields, as on a text block (see the module docstring)."""
    if part.citations:
        omitted.append(_CITATIONS)
    if not part.extras:
        return
    nothing = NOTHING.get(part.dialect, {})
    for key, raw in read_extras(part.extras).items():
        if bytes(raw) == b"null":  # asks for nothing, as on a text block
            continue
        if key in nothing:
            omitted.append(key)
        else:
            unsupported(f"messages.content.{key}", omitted, drop)


def _joined(*texts: str) -> str:
    return "\n\n".join(t for t in texts if t)


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _filename(part: ContentPart) -> str:
    if part.filename or part.title:
        return part.filename or part.title
    return "document" + (mimetypes.guess_extension(part.media_type) or "")


def _document(part: ContentPart, at: str, omitted: list[str], drop: bool) -> list[Written]:
    if part.span:  # its parts follow it in the list, each written as it is
        head = _joined(part.title, part.context)
        return [TextPart(head)] if head else []
    text = part.text
    if not text and part.data and part.media_type.startswith("text/"):
        text = _utf8(part.data) or ""
    if text:
        return [TextPart(_joined(part.title, part.context, text))]
    lead: list[Written] = [TextPart(part.context)] if part.context else []
    if part.data:
        url = encode_data_url(part.media_type or "application/octet-stream", part.data)
        return [*lead, FilePart(File(file_data=url, filename=_filename(part)))]
    if part.file_id:
        return [*lead, *_file_id(part, at, omitted, drop)]
    if part.url:
        return _cannot(
            at,
            "a document by URL cannot be sent to a Chat Completions backend (its file "
            "parts take data or a file id, and flatgate never fetches a URL)",
            omitted,
            drop,
        )
    return [*lead]


def _file_id(part: ContentPart, at: str, omitted: list[str], drop: bool) -> list[Written]:
    if part.dialect not in _OPENAI:
        return _cannot(
            at, "a file id of another provider than OpenAI cannot be sent here", omitted, drop
        )
    return [FilePart(File(file_id=part.file_id, filename=part.filename or None))]


def _audio(part: ContentPart, at: str, omitted: list[str], drop: bool) -> list[Written]:
    fmt = _FORMATS.get(part.media_type)
    if part.data and fmt:
        data = base64.b64encode(part.data).decode("ascii")
        return [InputAudioPart(InputAudio(data=data, format=fmt))]  # type: ignore[arg-type]
    if part.data:
        why = f"audio of type '{part.media_type}' (Chat Completions takes wav and mp3)"
    else:
        why = "audio by URL or file id (Chat Completions takes its bytes only)"
    return _cannot(at, f"{why} cannot be sent to this backend", omitted, drop)


def _part(part: ContentPart, at: str, omitted: list[str], drop: bool) -> list[Written]:
    """One part as Chat Completions' (none when it is dropped, or a span's head
    with nothing to say; two for a document with its context)."""
    _fields(part, omitted, drop)
    kind = part.kind
    if kind == _TEXT:
        return [TextPart(part.text)]
    if kind == _IMAGE:
        detail = part.detail or None
        if part.data:
            url = encode_data_url(part.media_type or "image/png", part.data)
            return [ImageUrlPart(ImageUrl(url, detail))]  # type: ignore[arg-type]
        if part.url:
            return [ImageUrlPart(ImageUrl(part.url, detail))]  # type: ignore[arg-type]
        return _cannot(
            at, "an image by file id cannot be sent to a Chat Completions backend", omitted, drop
        )
    if part.detail not in ("", "auto"):  # a file's (Responses): Chat has no field
        omitted.append("detail")
    if kind == _AUDIO:
        return _audio(part, at, omitted, drop)
    if part.file_id and not part.data:
        return _file_id(part, at, omitted, drop)
    return _document(part, at, omitted, drop)


def _written(i: int, parts: list[ContentPart], omitted: list[str], drop: bool) -> list[Written]:
    out: list[Written] = []
    for j, part in enumerate(parts):
        out += _part(part, f"messages[{i}].content[{j}]", omitted, drop)
    return out


def _text(items: list[Written]) -> str:
    return "".join(p.text for p in items if isinstance(p, TextPart))


def message_with_parts(
    i: int, m: Message, omitted: list[str], drop: bool
) -> tuple[Message | UserMessage | ToolMessage, list[Written]]:
    """Wire message ``i`` with parts, as Chat Completions takes it (see the
    module docstring), and the parts that move to the user message after its
    run of tool messages (a tool message's media)."""
    parts = m.parts or []
    if m.role == "user":
        # Every part dropped: no content list (OpenAI refuses an empty one).
        return UserMessage(_written(i, parts, omitted, drop) or "", m.name or None), []
    if m.role == "tool":
        items = _written(i, parts, omitted, drop)
        text = _text(items)
        content = failed_result(text) if m.is_error else text
        moved: list[Written] = [p for p in items if not isinstance(p, TextPart)]
        return ToolMessage(content, m.tool_call_id, m.name or None), moved
    kept: list[ContentPart] = []
    for j, part in enumerate(parts):
        if part.kind == _TEXT:
            kept.append(part)
        else:
            _cannot(
                f"messages[{i}].content[{j}]",
                f"a {m.role} message's part other than text has no Chat Completions form",
                omitted,
                drop,
            )
    text = _text(_written(i, kept, omitted, drop))
    return msgspec.structs.replace(m, content=text, parts=None), []


def user_message(moved: list[Written]) -> UserMessage:
    """The user message that carries a run of tool messages' media."""
    return UserMessage(list(moved))
