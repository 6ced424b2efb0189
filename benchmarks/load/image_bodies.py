"""The image rows' request: a Claude Code-shaped turn carrying four screenshots.

Owns the bodies ``benchmarks.load.image_rows`` sends, built once from a
seed so that every row carries the same conversation:

- ``screenshot``: a real PNG (pillow's encoder, not flatgate's) of seeded
  noise, so that it does not compress: about ``image_bytes`` of PNG, as a
  1.5 MiB screenshot weighs;
- ``messages_body``: an Anthropic Messages request shaped as Claude Code's
  (``tests/clients/fixtures/claude_request.json`` shows the shape): system
  blocks (a billing line, a cached identity line, the long instructions),
  tool definitions, earlier turns with a ``tool_use`` and its
  ``tool_result`` of text, then a user turn of text and the four screenshots
  as ``base64`` image blocks; about 100 KB of text besides the images;
- ``chat_body``: the same conversation as a Chat Completions request (the
  system text as a system message, the tools as functions, the tool call
  and its result, the screenshots as ``data:`` URLs in ``image_url`` parts);
- ``fbs_body``: the edge's FlatBuffer of the Messages request
  (``edge_translator.anthropic.translate.write_messages`` over the request
  decoded as the edge decodes it): what the edge posts to the proxy, the
  images as their decoded bytes;
- the headers each is sent with, a tenant's key in the gateway's.

The edge checks only an image's magic numbers against its declared type
(``proxy.apis.media.check_declared``); these are whole PNGs all the same.
Pure: no I/O.
"""

from __future__ import annotations

import base64
import io
import random
from dataclasses import dataclass

import msgspec
from PIL import Image

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES, JSON, Provider

__all__ = [
    "FULL_SHAPE",
    "TINY_SHAPE",
    "Bodies",
    "Headers",
    "Shape",
    "anthropic_headers",
    "build",
    "chat_body",
    "fbs_body",
    "messages_body",
    "openai_headers",
    "screenshot",
]

Headers = tuple[tuple[str, str], ...]
ANTHROPIC_VERSION = "2023-06-01"
FBS_HEADERS: Headers = (("content-type", FLATBUFFERS), ("accept", FRAMES))
_SEED = 43
_WORDS = [
    "the",
    "file",
    "function",
    "returns",
    "value",
    "test",
    "error",
    "config",
    "request",
    "tenant",
    "model",
    "stream",
    "image",
    "screen",
    "button",
    "layout",
    "render",
    "token",
    "answer",
    "python",
    "module",
    "import",
    "class",
    "self",
    "path",
    "line",
    "change",
    "commit",
    "build",
    "check",
    "lint",
    "type",
    "run",
    "server",
    "proxy",
    "edge",
    "gateway",
]


@dataclass(frozen=True, slots=True)
class Shape:
    """How large the request is: its screenshots and its text."""

    images: int = 4
    image_bytes: int = 3 << 19  # 1.5 MiB of PNG each
    text_bytes: int = 100_000


FULL_SHAPE = Shape()
TINY_SHAPE = Shape(image_bytes=48 << 10, text_bytes=20_000)


def screenshot(seed: int, size: int) -> bytes:
    """A PNG of about ``size`` bytes: seeded RGB noise (which does not
    compress), 1024 pixels wide, stored at zlib's fastest level."""
    width = 1024
    height = max(1, size // (width * 3))
    pixels = random.Random(seed).randbytes(width * height * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(out, "PNG", compress_level=1)
    return out.getvalue()


def _text(rng: random.Random, size: int) -> str:
    """Seeded lines of words, ``size`` characters (ASCII)."""
    words: list[str] = []
    n = 0
    while n < size:
        line = " ".join(rng.choices(_WORDS, k=12)) + "\n"
        words.append(line)
        n += len(line)
    return "".join(words)[:size]


@dataclass(frozen=True, slots=True)
class _Conversation:
    """The conversation's parts, written once and put in either API's shape."""

    billing: str
    identity: str
    instructions: str
    tools: list[tuple[str, str]]  # name, description
    reminder: str
    ask: str
    command: str
    output: str
    final: str
    images: list[bytes]


def _conversation(shape: Shape) -> _Conversation:
    rng = random.Random(_SEED)
    t = shape.text_bytes
    return _Conversation(
        billing="x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=cli;",
        identity="You are Claude Code, Anthropic's official CLI for Claude.",
        instructions=_text(rng, t * 35 // 100),
        tools=[(name, _text(rng, t // 40)) for name in ("Bash", "Read", "Edit", "Grep")],
        reminder="<system-reminder>\n" + _text(rng, t * 5 // 100) + "</system-reminder>\n",
        ask="The page renders wrong: look at the layout and find the bug.",
        command="npm run build && npx playwright screenshot",
        output=_text(rng, t * 45 // 100),
        final="Here are four screenshots of the page: what is off in the layout?",
        images=[screenshot(_SEED + i, shape.image_bytes) for i in range(shape.images)],
    )


_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
_TOOL_ID = "toolu_01BenchImagesScreens"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def messages_body(c: _Conversation, model: str) -> bytes:
    """The conversation as a Messages request (whole answer)."""
    images = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(i)}}
        for i in c.images
    ]
    body = {
        "model": model,
        "max_tokens": 1024,
        "stream": False,
        "system": [
            {"type": "text", "text": c.billing},
            {"type": "text", "text": c.identity, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": c.instructions, "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [{"name": name, "description": d, "input_schema": _SCHEMA} for name, d in c.tools],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": c.reminder}, {"type": "text", "text": c.ask}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me build it and take screenshots."},
                    {
                        "type": "tool_use",
                        "id": _TOOL_ID,
                        "name": "Bash",
                        "input": {"command": c.command},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": _TOOL_ID,
                        "content": [{"type": "text", "text": c.output}],
                    },
                    {"type": "text", "text": c.final},
                    *images,
                ],
            },
        ],
        "metadata": {"user_id": "user_bench_session_00000000-0000-4000-8000-000000000043"},
    }
    return msgspec.json.encode(body)


def chat_body(c: _Conversation, model: str) -> bytes:
    """The same conversation as a Chat Completions request (whole answer)."""
    system = "\n".join((c.billing, c.identity, c.instructions))
    images = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(i)}}
        for i in c.images
    ]
    call = {
        "id": _TOOL_ID,
        "type": "function",
        "function": {
            "name": "Bash",
            "arguments": msgspec.json.encode({"command": c.command}).decode(),
        },
    }
    body = {
        "model": model,
        "max_tokens": 1024,
        "stream": False,
        "tools": [
            {"type": "function", "function": {"name": n, "description": d, "parameters": _SCHEMA}}
            for n, d in c.tools
        ],
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": [{"type": "text", "text": c.reminder + c.ask}]},
            {
                "role": "assistant",
                "content": "Let me build it and take screenshots.",
                "tool_calls": [call],
            },
            {"role": "tool", "tool_call_id": _TOOL_ID, "content": c.output},
            {"role": "user", "content": [{"type": "text", "text": c.final}, *images]},
        ],
    }
    return msgspec.json.encode(body)


def fbs_body(messages: bytes, model: str) -> bytes:
    """The edge's ``CompletionRequest`` of a Messages request: what it posts to the proxy."""
    return write_messages(
        decode_messages(messages), provider=int(Provider.Anthropic), model_name=model
    )


def anthropic_headers(key: str) -> Headers:
    return (
        ("content-type", JSON),
        ("x-api-key", key),
        ("anthropic-version", ANTHROPIC_VERSION),
    )


def openai_headers(key: str) -> Headers:
    return (("content-type", JSON), ("authorization", f"Bearer {key}"))


@dataclass(frozen=True, slots=True)
class Bodies:
    """The three bodies of one shape, and how much of each is image."""

    messages: bytes
    chat: bytes
    fbs: bytes
    image_bytes: int  # the screenshots' PNG bytes, summed


def build(shape: Shape, messages_model: str, chat_model: str, fbs_model: str) -> Bodies:
    """Every body of ``shape``, each for its model."""
    c = _conversation(shape)
    messages = messages_body(c, messages_model)
    return Bodies(
        messages=messages,
        chat=chat_body(c, chat_model),
        fbs=fbs_body(messages_body(c, fbs_model), fbs_model),
        image_bytes=sum(map(len, c.images)),
    )
