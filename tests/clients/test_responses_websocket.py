"""The Responses API's WebSocket mode (``ws://.../v1/responses``) driven by
the clients that speak it, through ``flatgate gateway`` to the stub behind
every backend way (``every_backend``; each stub echoes the last user input):

- the openai SDK's ``client.responses.connect()``: a turn, then a ``store:
  false`` continuation by ``previous_response_id`` with only the new input,
  on every way; a ``store: true`` response continued on a new socket (from
  the stored responses), and a ``store: false`` one there refused
  ``previous_response_not_found``;
- Codex (pinned, ``test_codex``'s) with ``supports_websockets = true``:
  ``codex exec`` finishes its turn over one socket, and the gateway's JSON
  access log shows how: the socket (``GET``, 101), Codex's warmup
  (``generate: false``) answered at the edge (no backend), then the turn
  continuing it (200, a backend);
- the Open Responses suite's seven WebSocket scenarios (``bin/compliance-test.ts``
  of ``openresponses/openresponses`` at ``92c12d96``), their exchanges
  re-expressed with the ``websockets`` library's client on every backend
  protocol.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.clients.conftest import ClientStack
from tests.clients.every_backend import KEY, PROTOCOLS, WAYS, every_backend, model
from tests.clients.test_codex import (
    echo,
    environment_context,
    installed_codex,
    messages,
    run_codex,
)

pytestmark = pytest.mark.integration

# The events that end a turn on the socket.
TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")
# How long a turn may take before the test gives up on it (the stubs answer at once).
TURN_SECONDS = 30.0
NOT_FOUND = "previous_response_not_found"
# The openai SDK (3.57) opens its socket with websockets' sync ``connect()``
# outside a ``with``, which websockets 17.1+ warns is deprecated.
SDK_CONNECT_WARNING = pytest.mark.filterwarnings(
    "ignore:connect\\(\\) must be used as a context manager:DeprecationWarning"
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientStack]:
    with every_backend(tmp_path_factory.mktemp("responses-websocket")) as gateway:
        stack = ClientStack(gateway)
        try:
            yield stack
        finally:
            stack.close()


# -- the openai SDK's client.responses.connect() ---------------------------------


def sdk_turn(conn: Any, **body: Any) -> Any:
    """Send one ``response.create``; its terminal event."""
    conn.send({"type": "response.create", **body})
    for event in conn:
        if event.type in TERMINAL:
            return event
    raise AssertionError("the socket closed before the turn ended")


def completed(event: Any) -> Any:
    assert event.type == "response.completed", event.to_json()
    assert event.response.status == "completed"
    return event.response


def continued(conn: Any, way: str, first: Any, text: str) -> Any:
    """A ``store: false`` turn of ``text`` continuing ``first`` by its id:
    its response, checked to echo ``text`` and to name ``first`` its
    previous one."""
    second = completed(
        sdk_turn(conn, model=model(way), store=False, previous_response_id=first.id, input=text)
    )
    assert second.output_text == text
    assert second.previous_response_id == first.id
    # The backend was sent the first turn too (its input and its answer).
    assert second.usage.input_tokens > first.usage.input_tokens
    return second


@SDK_CONNECT_WARNING
@pytest.mark.parametrize("way", WAYS)
def test_the_sdk_continues_a_store_false_response_on_its_socket(
    stack: ClientStack, way: str
) -> None:
    with stack.client(KEY).responses.connect() as conn:
        first = completed(
            sdk_turn(conn, model=model(way), store=False, input="Remember the word cobalt.")
        )
        assert first.output_text == "Remember the word cobalt."
        second = continued(conn, way, first, "Which word was it?")
    assert second.id != first.id


@SDK_CONNECT_WARNING
@pytest.mark.parametrize("way", WAYS)
def test_the_sdk_continues_a_stored_response_on_a_new_socket(stack: ClientStack, way: str) -> None:
    client = stack.client(KEY)
    with client.responses.connect() as conn:
        first = completed(
            sdk_turn(conn, model=model(way), store=True, input="Remember the word slate.")
        )
    assert first.output_text == "Remember the word slate."
    with client.responses.connect() as conn:
        continued(conn, way, first, "And now, which word?")


@SDK_CONNECT_WARNING
def test_the_sdk_cannot_continue_a_store_false_response_on_a_new_socket(
    stack: ClientStack,
) -> None:
    client = stack.client(KEY)
    with client.responses.connect() as conn:
        first = completed(sdk_turn(conn, model=model("fbs"), store=False, input="Kept here."))
    with client.responses.connect() as conn:
        refused = sdk_turn(
            conn, model=model("fbs"), store=False, previous_response_id=first.id, input="Again?"
        )
        assert refused.type == "error", refused.to_json()
        assert refused.status == 404
        assert refused.error.code == NOT_FOUND
        assert refused.error.param == "previous_response_id"
        assert first.id in refused.error.message
        # The socket stays usable.
        again = completed(sdk_turn(conn, model=model("fbs"), store=False, input="Fresh start."))
    assert again.output_text == "Fresh start."


# -- Codex with supports_websockets ------------------------------------------------

CODEX_PROMPT = "flatgate answers this over one socket"
# The backends Codex is driven through over a socket: fbs, Chat Completions, Messages.
CODEX_PROTOCOLS = ("fbs", "openai", "anthropic")


def run_codex_over_socket(
    root: Path, base_url: str, name: str, args: list[str], request_id: str
) -> tuple[int, list[dict[str, Any]], str]:
    """``test_codex.run_codex`` with this stack's key and its provider's
    ``supports_websockets = true``: its exit status, JSONL events, stderr."""
    codex = installed_codex()
    return run_codex(
        codex, root, base_url, name, *args, request_id=request_id, key=KEY, websockets=True
    )


def _at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["ts"])


def socket_lines(
    stack: ClientStack, request_id: str, name: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The access log's line for the socket upgraded with ``request_id``
    (written when it closed), and the lines of the turns of ``name`` written
    while it was open, in order."""
    [upgrade] = stack.access(lambda e: e["request_id"] == request_id and e["method"] == "GET")
    ended = _at(upgrade)
    began = ended - timedelta(milliseconds=upgrade["duration_ms"])
    turns = [
        e
        for e in stack.access(lambda e: e["method"] == "POST" and e["model"] == name)
        if began <= _at(e) <= ended
    ]
    return upgrade, turns


@pytest.mark.parametrize("protocol", CODEX_PROTOCOLS)
def test_codex_finishes_its_turn_over_one_socket(
    stack: ClientStack, tmp_path: Path, protocol: str
) -> None:
    name = model(protocol)
    rid = f"codex-socket-{uuid.uuid4().hex}"
    status, events, stderr = run_codex_over_socket(
        tmp_path, stack.base_url, name, [CODEX_PROMPT], rid
    )
    assert status == 0, f"codex exited {status}:\n{stderr[-3000:]}\n{events}"
    assert not [e for e in events if e["type"] in ("turn.failed", "error")]
    context = environment_context(events, CODEX_PROMPT) if protocol == "anthropic" else ""
    assert messages(events) == [echo(protocol, CODEX_PROMPT, context)]
    upgrade, turns = socket_lines(stack, rid, name)
    assert (upgrade["path"], upgrade["status"], upgrade["api"]) == (
        "/v1/responses",
        101,
        "openai-responses",
    )
    assert upgrade["tenant"] == "gemini-clients"
    # The warmup (generate: false), answered at the edge; then the turn that
    # continues it by previous_response_id, sent only the new input.
    [warmup, turn] = turns
    assert (warmup["status"], warmup["backend"], warmup["completion_tokens"]) == (200, None, None)
    assert (turn["status"], turn["backend"]) == (200, f"stub-{protocol}")
    assert turn["completion_tokens"] == len(echo(protocol, CODEX_PROMPT, context).split())
    assert turn["bytes_in"] < warmup["bytes_in"]
    # Codex closed its socket once its turn was done.
    assert upgrade["error"] == "client_closed"


def test_codex_resumes_its_session_over_a_new_socket(stack: ClientStack, tmp_path: Path) -> None:
    """``codex exec resume --last``: a new process, so a new socket, whose
    turn carries the first session's items back (``store: false``) through
    an ``anthropic`` backend, which takes only alternating turns."""
    name = model("anthropic")
    rid = f"codex-socket-{uuid.uuid4().hex}"
    status, events, stderr = run_codex_over_socket(
        tmp_path, stack.base_url, name, ["first turn"], rid
    )
    assert status == 0, stderr[-3000:]
    context = environment_context(events, "first turn")
    assert messages(events) == [echo("anthropic", "first turn", context)]
    status, events, stderr = run_codex_over_socket(
        tmp_path, stack.base_url, name, ["resume", "--last", "second turn here"], rid
    )
    assert status == 0, f"codex exited {status}:\n{stderr[-3000:]}\n{events}"
    assert messages(events) == ["second turn here"]
    upgrades = stack.access(lambda e: e["request_id"] == rid and e["method"] == "GET", 2)
    assert [(e["status"], e["error"]) for e in upgrades] == [(101, "client_closed")] * 2


# -- the Open Responses suite's WebSocket scenarios ------------------------------


def open_socket(stack: ClientStack) -> ClientConnection:
    url = stack.base_url.replace("http://", "ws://", 1) + "/responses"
    return connect(url, additional_headers={"Authorization": f"Bearer {KEY}"})


def ws_turn(ws: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    """Send one ``response.create``; its events, up to the terminal one."""
    ws.send(json.dumps({"type": "response.create", **body}))
    events: list[dict[str, Any]] = []
    while True:
        message = ws.recv(timeout=TURN_SECONDS)
        assert isinstance(message, str), "every event is a text message"
        events.append(json.loads(message))
        if events[-1]["type"] in TERMINAL:
            return events


def final(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The completed response a turn's events end with, checked for the
    stream's shape: created first, sequence numbers increasing, the text's
    deltas adding up to its output text."""
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    seq = [e["sequence_number"] for e in events]
    assert seq == sorted(set(seq))
    response: dict[str, Any] = events[-1]["response"]
    assert response["status"] == "completed"
    assert response["id"] == events[0]["response"]["id"]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == text_of(response)
    return response


def text_of(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def error_code(events: list[dict[str, Any]]) -> str | None:
    """A failed turn's code: the error event's, or the failed response's."""
    last = events[-1]
    if last["type"] == "error":
        assert isinstance(last["status"], int)
        code: str | None = last["error"]["code"]
        return code
    if last["type"] == "response.failed":
        failure: dict[str, str | None] = last["response"].get("error") or {}
        return failure.get("code")
    return None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_websocket_response(stack: ClientStack, protocol: str) -> None:
    with open_socket(stack) as ws:
        events = ws_turn(
            ws,
            model=model(protocol),
            input=[{"type": "message", "role": "user", "content": "Count from 1 to 3."}],
        )
    response = final(events)
    assert text_of(response) == "Count from 1 to 3."
    assert response["object"] == "response"
    assert response["previous_response_id"] is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_websocket_sequential_responses(stack: ClientStack, protocol: str) -> None:
    with open_socket(stack) as ws:
        answers = [
            final(ws_turn(ws, model=model(protocol), store=False, input=f"Reply: {word}"))
            for word in ("first", "second")
        ]
    assert [text_of(a) for a in answers] == ["Reply: first", "Reply: second"]
    assert answers[0]["id"] != answers[1]["id"]
    assert answers[1]["previous_response_id"] is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_websocket_continuation(stack: ClientStack, protocol: str) -> None:
    with open_socket(stack) as ws:
        first = final(
            ws_turn(ws, model=model(protocol), store=False, input="The code word is cobalt.")
        )
        second = final(
            ws_turn(
                ws,
                model=model(protocol),
                store=False,
                previous_response_id=first["id"],
                input="What is the code word?",
            )
        )
    assert text_of(second) == "What is the code word?"
    assert second["previous_response_id"] == first["id"]
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_websocket_reconnect_store_false_then_recovery(stack: ClientStack, protocol: str) -> None:
    with open_socket(stack) as ws:
        first = final(
            ws_turn(ws, model=model(protocol), store=False, input="The code word is copper.")
        )
    with open_socket(stack) as ws:
        missed = ws_turn(
            ws,
            model=model(protocol),
            store=False,
            previous_response_id=first["id"],
            input="Continue after reconnecting.",
        )
        recovered = final(
            ws_turn(
                ws,
                model=model(protocol),
                store=False,
                input=[{"type": "message", "role": "user", "content": "Start again: recovered"}],
            )
        )
    assert [e["type"] for e in missed] == ["error"]
    assert error_code(missed) == NOT_FOUND
    assert missed[0]["status"] == 404
    assert text_of(recovered) == "Start again: recovered"
    assert recovered["previous_response_id"] is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_websocket_previous_response_not_found(stack: ClientStack, protocol: str) -> None:
    missing = f"resp_missing_{uuid.uuid4().hex}"
    with open_socket(stack) as ws:
        events = ws_turn(
            ws,
            model=model(protocol),
            store=False,
            previous_response_id=missing,
            input="There is nothing before this.",
        )
    assert [e["type"] for e in events] == ["error"]
    assert error_code(events) == NOT_FOUND
    assert events[0]["error"]["param"] == "previous_response_id"
    assert missing in events[0]["error"]["message"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_websocket_failed_continuation_evicts_what_it_continued(
    stack: ClientStack, protocol: str
) -> None:
    with open_socket(stack) as ws:
        first = final(
            ws_turn(ws, model=model(protocol), store=False, input="The code word is ember.")
        )
        failed = ws_turn(
            ws,
            model=model(protocol),
            store=False,
            previous_response_id=first["id"],
            input=[
                {
                    "type": "function_call_output",
                    "call_id": "call_that_was_never_made",
                    "output": "No call of this id exists before it.",
                }
            ],
        )
        stale = ws_turn(
            ws,
            model=model(protocol),
            store=False,
            previous_response_id=first["id"],
            input="Continue after the failed turn.",
        )
        # The socket itself is fine: a new chain starts.
        fresh = final(ws_turn(ws, model=model(protocol), store=False, input="New chain."))
    # A call_id no call made is refused at the edge, on every protocol.
    assert [e["type"] for e in failed] == ["error"]
    assert (failed[0]["status"], error_code(failed)) == (400, "invalid_request")
    assert failed[0]["error"]["param"] == "input.[0].call_id"
    assert [e["type"] for e in stale] == ["error"]
    assert error_code(stale) == NOT_FOUND
    assert text_of(fresh) == "New chain."


# The protocols whose adapters merge consecutive user messages into one turn
# (the stub echoes that turn's texts, joined).
MERGING = ("anthropic", "gemini", "bedrock", "vertex")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_websocket_compacted_window_starts_a_new_chain(stack: ClientStack, protocol: str) -> None:
    conversation = [
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "The compaction code word is slate."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "OK."}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Compress this for later."}]},
    ]  # fmt: skip
    r = httpx.post(
        f"{stack.base_url}/responses/compact",
        json={"model": model(protocol), "input": conversation},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=TURN_SECONDS,
    )
    assert r.status_code == 200, r.text
    compacted = r.json()
    assert compacted["object"] == "response.compaction"
    window = compacted["output"]
    assert [i["type"] for i in window][-1] == "compaction"
    with open_socket(stack) as ws:
        response = final(
            ws_turn(
                ws,
                model=model(protocol),
                store=False,
                tools=[],
                input=[
                    *window,
                    {"type": "message", "role": "user", "content": "Continue: compacted"},
                ],
            )
        )
    assert response["previous_response_id"] is None
    echoed = text_of(response)
    if protocol in MERGING:
        # The window's user messages, the compaction's summary and the new
        # message are one user turn there, echoed whole.
        assert echoed.startswith("The compaction code word is slate.")
        assert "Summary of the earlier conversation, compacted" in echoed
        assert echoed.endswith("Continue: compacted")
    else:
        assert echoed == "Continue: compacted"
