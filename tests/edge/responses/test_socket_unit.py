"""The Responses WebSocket's pure parts, without a socket: ``turns.as_body``
(a ``response.create`` message read as a ``POST /v1/responses`` body, every
field it takes or refuses), ``socket_api.socket_error`` (the envelope and
the headers it keeps), ``SocketResponses``' connection-local ``recent``
(``previous_turn``, ``evict``, ``keep`` and its cap) and ``turns.Turn`` (a
streamed answer split one event to a message; an error answer as the
envelope; ``failed``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.responses.socket_api import SocketResponses, socket_error
from flatgate.edge_translator.responses.store import StoredResponses, Turn
from flatgate.edge_translator.responses.turns import Turn as SocketTurn
from flatgate.edge_translator.responses.turns import as_body
from flatgate.proxy.limits import MemoryStore, StateSection
from flatgate.proxy.plumbing.body import BodyPolicy, BodyTooLarge


def message(**fields: Any) -> str:
    return json.dumps({"type": "response.create", "model": "m", "input": "hi", **fields})


# -- as_body -----------------------------------------------------------------------


def test_a_create_message_becomes_a_streamed_post_body() -> None:
    asked = as_body(message(store=False, previous_response_id="resp_1"))
    body = json.loads(asked.body)
    # ``type`` goes; ``stream: true`` is added; every other field is carried.
    assert body == {
        "model": "m",
        "input": "hi",
        "store": False,
        "previous_response_id": "resp_1",
        "stream": True,
    }
    assert asked.previous == "resp_1"
    assert asked.warmup is False
    # bytes are read as str is
    assert as_body(message().encode()) == as_body(message())


def test_a_message_without_previous_names_none() -> None:
    assert as_body(message()).previous is None
    assert as_body(message(previous_response_id=None)).previous is None
    # A non-string previous id: not taken as one (the request's decode names it).
    asked = as_body(message(previous_response_id=5))
    assert asked.previous is None
    assert json.loads(asked.body)["previous_response_id"] == 5


@pytest.mark.parametrize(
    ("fields", "stays"),
    [
        ({"stream": True}, {}),
        ({"stream": None}, {}),
        ({"background": False}, {"background": False}),
        ({"background": None}, {"background": None}),
        ({"stream_id": None}, {}),
        ({"generate": True}, {}),
        ({"generate": None}, {}),
    ],
)
def test_values_that_ask_for_what_a_socket_does_are_taken(
    fields: dict[str, Any], stays: dict[str, Any]
) -> None:
    asked = as_body(message(**fields))
    body = json.loads(asked.body)
    assert body == {"model": "m", "input": "hi", **stays, "stream": True}
    assert asked.warmup is False


def test_generate_false_is_a_warmup_taken_out_of_the_body() -> None:
    asked = as_body(message(generate=False))
    assert asked.warmup is True
    assert "generate" not in json.loads(asked.body)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream": False}, "stream"),
        ({"stream": "yes"}, "stream"),
        ({"background": True}, "background"),
        ({"stream_id": "s1"}, "stream_id"),
        ({"stream_id": 0}, "stream_id"),
        ({"generate": "no"}, "generate"),
        ({"generate": 0}, "generate"),
    ],
)
def test_http_only_and_unserved_fields_are_refused_naming_them(
    fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        as_body(message(**fields))
    assert info.value.param == param
    assert info.value.status == 400
    assert param in info.value.message


@pytest.mark.parametrize(
    "data",
    [b"not json", b"[1, 2]", b'"response.create"', b"", b"\xff\xfe", b"[" * 100_000],
)
def test_what_is_not_a_json_object_is_invalid_json(data: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        as_body(data)
    assert info.value.code.code == "invalid_json"
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        ({"model": "m"}, "none"),
        ({"type": "response.cancel"}, '"response.cancel"'),
        ({"type": 7}, "7"),
        ({"type": None}, "null"),
    ],
)
def test_another_type_is_refused_naming_type(data: dict[str, Any], shown: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        as_body(json.dumps(data))
    assert info.value.param == "type"
    assert shown in info.value.message
    assert "response.create" in info.value.message


def test_a_long_type_is_shown_cut() -> None:
    with pytest.raises(InvalidRequest) as info:
        as_body(json.dumps({"type": "x" * 10_000}))
    assert info.value.param == "type"
    assert len(info.value.message) < 200


# -- socket_error ------------------------------------------------------------------


def test_the_envelope_keeps_the_headers_a_client_acts_on() -> None:
    detail = {"message": "slow down", "type": "rate_limit_error", "param": None, "code": "x"}
    headers = [
        ("retry-after", "3"),
        ("x-ratelimit-limit-requests", "1"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-request-id", "req-1"),
        ("x-should-retry", "true"),
        ("content-type", "application/json"),
        ("set-cookie", "a=b"),
        ("content-length", "12"),
        ("www-authenticate", "Bearer"),
    ]
    assert json.loads(socket_error(429, detail, headers)) == {
        "type": "error",
        "status": 429,
        "error": detail,
        "headers": {
            "retry-after": "3",
            "x-ratelimit-limit-requests": "1",
            "x-ratelimit-remaining-requests": "0",
            "x-request-id": "req-1",
            "x-should-retry": "true",
        },
    }


def test_the_envelope_has_no_headers_when_none_is_kept() -> None:
    detail = {"message": "no", "code": "invalid_request"}
    sent = socket_error(400, detail, [("content-type", "application/json")])
    assert json.loads(sent) == {"type": "error", "status": 400, "error": detail}
    assert json.loads(socket_error(400, detail)) == {
        "type": "error",
        "status": 400,
        "error": detail,
    }
    # ``type`` first: a client (and ``Turn``) knows an error from its opening bytes.
    assert sent.startswith(b'{"type":"error"')


# -- SocketResponses: recent, evict, keep ------------------------------------------


def api(max_bytes: int = 1000, store: StoredResponses | None = None) -> SocketResponses:
    return SocketResponses(store, max_bytes)


async def test_keep_makes_recent_and_previous_turn_finds_it_for_its_tenant() -> None:
    s = api()
    s.keep("acme", "resp_1", (b'{"role":"user"}',), b'{"id":"resp_1"}')
    assert s.recent is not None and s.recent.response_id == "resp_1"
    got = await s.previous_turn("acme", "resp_1")
    assert got is not None and got.response == b'{"id":"resp_1"}'
    # Another tenant, or another id, does not get it (no store: not found).
    assert await s.previous_turn("globex", "resp_1") is None
    assert await s.previous_turn("acme", "resp_2") is None


async def test_keep_holds_one_response_the_last() -> None:
    s = api()
    s.keep("acme", "resp_1", (b"[1]",), b"{}")
    s.keep("acme", "resp_2", (b"[2]",), b"{}")
    assert await s.previous_turn("acme", "resp_1") is None
    assert await s.previous_turn("acme", "resp_2") is not None


async def test_over_the_cap_keeps_nothing_not_even_the_one_before() -> None:
    s = api(max_bytes=100)
    s.keep("acme", "resp_1", (b"x" * 50,), b"y" * 50)  # exactly the cap: kept
    assert s.recent is not None and s.recent.response_id == "resp_1"
    s.keep("acme", "resp_2", (b"x" * 50,), b"y" * 51)  # one over, input and output counted
    assert s.recent is None
    assert await s.previous_turn("acme", "resp_1") is None
    assert await s.previous_turn("acme", "resp_2") is None
    s.keep("acme", "resp_3", (b"x" * 40, b"x" * 40), b"y" * 21)  # the pieces summed
    assert s.recent is None


async def test_evict_lets_go_of_that_response_only() -> None:
    s = api()
    s.keep("acme", "resp_1", (), b"{}")
    s.evict("resp_other")
    assert s.recent is not None
    s.evict("resp_1")
    assert s.recent is None
    s.evict("resp_1")  # nothing kept: harmless
    assert await s.previous_turn("acme", "resp_1") is None


async def test_previous_turn_falls_back_to_the_stored_responses() -> None:
    store = StoredResponses(MemoryStore(), StateSection())
    await store.save_input("acme", "resp_s", (b'[{"role":"user","content":"a"}]',))
    await store.save_response("acme", "resp_s", b'{"id":"resp_s"}')
    s = api(store=store)
    s.keep("acme", "resp_local", (), b'{"id":"resp_local"}')
    stored = await s.previous_turn("acme", "resp_s")
    assert stored is not None and stored.response == b'{"id":"resp_s"}'
    assert await s.previous_turn("globex", "resp_s") is None
    local = await s.previous_turn("acme", "resp_local")
    assert local is not None and local.response == b'{"id":"resp_local"}'
    # An evicted response is let go from the socket only: the store keeps its own.
    s.evict("resp_s")
    assert await s.previous_turn("acme", "resp_s") is not None


def test_recent_turn_is_the_stores_turn_type() -> None:
    s = api()
    s.keep("t", "r", (), b"{}")
    assert s.recent is not None and isinstance(s.recent.turn, Turn)


# -- Turn --------------------------------------------------------------------------


class Sink:
    """A socket's ``send`` that records each message."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def __call__(self, data: bytes) -> None:
        self.sent.append(data)


def turn(sink: Sink, body: bytes = b'{"model":"m"}', closed: asyncio.Event | None = None) -> Any:
    headers = {"authorization": "Bearer k", "x-request-id": "conn-1", "content-length": "999"}
    return SocketTurn(
        headers.get, body, peer="127.0.0.1:5", send=sink, closed=closed or asyncio.Event()
    )


async def test_a_streamed_answer_goes_one_event_to_a_message() -> None:
    sink = Sink()
    t = turn(sink)
    events = await t.stream(200, [("content-type", "text/event-stream")])
    await events.send(
        b": keep-alive\n\n"
        b'event: response.created\ndata: {"type":"response.created"}\n\n'
        b'data: {"type":"response.output_text.delta","delta":"a"}\n\n'
    )
    await events.send(b": ping\n\n")
    await events.send(b'event: response.completed\ndata: {"type":"response.completed"}\n\n')
    await events.send(b"data: [DONE]\n\n")
    await events.send(b"")
    await events.close()
    assert sink.sent == [
        b'{"type":"response.created"}',
        b'{"type":"response.output_text.delta","delta":"a"}',
        b'{"type":"response.completed"}',
    ]
    assert t.failed is False
    assert t.bytes_out == sum(map(len, sink.sent))


async def test_a_data_line_inside_a_comment_is_not_an_event() -> None:
    sink = Sink()
    events = await turn(sink).stream(200, [])
    await events.send(b": data: {}\n\n")  # "data: " not at a line's start
    assert sink.sent == []


@pytest.mark.parametrize(
    "last",
    [
        b'event: response.failed\ndata: {"type":"response.failed","response":{}}\n\n',
        b'event: error\ndata: {"type":"error","status":502,"error":{}}\n\n',
    ],
)
async def test_a_terminal_failure_event_marks_the_turn_failed(last: bytes) -> None:
    sink = Sink()
    t = turn(sink)
    events = await t.stream(200, [])
    await events.send(b'data: {"type":"response.created"}\n\n')
    assert t.failed is False
    await events.send(last)
    assert t.failed is True
    assert len(sink.sent) == 2


async def test_an_error_answer_is_the_envelope_with_its_headers() -> None:
    sink = Sink()
    t = turn(sink)
    body = b'{"error":{"message":"slow","type":"rate_limit_error","param":null,"code":"rl"}}'
    headers = [("retry-after", "1"), ("content-type", "application/json")]
    await t.respond(429, headers, body)
    assert t.failed is True
    assert len(sink.sent) == 1
    assert json.loads(sink.sent[0]) == {
        "type": "error",
        "status": 429,
        "error": {"message": "slow", "type": "rate_limit_error", "param": None, "code": "rl"},
        "headers": {"retry-after": "1"},
    }
    assert t.bytes_out == len(sink.sent[0])


async def test_an_error_answer_that_is_not_json_is_its_message() -> None:
    sink = Sink()
    t = turn(sink)
    await t.respond(502, [], b"bad gateway")
    assert json.loads(sink.sent[0])["error"] == {"message": "bad gateway"}
    await t.respond(500, [], b"[1]")  # JSON, not an object
    assert json.loads(sink.sent[1])["status"] == 500


async def test_a_local_answer_under_400_is_sent_as_events() -> None:
    sink = Sink()
    t = turn(sink)
    await t.respond(200, [], b'data: {"type":"response.completed"}\n\n')
    assert sink.sent == [b'{"type":"response.completed"}']
    assert t.failed is False


async def test_the_turn_reads_as_a_post_with_its_body() -> None:
    sink = Sink()
    closed = asyncio.Event()
    t = turn(sink, b"0123456789", closed)
    assert (t.method, t.path, t.query) == ("POST", "/v1/responses", "")
    assert t.header("authorization") == "Bearer k"
    assert t.header("content-length") == "10"  # the message's, not the upgrade's
    assert t.header("x-request-id") is None  # the connection's: each turn gets its own
    assert t.peer == "127.0.0.1:5"
    assert await t.body(BodyPolicy(max_bytes=10)) == b"0123456789"
    with pytest.raises(BodyTooLarge):
        await t.body(BodyPolicy(max_bytes=9))
    waiting = asyncio.ensure_future(t.disconnected())
    await asyncio.sleep(0)
    assert not waiting.done()
    closed.set()
    await asyncio.wait_for(waiting, 1)
