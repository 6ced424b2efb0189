"""OpenAI's Codex CLI with flatgate as its model provider, end to end: the
pinned ``@openai/codex`` (``tests/clients/codex/``, installed by ``make
test`` into ``.venv/clients/codex``) runs ``codex exec`` through the gateway
to the stub in each backend protocol and must finish its turn with the stub's
echo of the prompt.

Codex speaks only the Responses API (``wire_api = "responses"``), streams
(SSE) and sends ``store: false`` with the whole history on every turn, plus
large instructions, ``namespace`` / ``custom`` / ``tool_search`` /
``web_search`` tools, ``include: ["reasoning.encrypted_content"]`` and
``reasoning`` (``fixtures/codex_request*.json``, captured as
``fixtures/SOURCES.md`` says). It takes its final message from
``response.output_item.done`` and needs ``response.completed``; it retries
5xx, 401 and a stream without ``response.completed`` (not here: the tests'
provider allows no retry, so a failure fails at once).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clients.conftest import PROTOCOLS, ROOT, ClientStack, model, serving

pytestmark = pytest.mark.integration

CODEX = ROOT / ".venv" / "clients" / "codex" / "node_modules" / ".bin" / "codex"
FIXTURES = Path(__file__).parent / "fixtures"
KEY = "sk-flatgate-codex"
PROMPT = "flatgate carries every word of this prompt"
# The model families Codex tells apart: one it has no metadata for, and gpt-5.5.
FAMILIES = ("", "gpt-5.5")


def installed_codex() -> Path:
    """The pinned Codex, or an error that says how to install it."""
    if not CODEX.exists():
        raise RuntimeError(f"{CODEX} is missing: `make test` installs it")
    return CODEX


@pytest.fixture(scope="module")
def codex() -> Path:
    return installed_codex()


def codex_home(
    root: Path, base_url: str, name: str, request_id: str, *, websockets: bool = False
) -> Path:
    """A ``CODEX_HOME`` whose ``config.toml`` makes ``base_url`` the model
    provider (sending ``x-request-id: request_id`` too, unless empty; with
    ``supports_websockets = true`` if ``websockets``, so that Codex opens a
    Responses WebSocket): no retries, no update check, no analytics, no plugin
    sync (so nothing but the provider is called)."""
    home = root / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        f"model = {json.dumps(name)}\n"
        'model_provider = "flatgate"\n'
        "check_for_update_on_startup = false\n"
        "\n"
        "[model_providers.flatgate]\n"
        'name = "flatgate"\n'
        f"base_url = {json.dumps(base_url)}\n"
        'env_key = "FLATGATE_KEY"\n'
        'wire_api = "responses"\n'
        + ("supports_websockets = true\n" if websockets else "")
        + "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
        + (f"http_headers = {{ x-request-id = {json.dumps(request_id)} }}\n" if request_id else "")
        + "\n"
        "[analytics]\n"
        "enabled = false\n"
        "\n"
        "[features]\n"
        "plugins = false\n"
        "remote_plugin = false\n"
    )
    return home


def run_codex(
    codex: Path,
    root: Path,
    base_url: str,
    name: str,
    *args: str,
    request_id: str = "",
    key: str = KEY,
    websockets: bool = False,
) -> tuple[int, list[dict[str, Any]], str]:
    """``codex exec --json --skip-git-repo-check <args>`` in ``root/project``
    with the gateway's ``key`` (over a Responses WebSocket if ``websockets``,
    ``codex_home``): its exit status, its JSONL events and its stderr."""
    home = codex_home(root, base_url, name, request_id, websockets=websockets)
    project = root / "project"
    project.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "CODEX_HOME": str(home),
        "FLATGATE_KEY": key,
    }
    done = subprocess.run(
        [str(codex), "exec", "--json", "--skip-git-repo-check", *args],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def echo(protocol: str, prompt: str, context: str = "") -> str:
    """What the stub answers Codex's ``prompt``: the last user message, or,
    through an ``anthropic`` backend, the last user turn (the adapter merges
    consecutive user messages into one, and the stub joins its texts): Codex
    sends its ``<environment_context>`` message (``context``) just before."""
    return context + prompt if protocol == "anthropic" else prompt


def environment_context(events: list[dict[str, Any]], prompt: str) -> str:
    """The ``<environment_context>`` text that an answer through an
    ``anthropic`` backend echoes before ``prompt`` (checked for its shape)."""
    [text] = messages(events) or [""]
    context = text.removesuffix(prompt)
    if context != text:
        assert context.startswith("<environment_context>\n  <cwd>")
        assert context.endswith("</environment_context>")
    return context


def messages(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["item"]["text"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"
    ]


def logged(stack: ClientStack, request_id: str, count: int) -> list[dict[str, Any]]:
    """The access log's entries of the requests sent with ``request_id``
    (waiting for ``count`` of them)."""

    def sent_with(e: dict[str, Any]) -> bool:
        return bool(e["request_id"] == request_id)

    return stack.access(sent_with, count)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f or "unknown-model")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_codex_exec_finishes_its_turn_through_the_gateway(
    stack: ClientStack, codex: Path, tmp_path: Path, protocol: str, family: str
) -> None:
    name = model(protocol, family)
    rid = f"codex-{uuid.uuid4().hex}"
    metric_before = stack.responses_served()
    status, events, stderr = run_codex(
        codex, tmp_path, stack.base_url, name, PROMPT, request_id=rid
    )
    assert status == 0, f"codex exited {status}:\n{stderr[-3000:]}\n{events}"
    context = environment_context(events, PROMPT) if protocol == "anthropic" else ""
    assert messages(events) == [echo(protocol, PROMPT, context)]
    assert not [e for e in events if e["type"] in ("turn.failed", "error")]
    [completed] = [e for e in events if e["type"] == "turn.completed"]
    usage = completed["usage"]
    answered = usage["output_tokens"] - usage["reasoning_output_tokens"]
    assert answered == len(echo(protocol, PROMPT, context).split())
    assert completed["usage"]["input_tokens"] > len(PROMPT.split())
    [entry] = logged(stack, rid, 1)
    assert (entry["tenant"], entry["model"], entry["api"]) == ("codex", name, "openai-responses")
    assert (entry["path"], entry["status"]) == ("/v1/responses", 200)
    assert stack.responses_served() >= metric_before + 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_codex_resumes_a_session_sending_its_history_back(
    stack: ClientStack, codex: Path, tmp_path: Path, protocol: str
) -> None:
    """The second turn carries the first one's items back (``store: false``):
    the assistant's ``message`` item with its id and status, and from a
    Responses-native backend its ``reasoning`` item with the
    ``encrypted_content`` that backend must be able to verify."""
    name = model(protocol)
    rid = f"codex-{uuid.uuid4().hex}"
    status, events, stderr = run_codex(
        codex, tmp_path, stack.base_url, name, "first turn", request_id=rid
    )
    assert status == 0, stderr[-3000:]
    context = environment_context(events, "first turn") if protocol == "anthropic" else ""
    assert messages(events) == [echo(protocol, "first turn", context)]
    status, events, stderr = run_codex(
        codex,
        tmp_path,
        stack.base_url,
        name,
        "resume",
        "--last",
        "second turn here",
        request_id=rid,
    )
    assert status == 0, f"codex exited {status}:\n{stderr[-3000:]}\n{events}"
    assert messages(events) == ["second turn here"]
    [(_, first), (_, second)] = [(e["path"], e["status"]) for e in logged(stack, rid, 2)]
    assert first == second == 200


# -- the captured request, and what Codex needs back ---------------------------


def last_user_turn(items: list[dict[str, Any]]) -> str:
    """The texts of the trailing run of user messages, joined (see ``echo``)."""
    texts: list[str] = []
    for item in reversed(items):
        if item.get("role") != "user":
            break
        texts[:0] = [p["text"] for p in item["content"]]
    return "".join(texts)


def sse_events(body: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in body.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


@pytest.mark.parametrize("name", ["codex_request.json", "codex_request_gpt-5.5.json"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_captured_request_streams_the_events_codex_reads(
    stack: ClientStack, protocol: str, name: str
) -> None:
    body = json.loads((FIXTURES / name).read_text())
    body["model"] = model(protocol, "gpt-5.5" if "gpt-5.5" in name else "")
    captured = json.loads((FIXTURES / "codex_headers.json").read_text())[name]
    headers = {k: v for k, v in captured.items() if k not in ("host", "content-length")}
    headers["authorization"] = f"Bearer {KEY}"
    r = httpx.post(f"{stack.base_url}/responses", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    if protocol != "fbs":  # an fbs backend gets every field, in the request's extras
        # No stub runs hosted tools: Codex's web_search is left out, and said so.
        assert "tools[web_search]" in r.headers["x-flatgate-dropped-fields"].split(",")
    events = sse_events(r.text)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    seq = [e["sequence_number"] for e in events]
    assert seq == sorted(set(seq)), "sequence_number must strictly increase"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    texts = [p["text"] for i in done if i["type"] == "message" for p in i["content"]]
    expected = last_user_turn(body["input"]) if protocol == "anthropic" else "say hi"
    assert texts == [expected]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == expected
    final = events[-1]["response"]
    assert final["id"].startswith("resp_") and final["status"] == "completed"
    usage = final["usage"]
    reasoning = usage["output_tokens_details"]["reasoning_tokens"]
    assert usage["output_tokens"] - reasoning == len(expected.split())
    assert final["usage"]["total_tokens"] == (
        final["usage"]["input_tokens"] + final["usage"]["output_tokens"]
    )


class _Recorder(BaseHTTPRequestHandler):
    """Records one request and answers as the Responses API would, minimally."""

    seen: list[tuple[dict[str, str], dict[str, Any]]]
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length", "0"))
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.seen.append((headers, json.loads(self.rfile.read(size))))
        item = {
            "id": "msg_1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "recorded", "annotations": []}],
        }
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {"id": "resp_1", "output": []}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": {"id": "resp_1", "output": [item]}},
        ]
        data = b"".join(
            f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': i})}\n\n".encode()
            for i, e in enumerate(events)
        )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[tuple[dict[str, str], dict[str, Any]]]]]:
    seen: list[tuple[dict[str, str], dict[str, Any]]] = []
    with serving(type("Recorder", (_Recorder,), {"seen": seen})) as port:
        yield f"http://127.0.0.1:{port}/v1", seen


def shape(body: dict[str, Any]) -> dict[str, Any]:
    """What a captured request must keep when Codex is upgraded: its fields,
    its tools, its input items' roles and its settings (not the texts)."""
    return {
        "keys": sorted(body),
        "tools": [(t["type"], t.get("name")) for t in body["tools"]],
        "roles": [(i["type"], i.get("role")) for i in body["input"]],
        "last": body["input"][-1]["content"],
        **{k: body.get(k) for k in ("include", "store", "stream", "reasoning", "text")},
        **{k: body.get(k) for k in ("tool_choice", "parallel_tool_calls")},
    }


@pytest.mark.parametrize("name", ["codex_request.json", "codex_request_gpt-5.5.json"])
def test_the_fixture_is_what_the_pinned_codex_sends(
    codex: Path, tmp_path: Path, recorder: Any, name: str
) -> None:
    url, seen = recorder
    fixture = json.loads((FIXTURES / name).read_text())
    status, events, stderr = run_codex(codex, tmp_path, url, fixture["model"], "say hi")
    assert status == 0, stderr[-3000:]
    assert messages(events) == ["recorded"]
    [(headers, body)] = seen
    assert shape(body) == shape(fixture)
    expected = json.loads((FIXTURES / "codex_headers.json").read_text())[name]
    assert sorted(headers) == sorted(expected)
    assert headers["originator"] == expected["originator"] == "codex_exec"
    assert headers["authorization"] == f"Bearer {KEY}"
