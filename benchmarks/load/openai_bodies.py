"""The OpenAI workload's request bodies: one 2 KB conversation in each client API.

Owns the bodies every row of ``benchmarks.load.openai_workload`` sends, built
from one seeded generator so every row carries the same conversation:
``chat_body`` (OpenAI Chat Completions: a system message and a user
message), ``messages_body`` (the same as an Anthropic Messages request),
``responses_body`` (as a Responses API request), ``converse_body`` (as
Bedrock's Converse request: the system prompt as ``system``, the user's text
as a ``text`` block; its URL names the model), ``gemini_body`` (as the
Gemini API's ``generateContent`` request: the system prompt as
``systemInstruction``, the user's text as a ``user`` content's part; its URL
names the model and says whether it streams), ``stream_chat_body`` (the
echo stub's streamed request), their headers, and ``Bodies``: each row's
body at each case of ``benchmarks.load.cases`` (the case's model, ``stream``
flag and API; Portkey's with the headers that send it to the case's stub).
Pure: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import msgspec

from benchmarks.load import peers
from benchmarks.load.cases import case_named
from benchmarks.load.rows import ADAPTER_MODEL, ECHO_MODEL, STREAM_TEXT, Body, Row

__all__ = [
    "ANTHROPIC_HEADERS",
    "ANTHROPIC_VERSION",
    "BODY_BYTES",
    "CHAT_HEADERS",
    "CONVERSE_HEADERS",
    "GEMINI_HEADERS",
    "Bodies",
    "Headers",
    "chat_body",
    "converse_body",
    "gemini_body",
    "messages_body",
    "responses_body",
    "stream_chat_body",
]

BODY_BYTES = 2048
ANTHROPIC_VERSION = "2023-06-01"
_SEED = 7
_TEXT = (
    "the gateway reads each request once and sends it on to the model server that "
    "answers it while the caller waits for every token of the reply in order"
)
_WORDS = _TEXT.split()


_SYSTEM = "You are a concise assistant."


def chat_body(
    size_bytes: int = BODY_BYTES, model: str = ADAPTER_MODEL, *, stream: bool = False
) -> bytes:
    """A chat request of exactly ``size_bytes`` of JSON (at least ~200): a
    system message and one user message of seeded words."""

    def encode(text: str) -> bytes:
        messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": text}]
        return msgspec.json.encode({"model": model, "messages": messages, "stream": stream})

    return _sized(encode, size_bytes)


def messages_body(
    size_bytes: int = BODY_BYTES, model: str = "bench-anthropic", *, stream: bool = False
) -> bytes:
    """The same conversation as an Anthropic Messages request of exactly
    ``size_bytes`` of JSON: the system prompt, one user message, ``max_tokens``."""

    def encode(text: str) -> bytes:
        request = {
            "model": model,
            "max_tokens": 1024,
            "system": _SYSTEM,
            "messages": [{"role": "user", "content": text}],
            "stream": stream,
        }
        return msgspec.json.encode(request)

    return _sized(encode, size_bytes)


def converse_body(size_bytes: int = BODY_BYTES) -> bytes:
    """The same conversation as a Bedrock Converse request of exactly
    ``size_bytes`` of JSON (the same body whole or streamed: the path says)."""

    def encode(text: str) -> bytes:
        request = {
            "system": [{"text": _SYSTEM}],
            "messages": [{"role": "user", "content": [{"text": text}]}],
        }
        return msgspec.json.encode(request)

    return _sized(encode, size_bytes)


def gemini_body(size_bytes: int = BODY_BYTES) -> bytes:
    """The same conversation as a Gemini API ``generateContent`` request of
    exactly ``size_bytes`` of JSON (the same body whole or streamed: the path
    says)."""

    def encode(text: str) -> bytes:
        request = {
            "contents": [{"role": "user", "parts": [{"text": text}]}],
            "systemInstruction": {"parts": [{"text": _SYSTEM}]},
        }
        return msgspec.json.encode(request)

    return _sized(encode, size_bytes)


def _sized(encode: Callable[[str], bytes], size_bytes: int) -> bytes:
    """``encode`` of seeded words, cut and padded to exactly ``size_bytes``."""
    rng = random.Random(_SEED)
    words: list[str] = []
    while len(encode(" ".join(words))) < size_bytes:
        words.append(rng.choice(_WORDS))
    text = " ".join(words)
    short = size_bytes - len(encode(text))
    if short < 0:
        text = text[:short]
    return encode(text + "." * max(0, size_bytes - len(encode(text))))


def responses_body(chat: bytes, *, stream: bool = False) -> bytes:
    """``chat`` (``chat_body``'s or ``stream_chat_body``'s request) as the
    Responses API request of the same conversation: the system message as
    ``instructions``, the user's as the ``input`` string, not stored."""
    request = msgspec.json.decode(chat)
    system = [m["content"] for m in request["messages"] if m["role"] == "system"]
    out = {
        "model": request["model"],
        "input": request["messages"][-1]["content"],
        "stream": stream,
        "store": False,
    }
    if system:
        out["instructions"] = system[0]
    return msgspec.json.encode(out)


def stream_chat_body(model: str = ECHO_MODEL) -> bytes:
    """A streamed chat request the echo stub answers with ``STREAM_TEXT``, word by word."""
    request = {
        "model": model,
        "messages": [{"role": "user", "content": STREAM_TEXT}],
        "stream": True,
    }
    return msgspec.json.encode(request)


Headers = tuple[tuple[str, str], ...]
CHAT_HEADERS: Headers = (
    ("content-type", "application/json"),
    ("authorization", f"Bearer {peers.DUMMY_KEY}"),
)
CONVERSE_HEADERS: Headers = (("content-type", "application/json"),)
GEMINI_HEADERS: Headers = (
    ("content-type", "application/json"),
    ("x-goog-api-key", peers.DUMMY_KEY),
)
ANTHROPIC_HEADERS: Headers = (
    ("content-type", "application/json"),
    ("x-api-key", peers.DUMMY_KEY),
    ("anthropic-version", ANTHROPIC_VERSION),
)


class Bodies:
    """Each row's request body at each case, and its streamed request: the
    case's model, ``stream`` flag and API; Portkey's with the headers that
    send it to the case's stub."""

    def __init__(self, stub_urls: Mapping[str, str], echo_url: str) -> None:
        self.stub_urls = stub_urls
        self.echo_url = echo_url
        stream = stream_chat_body()
        self._stream = {"openai": stream, "responses": responses_body(stream, stream=True)}

    def size(self, row: Row, size: str) -> Body:
        case = case_named(size)
        expect = "tok " * case.tokens
        if row.body == "responses":
            data = responses_body(chat_body(BODY_BYTES, case.model), stream=case.stream)
            return Body(data, CHAT_HEADERS, expect)
        if row.body == "converse":
            return Body(converse_body(BODY_BYTES), CONVERSE_HEADERS, expect)
        if row.body == "gemini":
            return Body(gemini_body(BODY_BYTES), GEMINI_HEADERS, expect)
        portkey = row.server == "portkey"
        base = self.stub_urls[case.backend] + "/v1"
        if row.body == "anthropic":
            data = messages_body(BODY_BYTES, case.model, stream=case.stream)
            headers: Headers = ANTHROPIC_HEADERS
            if portkey:
                headers = (*headers, *CHAT_HEADERS[1:], *peers.portkey_headers(base, "anthropic"))
            return Body(data, headers, expect)
        data = chat_body(BODY_BYTES, case.model, stream=case.stream)
        headers = (*CHAT_HEADERS, *peers.portkey_headers(base)) if portkey else CHAT_HEADERS
        return Body(data, headers, expect)

    def stream(self, row: Row) -> Body:
        data = self._stream["responses" if row.body == "responses" else "openai"]
        if row.name == "portkey":
            return Body(data, (*CHAT_HEADERS, *peers.portkey_headers(self.echo_url + "/v1")))
        return Body(data, CHAT_HEADERS)
