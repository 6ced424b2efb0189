"""Anthropic's Claude Code with flatgate as its API, end to end: the pinned
``@anthropic-ai/claude-code`` (``tests/clients/claude/``, installed by ``make
test`` into ``.venv/clients/claude``) runs ``claude -p`` through the gateway
to the stub in each backend protocol, with a model name Claude Code does not
know, and must end with a ``success`` result holding the stub's echo.

Claude Code speaks the Messages API (``POST {ANTHROPIC_BASE_URL}/v1/messages
?beta=true``), streams, and sends with every turn a system prompt in three
text blocks (two with ``cache_control``), ``thinking: adaptive``,
``output_config.effort``, ``context_management``, ``metadata.user_id``, its
tools, a user message, then a mid-conversation ``system`` message (its
environment, with ``cache_control``) and eight ``anthropic-beta`` values
(``fixtures/claude_request.json``, captured as ``fixtures/SOURCES.md`` says).
A 400 in Anthropic's words about that message (``Unexpected role "system"``)
makes it send the turn again with the message folded into the user turn; any
other 400 makes it retry with fewer betas, then fail. Through an OpenAI
backend (``openai``, ``openai-responses``), what Claude Code sends that
the API has no place for is mapped to nothing and named
(``context_management``, which only clears thinking, and such a backend is
sent none; the cache marks; the betas), and its effort is a reasoning
effort; a field there is no mapping for (``mcp_servers``) is refused, naming
it, unless the backend sets ``drop_unsupported`` (``DROPPING``): then it is
dropped, and named.

With its default model (``claude-opus-5-5``; ``DEFAULT``, reached as
``claude-opus-5-5-echo-<protocol>``: Claude Code knows a model by its name's
prefix) it also puts ``output_config.effort`` on that system message (a
per-message effort, beta ``per-turn-control-2026-07-01``:
``fixtures/claude_request_default.json``), which the gateway maps onto the
request's effort: its first turn is answered, never refused and sent again.

Claude Code runs with no network but the gateway: no update check,
telemetry or error reports, and any other HTTP through a closed proxy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clients.conftest import DROPPING, PROTOCOLS, ROOT, ClientStack, dropping, model, serving

pytestmark = pytest.mark.integration

CLAUDE = ROOT / ".venv" / "clients" / "claude" / "node_modules" / ".bin" / "claude"
FIXTURES = Path(__file__).parent / "fixtures"
KEY = "sk-flatgate-claude"
PROMPT = "flatgate carries every word of this prompt"
# (backend protocol, model) that Claude Code's turn goes through: every
# protocol, and the OpenAI ones also behind a backend that drops what it can
# neither carry nor map. The OpenAI backends without that refuse a field
# with no mapping, naming it (``STRICT``).
TARGETS = [(p, model(p)) for p in PROTOCOLS] + [(p, dropping(p)) for p in DROPPING]
STRICT = [model(p) for p in DROPPING]
# Claude Code's default model, and its captures: with a name it does not
# know, and with its default model (no ``--model``).
DEFAULT = "claude-opus-5-5"
CAPTURES = {"claude_request.json": "house-model", "claude_request_default.json": None}
# Where anything but the API would go: a closed port (no request leaves the host).
_NOWHERE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def claude() -> Path:
    if not CLAUDE.exists():
        raise RuntimeError(f"{CLAUDE} is missing: `make test` installs it")
    return CLAUDE


def claude_env(root: Path, base_url: str, key: str, request_id: str = "") -> dict[str, str]:
    """Claude Code's environment: a fresh home and config directory, the API
    at ``base_url`` with ``key``, no retries, no update check, telemetry, error
    reports or other non-essential traffic, any other HTTP through a closed
    proxy, and ``x-request-id: request_id`` on its requests (unless empty)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "CLAUDE_CONFIG_DIR": str(root / "claude-config"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": key,
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "HTTPS_PROXY": _NOWHERE,
        "HTTP_PROXY": _NOWHERE,
        "NO_PROXY": "127.0.0.1,localhost",
    }
    if request_id:
        env["ANTHROPIC_CUSTOM_HEADERS"] = f"x-request-id: {request_id}"
    return env


def run_claude(
    claude: Path,
    root: Path,
    base_url: str,
    name: str | None,
    prompt: str,
    *,
    request_id: str = "",
) -> tuple[int, list[dict[str, Any]], str]:
    """``claude -p prompt --model name --output-format stream-json --verbose``
    in ``root/project`` (``name`` ``None``: its default model): its exit
    status, its JSON events and its stderr."""
    project = root / "project"
    project.mkdir(exist_ok=True)
    chosen = [] if name is None else ["--model", name]
    done = subprocess.run(
        [str(claude), "-p", prompt, *chosen, "--output-format", "stream-json", "--verbose"],
        cwd=project,
        env=claude_env(root, base_url, KEY, request_id),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def result_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    [result] = [e for e in events if e["type"] == "result"]
    return result


IMAGE_PROMPT = "what color is this image? @shot.png"


def image_answer(root: Path, png: bytes, name: str, env: dict[str, str]) -> str:
    """``claude -p IMAGE_PROMPT --model name`` in ``root/project``, where
    ``shot.png`` holds ``png``, with ``env`` (``claude_env``'s, or a cloud
    mode's): the text of its answer, once it has succeeded."""
    if not CLAUDE.exists():
        raise RuntimeError(f"{CLAUDE} is missing: `make test` installs it")
    project = root / "project"
    project.mkdir(exist_ok=True)
    (project / "shot.png").write_bytes(png)
    done = subprocess.run(
        [str(CLAUDE), "-p", IMAGE_PROMPT, "--model", name, "--output-format", "stream-json",
         "--verbose"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )  # fmt: skip
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result = result_of(events) if any(e["type"] == "result" for e in events) else {}
    assert done.returncode == 0, f"{result.get('result')}\n{done.stderr[-3000:]}"
    assert (result["subtype"], result["is_error"]) == ("success", False)
    return str(result["result"])


def user_turn(messages: list[dict[str, Any]]) -> str:
    """The texts of the last user message, joined: what the stub echoes."""
    [last] = [m for m in messages if m["role"] == "user"][-1:]
    content = last["content"]
    return content if isinstance(content, str) else "".join(b["text"] for b in content)


def reminder() -> str:
    """The ``<system-reminder>`` block Claude Code puts before the prompt."""
    fixture = json.loads((FIXTURES / "claude_request.json").read_text())
    text: str = fixture["messages"][0]["content"][0]["text"]
    assert text.startswith("<system-reminder>")
    return text


def logged(stack: ClientStack, request_id: str, count: int) -> list[dict[str, Any]]:
    def sent_with(e: dict[str, Any]) -> bool:
        return bool(e["request_id"] == request_id)

    return stack.access(sent_with, count)


@pytest.mark.parametrize(("protocol", "name"), TARGETS, ids=[n for _, n in TARGETS])
def test_claude_code_finishes_its_turn_with_any_model_name(
    stack: ClientStack, claude: Path, tmp_path: Path, protocol: str, name: str
) -> None:
    rid = f"claude-{uuid.uuid4().hex}"
    status, events, stderr = run_claude(claude, tmp_path, stack.url, name, PROMPT, request_id=rid)
    result = result_of(events) if any(e["type"] == "result" for e in events) else {}
    assert status == 0, f"claude exited {status}: {result.get('result')}\n{stderr[-3000:]}"
    assert (result["subtype"], result["is_error"]) == ("success", False)
    [init] = [e for e in events if e["type"] == "system" and e.get("subtype") == "init"]
    assert init["model"] == name
    # The user turn is a reminder block and the prompt, and the stub echoes
    # both: the turn was answered as sent (a turn sent again after a 400 about
    # the system message holds that message's text too).
    text = result["result"]
    assert text == reminder() + PROMPT
    # One assistant event per content block of the one answer.
    answer = [e["message"] for e in events if e["type"] == "assistant"]
    assert {(m["id"], m["model"]) for m in answer} == {(answer[0]["id"], name)}
    blocks = [b for m in answer for b in m["content"]]
    assert [b["text"] for b in blocks if b["type"] == "text"] == [text]
    if protocol == "anthropic":
        # Its adaptive thinking reached the backend, which thought first; the
        # thinking block came back with its signature.
        assert blocks[0]["type"] == "thinking" and blocks[0]["signature"], blocks[0]
    # Its effort reached a backend that thinks: thinking tokens count too.
    assert result["usage"]["output_tokens"] >= len(text.split())
    assert result["usage"]["input_tokens"] > len(PROMPT.split())
    [entry] = logged(stack, rid, 1)
    assert (entry["tenant"], entry["model"]) == ("claude", name)
    assert (entry["path"], entry["status"]) == ("/v1/messages", 200)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_claude_codes_default_model_finishes_its_first_turn_without_a_retry(
    stack: ClientStack, claude: Path, tmp_path: Path, protocol: str
) -> None:
    name = model(protocol, DEFAULT)
    rid = f"claude-{uuid.uuid4().hex}"
    status, events, stderr = run_claude(claude, tmp_path, stack.url, name, PROMPT, request_id=rid)
    result = result_of(events) if any(e["type"] == "result" for e in events) else {}
    assert status == 0, f"claude exited {status}: {result.get('result')}\n{stderr[-3000:]}"
    assert (result["subtype"], result["is_error"]) == ("success", False)
    # The turn as sent: the reminder (which names the model) and the prompt,
    # its system message (with its effort) not folded into it after a 400.
    text = result["result"]
    assert text.startswith("<system-reminder>") and text.endswith("</system-reminder>\n" + PROMPT)
    assert text.count("<system-reminder>") == 1
    # One request: the first was answered (a retry would log a 400 first).
    entries = stack.access(lambda e: bool(e["request_id"] == rid), 2, seconds=2)
    assert [(e["path"], e["status"], e["model"]) for e in entries] == [("/v1/messages", 200, name)]


def refused_field(message: str) -> str:
    """The field a refusal names."""
    m = re.search(r"the field '([^']+)' cannot be sent to this backend", message)
    assert m, message
    return m[1]


# -- the captured request, and what Claude Code needs back --------------------


def captured_headers(fixture: str = "claude_request.json") -> dict[str, str]:
    """A captured request's headers, as the gateway is to be sent them."""
    captured = json.loads((FIXTURES / "claude_headers.json").read_text())[fixture]
    headers = {k: v for k, v in captured.items() if k not in ("host", "content-length")}
    return {**headers, "x-api-key": KEY, "accept-encoding": "identity"}


def sse_events(body: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")
    ]


@pytest.mark.parametrize("fixture", CAPTURES)
@pytest.mark.parametrize(("protocol", "name"), TARGETS, ids=[n for _, n in TARGETS])
def test_the_captured_request_streams_the_events_claude_code_reads(
    stack: ClientStack, protocol: str, name: str, fixture: str
) -> None:
    body = json.loads((FIXTURES / fixture).read_text())
    body["model"] = name
    headers = captured_headers(fixture)
    r = httpx.post(f"{stack.url}/v1/messages?beta=true", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    if protocol in DROPPING:
        # An OpenAI backend has no context editing (nor thinking to clear):
        # mapped to nothing, and said so.
        dropped = r.headers["x-flatgate-dropped-fields"].split(",")
        assert "context_management" in dropped
    events = sse_events(r.text)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "error" not in kinds
    expected = user_turn(body["messages"])
    deltas = [
        e["delta"]["text"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    ]
    assert "".join(deltas) == expected
    # The prompt's size, counted by the backend or estimated, as it starts.
    assert events[0]["message"]["usage"]["input_tokens"] > len(expected.split())
    [delta] = [e for e in events if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    # Thinking tokens count too, where its effort reached a backend that thinks.
    assert delta["usage"]["output_tokens"] >= len(expected.split())
    assert events[0]["message"]["model"] == body["model"]


_EMPTY_TEXT = {"type": "text", "text": ""}


@pytest.mark.parametrize("name", STRICT)
def test_a_field_an_openai_backend_cannot_map_is_refused_naming_it(
    stack: ClientStack, name: str
) -> None:
    body = json.loads((FIXTURES / "claude_request.json").read_text())
    body["model"] = name
    # MCP servers the backend would connect to: no OpenAI API has them.
    body["mcp_servers"] = [{"type": "url", "url": "https://mcp.invalid/sse", "name": "x"}]
    headers = captured_headers()
    r = httpx.post(f"{stack.url}/v1/messages?beta=true", json=body, headers=headers, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert refused_field(error["error"]["message"]) == "mcp_servers"
    assert error["request_id"]


class _Recorder(BaseHTTPRequestHandler):
    """Records each request and answers as the Messages API would, minimally."""

    seen: list[tuple[str, dict[str, str], dict[str, Any]]]
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length", "0"))
        headers = {k.lower(): v for k, v in self.headers.items()}
        body = json.loads(self.rfile.read(size))
        self.seen.append((self.path, headers, body))
        message = {
            "id": "msg_recorded",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        text = {"type": "text_delta", "text": "recorded"}
        stop = {"stop_reason": "end_turn"}
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": message},
            {"type": "content_block_start", "index": 0, "content_block": _EMPTY_TEXT},
            {"type": "content_block_delta", "index": 0, "delta": text},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 1}},
            {"type": "message_stop"},
        ]
        data = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[tuple[str, dict[str, str], dict[str, Any]]]]]:
    seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []
    with serving(type("Recorder", (_Recorder,), {"seen": seen})) as port:
        yield f"http://127.0.0.1:{port}", seen


def shape(body: dict[str, Any]) -> dict[str, Any]:
    """What a captured request must keep when Claude Code is upgraded: its
    fields, tools, roles, each message's and block's fields, the blocks'
    cache_control, a message's output_config, its settings (not the texts)."""

    def blocks(content: str | list[dict[str, Any]]) -> list[Any]:
        if isinstance(content, str):
            return ["str"]
        return [(b["type"], sorted(b), b.get("cache_control")) for b in content]

    return {
        "keys": sorted(body),
        "system": blocks(body["system"]),
        "messages": [
            (m["role"], sorted(m), m.get("output_config"), blocks(m["content"]))
            for m in body["messages"]
        ],
        "tools": [(t["name"], sorted(t)) for t in body["tools"]],
        "metadata": sorted(json.loads(body["metadata"]["user_id"])),
        **{k: body.get(k) for k in ("stream", "thinking", "output_config", "context_management")},
    }


@pytest.mark.parametrize("capture", CAPTURES)
def test_the_fixture_is_what_the_pinned_claude_code_sends(
    claude: Path, tmp_path: Path, recorder: Any, capture: str
) -> None:
    url, seen = recorder
    fixture = json.loads((FIXTURES / capture).read_text())
    status, events, stderr = run_claude(claude, tmp_path, url, CAPTURES[capture], "say hi")
    assert status == 0, stderr[-3000:]
    assert result_of(events)["result"] == "recorded"
    [(path, headers, body)] = seen
    assert path == "/v1/messages?beta=true"
    assert shape(body) == shape(fixture)
    assert body["messages"][0]["content"][-1] == {"type": "text", "text": "say hi"}
    assert body["model"] == fixture["model"]
    expected = json.loads((FIXTURES / "claude_headers.json").read_text())[capture]
    assert sorted(headers) == sorted(expected)
    for name in ("anthropic-beta", "anthropic-version", "x-app", "user-agent"):
        assert headers[name] == expected[name], name
    assert headers["x-api-key"] == KEY
