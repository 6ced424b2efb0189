"""Hostile JSON bodies get a 400 in the caller's shape, never a 500 with a
traceback: nesting 100k levels deep, text that is not UTF-8, a megabyte of
model name (echoed cut short), and a prompt too big for the wire on
``count_tokens`` as on ``/v1/messages``.

The decoders first (pure, every attack on each of them), then a real
``flatgate gateway`` (and the stub behind it) on loopback, whose log must
hold no traceback once every attack has been sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import msgspec
import pytest

from flatgate.edge_translator.anthropic.render import MessageAggregator
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.errors import ECHO_CHARS, InvalidRequest, ProxyFailed
from flatgate.proxy.apis.anthropic_messages.request import decode_count_tokens, decode_messages
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta
from flatgate.proxy.wire.request.verify import MAX_OBJECTS
from flatgate.proxy.wire.schema import FinishReason
from tests.servers import Server, running
from tests.stacks import QUIET, write_stack

KEY = "sk-hostile-json"
MODEL = "echo"
DEPTH = 100_000
USER = {"role": "user", "content": "hi"}
OPENAI = "/v1/chat/completions"
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
ENDPOINTS = (OPENAI, MESSAGES, COUNT)
DECODERS: dict[str, Callable[[bytes], Any]] = {
    OPENAI: decode_request,
    MESSAGES: decode_messages,
    COUNT: decode_count_tokens,
}


def deep(kind: str) -> bytes:
    """``DEPTH`` levels of nesting: objects or arrays."""
    if kind == "object":
        return b'{"a":' * DEPTH + b"1" + b"}" * DEPTH
    return b"[" * DEPTH + b"]" * DEPTH


def body(extra: bytes = b"", *, content: bytes = b'"hi"', model: bytes = MODEL.encode()) -> bytes:
    """A request every endpoint takes, but for ``content`` (its one message's),
    ``model`` (inside a JSON string) and ``extra`` (``"key":value``)."""
    head = b'{"model":"' + model + b'","max_tokens":5,'
    messages = b'"messages":[{"role":"user","content":' + content + b"}]"
    return head + (extra + b"," if extra else b"") + messages + b"}"


def tools(endpoint: str, schema: bytes) -> bytes:
    """A ``tools`` member whose one tool's parameters are ``schema``."""
    if endpoint == OPENAI:
        return b'"tools":[{"type":"function","function":{"name":"f","parameters":' + schema + b"}}]"
    return b'"tools":[{"name":"f","input_schema":' + schema + b"}]"


# Where deep nesting goes: (name, the member it is spliced into, for an endpoint).
NESTING: list[tuple[str, Callable[[str, bytes], bytes]]] = [
    ("unknown field", lambda e, v: b'"zz":' + v),
    ("tool parameters", lambda e, v: tools(e, b'{"x":' + v + b"}")),
    ("response_format", lambda e, v: b'"response_format":' + v),
    ("metadata", lambda e, v: b'"metadata":{"user_id":"u","x":' + v + b"}"),
]
# Text that is not UTF-8: raw bytes in a decoded string, as JSON carries them.
BAD_TEXT = {
    "stray byte": b"\xff",
    "overlong slash": b"\xc0\xaf",
    "encoded surrogate": b"\xed\xa0\x80",
    "beyond U+10FFFF": b"\xf4\x90\x80\x80",
}
# An escaped lone surrogate is not a character either.
ESCAPED_SURROGATES = {"lone high": rb"\ud800", "lone low": rb"\udc00", "unpaired": rb"\ud800\u0041"}


def refused(endpoint: str, raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        DECODERS[endpoint](raw)
    err = info.value
    assert (err.status, err.type) == (400, "invalid_request_error")
    return err


# -- the decoders -------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("kind", ["object", "array"])
@pytest.mark.parametrize(("where", "splice"), NESTING, ids=[n for n, _ in NESTING])
def test_deep_nesting_is_invalid_json(
    endpoint: str, kind: str, where: str, splice: Callable[[str, bytes], bytes]
) -> None:
    err = refused(endpoint, body(splice(endpoint, deep(kind))))
    if endpoint == OPENAI and where == "metadata":  # its values are strings: typed first
        assert (err.code.code, err.param) == ("invalid_request", "metadata")
        return
    assert err.code.code == "invalid_json"
    assert "nested too deeply" in err.message


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("text", BAD_TEXT.values(), ids=list(BAD_TEXT))
def test_text_that_is_not_utf8_is_invalid_json(endpoint: str, text: bytes) -> None:
    for raw in (
        body(content=b'"a' + text + b'"'),
        body(model=text),
        body((b'"user":"' if endpoint == OPENAI else b'"system":"') + text + b'"'),
    ):
        err = refused(endpoint, raw)
        assert err.code.code == "invalid_json"
        assert "not valid UTF-8" in err.message


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("text", BAD_TEXT.values(), ids=list(BAD_TEXT))
def test_json_kept_as_written_must_be_utf8_too(endpoint: str, text: bytes) -> None:
    """What msgspec keeps as raw bytes (and the wire carries as a string) is
    checked by the edge itself."""
    schema = b'{"description":"' + text + b'"}'
    err = refused(endpoint, body(tools(endpoint, schema)))
    assert (err.code.code, err.param) == (
        "invalid_json",
        "tools.[0].function.parameters" if endpoint == OPENAI else "tools.0.input_schema",
    )


def test_a_response_format_and_a_tool_input_must_be_utf8() -> None:
    err = refused(OPENAI, body(b'"response_format":{"type":"\xff"}'))
    assert (err.code.code, err.param) == ("invalid_json", "response_format")
    turn = b'[{"type":"tool_use","id":"t","name":"f","input":{"q":"\xc0\xaf"}}]'
    raw = body().replace(b"}]}", b'},{"role":"assistant","content":' + turn + b"}]}")
    with pytest.raises(InvalidRequest) as info:
        write_messages(decode_messages(raw), provider=0, model_name=MODEL)
    assert (info.value.code.code, info.value.param) == (
        "invalid_json",
        "messages.1.content.0.input",
    )


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("escape", ESCAPED_SURROGATES.values(), ids=list(ESCAPED_SURROGATES))
def test_an_escaped_lone_surrogate_is_invalid_json(endpoint: str, escape: bytes) -> None:
    assert refused(endpoint, body(content=b'"' + escape + b'"')).code.code == "invalid_json"


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_quoted_value_is_echoed_cut_short(endpoint: str) -> None:
    role = "r" * 100_000
    raw = body().replace(b'"role":"user"', f'"role":"{role}"'.encode())
    err = refused(endpoint, raw)
    assert role[:ECHO_CHARS] + "\u2026" in err.message
    assert len(err.message) < 2 * ECHO_CHARS + 200


def test_count_tokens_refuses_what_messages_refuses() -> None:
    """The limit is the proxy's verifier's (``MAX_OBJECTS``): ``count_tokens``
    answers from the edge, so it verifies its own buffer with it."""
    raw = json.dumps({"model": MODEL, "messages": [USER] * MAX_OBJECTS}).encode()
    with pytest.raises(InvalidRequest) as info:
        write_messages(decode_count_tokens(raw), provider=0, model_name=MODEL)
    assert info.value.code.code == "malformed_request"
    assert "max_objects" in info.value.message
    fine = json.dumps({"model": MODEL, "messages": [USER] * 1000}).encode()
    assert write_messages(decode_count_tokens(fine), provider=0, model_name=MODEL)


def test_deeply_nested_tool_arguments_from_a_backend_are_its_error() -> None:
    """A model can be asked to write them: the Messages answer checks they
    are an object, and that check must not raise past the renderer."""
    agg = MessageAggregator(message_id="m", model=MODEL)
    agg.feed(Chunk(tool_calls=(ToolCallDelta(0, "t", "f", deep("object").decode()),)))
    agg.feed(Chunk(finish_reason=FinishReason.TOOL_CALLS))
    with pytest.raises(ProxyFailed) as info:
        agg.body()
    assert info.value.code.code == "backend_protocol_error"


# -- a real gateway -----------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("hostile-json")
    with running("stub", [], d) as stub:
        cfg = write_stack(
            d / "g.toml",
            proxy=QUIET,
            backends={"stub": stub.url},
            routes={"*": "stub"},
            edge=QUIET,
            models={MODEL: "SelfHosted"},
            keys={KEY: "acme"},
        )
        with running("gateway", ["--config", cfg], d) as server:
            yield server


def post(server: Server, endpoint: str, raw: bytes) -> httpx.Response:
    return httpx.post(
        server.url + endpoint,
        content=raw,
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
        timeout=30,
    )


def error_of(endpoint: str, resp: httpx.Response) -> tuple[str, str | None]:
    """(message, OpenAI code) of an error in the shape ``endpoint``'s API
    answers with (Anthropic's has no code)."""
    doc = resp.json()
    if endpoint == OPENAI:
        assert set(doc) == {"error"} and set(doc["error"]) == {"message", "type", "param", "code"}
        assert doc["error"]["type"] == "invalid_request_error"
        return doc["error"]["message"], doc["error"]["code"]
    assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    return doc["error"]["message"], None


def no_traceback(server: Server) -> None:
    log = server.log.read_text()
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.integration
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_deep_nesting_is_a_400_from_the_gateway(gateway: Server, endpoint: str) -> None:
    for _, splice in NESTING:
        for kind in ("object", "array"):
            resp = post(gateway, endpoint, body(splice(endpoint, deep(kind))))
            assert resp.status_code == 400, resp.text
            message, code = error_of(endpoint, resp)
            assert code in (None, "invalid_json", "invalid_request")
            assert "nested too deeply" in message or code == "invalid_request"
    no_traceback(gateway)


@pytest.mark.integration
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_text_that_is_not_utf8_is_a_400_from_the_gateway(gateway: Server, endpoint: str) -> None:
    for text in BAD_TEXT.values():
        for raw in (
            body(content=b'"' + text + b'"'),
            body(tools(endpoint, b'{"description":"' + text + b'"}')),
        ):
            resp = post(gateway, endpoint, raw)
            assert resp.status_code == 400, resp.text
            message, code = error_of(endpoint, resp)
            assert "not valid UTF-8" in message
            assert code in (None, "invalid_json")
    for escape in ESCAPED_SURROGATES.values():
        resp = post(gateway, endpoint, body(content=b'"' + escape + b'"'))
        assert resp.status_code == 400, resp.text
        assert error_of(endpoint, resp)[1] in (None, "invalid_json")
    no_traceback(gateway)


@pytest.mark.integration
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_megabyte_model_name_is_echoed_cut_short(gateway: Server, endpoint: str) -> None:
    name = "m" * 1_000_000
    raw = msgspec.json.encode({"model": name, "max_tokens": 5, "messages": [USER]})
    resp = post(gateway, endpoint, raw)
    assert resp.status_code == 404
    assert len(resp.content) < 1000
    message = resp.json()["error"]["message"]
    assert f"'{name[:ECHO_CHARS]}\u2026'" in message


@pytest.mark.integration
def test_count_tokens_takes_no_more_messages_than_messages_does(gateway: Server) -> None:
    raw = json.dumps({"model": MODEL, "max_tokens": 5, "messages": [USER] * 100_000}).encode()
    sent = post(gateway, MESSAGES, raw)
    counted = post(gateway, COUNT, raw)
    assert (sent.status_code, counted.status_code) == (400, 400), counted.text
    assert "max_objects" in error_of(COUNT, counted)[0]
    assert (
        error_of(MESSAGES, sent)[0].split(" at offset")[0]
        == (error_of(COUNT, counted)[0].split(" at offset")[0])
    )
    ok = post(gateway, COUNT, json.dumps({"model": MODEL, "messages": [USER]}).encode())
    assert ok.status_code == 200 and ok.json()["input_tokens"] > 0
    no_traceback(gateway)


def test_the_attack_bodies_fit_the_default_body_limit() -> None:
    """Each is refused for what it is, not for its size (8 MiB)."""
    largest = max(len(body(s(e, deep("object")))) for e in ENDPOINTS for _, s in NESTING)
    assert largest < 8 * 1024 * 1024
