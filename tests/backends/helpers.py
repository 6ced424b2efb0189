"""What the backend adapter tests share: the fixtures, SSE bodies written by
hand, running a translator over pieces of a body and reading back its frames,
decoded requests built the way the proxy gets them (through the edge), the
streams (with Anthropic's events) that the stream test modules translate alike,
and the end-to-end tests' edge with its SDK client.

A stream's text deltas that arrive in one read are one content chunk
(``EventStream``), so how a body is cut into reads changes how its text is
cut into chunks and nothing else: ``merged`` is what any cut gives alike,
``per_event`` the reads of a server that sends one event at a time.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import openai

from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.backends.anthropic.adapter import AnthropicStream
from flatgate.proxy.backends.base import Translator
from flatgate.proxy.backends.openai.adapter import OpenAIStream
from flatgate.proxy.backends.registry import backend_config, backend_problems
from flatgate.proxy.backends.responses.stream import ResponsesStream
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.config import ConfigError, Problems
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, FrameSplitter
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import FinishReason, Provider
from tests.servers import Server

FIXTURES = Path(__file__).parent / "fixtures"

# Fixtures that are not a whole stream a server could send: the docs' own
# elisions (`...`) make one of their events invalid JSON.
UNPARSEABLE = {"anthropic_web_search_docs_elided.sse"}


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def sse_fixtures(prefix: str = "") -> list[str]:
    """The parseable ``.sse`` fixtures (``anthropic_*`` ones, or the other
    chat streams; the Responses API's are ``responses/``, see
    ``responses_fixtures``)."""
    names = sorted(p.name for p in FIXTURES.glob("*.sse") if p.name not in UNPARSEABLE)
    if prefix == "anthropic":
        return [n for n in names if n.startswith("anthropic")]
    if prefix == "openai":
        return [n for n in names if not n.startswith("anthropic")]
    return names


def responses_fixtures() -> list[str]:
    """The Responses API's ``.sse`` fixtures, as ``fixture`` names."""
    return sorted(f"responses/{p.name}" for p in (FIXTURES / "responses").glob("*.sse"))


def data_events(*payloads: dict[str, Any] | str, done: bool = True) -> bytes:
    """An OpenAI-style body: one ``data:`` event per payload, then ``[DONE]``."""
    out = []
    for p in payloads:
        text = p if isinstance(p, str) else json.dumps(p)
        out.append(f"data: {text}\n\n".encode())
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def named_events(*payloads: dict[str, Any]) -> bytes:
    """An Anthropic-style body: ``event: <type>`` and ``data:`` per payload."""
    return b"".join(f"event: {p['type']}\ndata: {json.dumps(p)}\n\n".encode() for p in payloads)


def chunk(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    reasoning_content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    index: int = 0,
    usage: dict[str, Any] | None = None,
    model: str = "gpt-test",
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with one choice."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning"] = reasoning
    if reasoning_content is not None:
        delta["reasoning_content"] = reasoning_content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    out: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def read_frames(data: bytes) -> list[Chunk]:
    """The chunks in ``data``, which must hold whole size-prefixed frames only."""
    splitter = FrameSplitter()
    frames = splitter.feed(data)
    assert splitter.pending == 0, "the translator wrote part of a frame"
    return [read_chunk(f) for f in frames]


def run(
    translator: Translator, pieces: Iterable[bytes], *, end: bool = True, heartbeats: bool = False
) -> list[Chunk]:
    """Feed ``pieces`` then (unless told not) end; every call must return
    whole frames. The empty chunks a backend's pings become (heartbeats) are
    left out unless ``heartbeats``."""
    out: list[Chunk] = []
    for piece in pieces:
        out += read_frames(translator.feed(piece))
    if end:
        out += read_frames(translator.end())
    return out if heartbeats else [c for c in out if not is_empty(c)]


def split(data: bytes, points: Iterable[int]) -> list[bytes]:
    """``data`` cut at ``points`` (offsets, any order; duplicates give empty pieces)."""
    cuts = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


def per_event(data: bytes) -> list[bytes]:
    """``data`` (events that end in a blank line, LF line ends) cut after each
    event: the reads of a server that sends its events one at a time."""
    pieces = [p + b"\n\n" for p in data.split(b"\n\n")]
    pieces[-1] = pieces[-1][:-2]
    out = [p for p in pieces if p]
    assert b"".join(out) == data
    return out


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def random_pieces(data: bytes, rng: random.Random, most: int = 12) -> list[bytes]:
    return split(data, [rng.randint(0, len(data)) for _ in range(rng.randint(1, most))])


def is_terminal(c: Chunk) -> bool:
    return c.finish_reason != FinishReason.NONE or c.error is not None


def terminals(chunks: Sequence[Chunk]) -> list[Chunk]:
    return [c for c in chunks if is_terminal(c)]


def is_empty(c: Chunk) -> bool:
    """A chunk that says nothing: only ever a heartbeat (an Anthropic backend's
    ``ping``, a Responses backend's hosted tool at work)."""
    return not (
        c.content
        or c.reasoning
        or c.tool_calls
        or is_terminal(c)
        or c.usage
        or c.reasoning_part
        or c.extras
    )


def is_text(c: Chunk) -> bool:
    """A chunk that carries text and nothing else (the kind the text of one
    read is coalesced into)."""
    return bool(c.content) and c == Chunk(
        request_id=c.request_id, content=c.content, index=c.index, model=c.model
    )


def merged(chunks: Sequence[Chunk]) -> list[Chunk]:
    """``chunks`` with each run of text-only chunks of one choice (``is_text``)
    joined into one: the same whatever reads the body came in."""
    out: list[Chunk] = []
    for c in chunks:
        last = out[-1] if out else None
        if (
            last is not None
            and is_text(c)
            and is_text(last)
            and (last.index, last.request_id, last.model) == (c.index, c.request_id, c.model)
        ):
            out[-1] = msgspec.structs.replace(last, content=last.content + c.content)
        else:
            out.append(c)
    return out


def content(chunks: Sequence[Chunk], index: int = 0) -> str:
    return "".join(c.content for c in chunks if c.index == index)


def reasoning(chunks: Sequence[Chunk], index: int = 0) -> str:
    return "".join(c.reasoning for c in chunks if c.index == index)


def calls(chunks: Sequence[Chunk], index: int = 0) -> dict[int, dict[str, Any]]:
    """Tool calls by our index, as a client assembles them: id and name from the
    fragments that carry them (every one seen, to catch repeats), arguments joined."""
    out: dict[int, dict[str, Any]] = {}
    for c in chunks:
        if c.index != index:
            continue
        for d in c.tool_calls:
            call = out.setdefault(d.index, {"ids": [], "names": [], "arguments": ""})
            if d.id:
                call["ids"].append(d.id)
            if d.name:
                call["names"].append(d.name)
            call["arguments"] += d.arguments
    return out


def request(body: dict[str, Any], *, model_name: str = "routed-model") -> Request:
    """``body`` (Chat Completions JSON) as the proxy decodes it: written by the
    edge into a ``CompletionRequest``, read back with ``read_request``."""
    return read_request(
        write_request(
            decode_request(json.dumps(body).encode()),
            provider=int(Provider.SelfHosted),
            model_name=model_name,
            tenant="tenant-a",
            request_id="req-1",
        )
    )


def request_raw(body: bytes, *, model_name: str = "routed-model") -> Request:
    """Like ``request``, from the exact JSON bytes a client sent."""
    return read_request(
        write_request(
            decode_request(body), provider=int(Provider.SelfHosted), model_name=model_name
        )
    )


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


TRUNCATED = codes.BACKEND_STREAM_TRUNCATED.code
STREAM_ERROR = codes.BACKEND_STREAM_ERROR.code


def final(chunks: Sequence[Chunk]) -> Chunk:
    """The one terminal chunk, which must be the last."""
    ends = terminals(chunks)
    assert len(ends) == 1, ends
    assert chunks[-1] is ends[0]
    return ends[0]


def error_of(chunks: Sequence[Chunk]) -> ChunkError:
    last = final(chunks)
    assert last.finish_reason == FinishReason.ERROR
    assert last.error is not None
    return last.error


# -- the streams under test ----------------------------------------------------
# ``test_<provider>_stream`` and ``test_stream_ends`` (through ``streams``, which
# describes both adapters alike) translate with these.

STREAM_MODEL = "configured-model"
OPENAI_RID = "req-42"
ANTHROPIC_RID = "req-7"
RESPONSES_RID = "req-9"


def openai_stream() -> OpenAIStream:
    return OpenAIStream(OPENAI_RID, STREAM_MODEL)


def translate_openai(data: bytes) -> list[Chunk]:
    return run(openai_stream(), [data])


def responses_stream() -> ResponsesStream:
    return ResponsesStream(RESPONSES_RID, STREAM_MODEL)


def translate_responses(data: bytes) -> list[Chunk]:
    return run(responses_stream(), [data])


def anthropic_stream() -> AnthropicStream:
    return AnthropicStream(ANTHROPIC_RID, STREAM_MODEL)


def translate_anthropic(data: bytes) -> list[Chunk]:
    return run(anthropic_stream(), [data])


# -- Anthropic event builders ----------------------------------------------------


def message_start(model: str = "claude-test", **usage: int) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
    }
    if usage:
        message["usage"] = usage
    return {"type": "message_start", "message": message}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def text_block(index: int, *texts: str) -> list[dict[str, Any]]:
    return [
        block_start(index, {"type": "text", "text": ""}),
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": t},
            }
            for t in texts
        ),
        {"type": "content_block_stop", "index": index},
    ]


def tool_block(index: int, id: str, name: str, *fragments: str) -> list[dict[str, Any]]:
    return [
        block_start(index, {"type": "tool_use", "id": id, "name": name, "input": {}}),
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": f},
            }
            for f in fragments
        ),
        {"type": "content_block_stop", "index": index},
    ]


def message_delta(stop_reason: str | None, **usage: int) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": usage or {"output_tokens": 1},
    }


STOP = {"type": "message_stop"}
PING = {"type": "ping"}


def body(*events: dict[str, Any] | list[dict[str, Any]]) -> bytes:
    """An Anthropic body of ``events``, the lists the block builders give flattened."""
    flat: list[dict[str, Any]] = []
    for e in events:
        flat += e if isinstance(e, list) else [e]
    return named_events(*flat)


# -- end to end ---------------------------------------------------------------------


class SdkStack:
    """A running edge (and what stands behind it) with the one ``openai``
    client its tests share, closed with the stack."""

    def __init__(self, edge: Server) -> None:
        self.edge = edge
        self._client = openai.OpenAI(base_url=f"{edge.url}/v1", api_key="unused", max_retries=0)

    def client(self) -> openai.OpenAI:
        return self._client

    def close(self) -> None:
        self._client.close()


def config_of(entry: Mapping[str, Any], where: str = "backend") -> BackendConfig:
    """A ``[[backends]]`` entry as its protocol's config, converted and
    checked as the config file's are; raises ``ConfigError`` naming every
    problem of it."""
    problems = Problems()
    config = backend_config(entry, where, problems)
    if config is not None:
        problems += backend_problems(config, where)
    if config is None or problems:
        raise ConfigError(*problems)
    return config
