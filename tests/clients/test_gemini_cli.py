"""Google's Gemini CLI with flatgate as its Gemini API, end to end: the pinned
``@google/gemini-cli`` (``tests/clients/gemini_cli/``, installed by ``make
test`` into ``.venv/clients/gemini_cli``) runs ``gemini -p`` through the
gateway to the stub in each backend protocol (``every_backend``), with a
model name it does not know, and must exit 0 with the stub's echo as its
answer. An ``fbs``, ``gemini`` or ``vertex`` (Gemini) backend takes its turn
whole; an ``openai``, ``anthropic``, ``bedrock`` (Converse, and InvokeModel
for Claude) or ``vertex`` Claude one takes it with its ``thinkingConfig``
named (mapped to nothing); an ``openai-responses`` one refuses its ``top_k``
by name, so it is reached through a backend with ``drop_unsupported``
(``TARGETS``).

Gemini CLI speaks the Gemini API (``POST {GOOGLE_GEMINI_BASE_URL}/v1beta/
models/{model}:streamGenerateContent?alt=sse``, the key as
``x-goog-api-key``) and sends with its first turn a 38 KB body: a 30 KB
``systemInstruction``, its tools as ``functionDeclarations`` with
``parametersJsonSchema``, ``generationConfig`` with ``temperature``,
``topP``, ``topK`` and ``thinkingConfig.includeThoughts``, and a user turn
of two text parts, its ``<session_context>`` then the prompt
(``fixtures/gemini_cli_request.json``, captured by
``gemini_cli/capture.py`` as ``fixtures/SOURCES.md`` says). The fixture is
checked to be what the pinned CLI sends, to decode as the API's request
(``apis.gemini``), and to pass through the edge to every backend.

Gemini CLI runs with no network but loopback: a fresh home whose
``.gemini/settings.json`` (``SETTINGS``) turns off usage statistics (with
them on it resolves Google's logging host at start), telemetry, update
checks, IDE integration, folder trust prompts, retries, checkpointing and
session cleanup, and any other HTTP through a closed proxy (Gemini CLI
honours ``HTTPS_PROXY``; ``NO_PROXY`` spares loopback).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import httpx
import msgspec
import pytest

from flatgate.edge_translator.gemini.translate import write_gemini
from flatgate.proxy.apis.gemini.answer import GenerateContentResponse
from flatgate.proxy.apis.gemini.request import decode_request
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.verify import verify_request
from tests.clients.conftest import ROOT, serving
from tests.clients.every_backend import DROPPING, KEY, WAYS, dropping, every_backend, model
from tests.servers import Server

pytestmark = pytest.mark.integration

GEMINI = ROOT / ".venv" / "clients" / "gemini_cli" / "node_modules" / ".bin" / "gemini"
FIXTURE = Path(__file__).parent / "fixtures" / "gemini_cli_request.json"
PROMPT = "flatgate carries every word of this prompt"
# The model Gemini CLI is given: a name it has no settings for.
CAPTURED_MODEL = "house-model"
# Gemini CLI's user settings (``~/.gemini/settings.json``): nothing but the
# API on loopback, no prompt, one attempt.
SETTINGS: dict[str, Any] = {
    "general": {
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
        "maxAttempts": 1,
        "retryFetchErrors": False,
        "checkpointing": {"enabled": False},
        "sessionRetention": {"enabled": False},
    },
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False, "logPrompts": False},
    "ide": {"enabled": False, "hasSeenNudge": True},
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "model": {"disableLoopDetection": True},
}
# Where anything but the API would go: a closed port (no request leaves the host).
_NOWHERE = "http://127.0.0.1:9"
# (way, model) that Gemini CLI's turn goes through (``every_backend.WAYS``):
# every way that takes its first turn as it is (fbs, gemini and vertex's
# Gemini whole; openai, anthropic, bedrock's Converse and InvokeModel and
# vertex's Claude with its thinkingConfig named, mapped to nothing: the backend decides how
# much to think), and openai-responses behind a backend that drops what it
# can neither carry nor map (the Responses API has no top_k, which the CLI
# always sends: refused by name without drop_unsupported).
WHOLE = ("fbs", "gemini", "vertex")
STRICT = (*WHOLE, "openai", "anthropic", "bedrock", "bedrock-invoke", "vertex-claude")
TARGETS = [(w, model(w)) for w in WAYS if w in STRICT] + [
    (p, dropping(p)) for p in DROPPING if p not in STRICT
]
# What a capture's request holds that is the capture's own, and its placeholder.
_PLACEHOLDERS = {"host": "127.0.0.1:PORT", "content-length": "N", "x-goog-api-key": "KEY"}


def gemini_env(root: Path, base_url: str, key: str) -> dict[str, str]:
    """Gemini CLI's environment: ``root`` its home, holding ``SETTINGS``, and
    its temporary directory (``root/tmp``), the API at ``base_url`` with
    ``key``, the workspace trusted, and any other HTTP through a closed
    proxy."""
    (root / ".gemini").mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    (root / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS, indent=2))
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        # Its error reports go to the temporary directory.
        "TMPDIR": str(root / "tmp"),
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_API_KEY": key,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_COLOR": "1",
        "HTTPS_PROXY": _NOWHERE,
        "HTTP_PROXY": _NOWHERE,
        "NO_PROXY": "127.0.0.1,localhost",
    }


def run_gemini(root: Path, base_url: str, key: str, name: str, prompt: str) -> tuple[int, Any, str]:
    """``gemini -p prompt -m name --output-format json`` in ``root/project``:
    its exit status, its JSON report (``None`` if it printed none) and its
    stderr."""
    if not GEMINI.exists():
        raise RuntimeError(f"{GEMINI} is missing: `make test` installs it")
    project = root / "project"
    project.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(GEMINI), "-p", prompt, "-m", name, "--output-format", "json"],
        cwd=project,
        env=gemini_env(root, base_url, key),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    start = done.stdout.find("{")
    report = json.loads(done.stdout[start:]) if start >= 0 else None
    return done.returncode, report, done.stderr


class Recorder(BaseHTTPRequestHandler):
    """A loopback stand-in for the Gemini API: keeps each request (method,
    path, headers, JSON body) in ``seen`` and answers a
    ``streamGenerateContent`` with one event of ``ANSWER`` (anything else:
    404)."""

    seen: ClassVar[list[dict[str, Any]]]
    ANSWER: ClassVar[dict[str, Any]] = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "recorded"}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4},
        "modelVersion": CAPTURED_MODEL,
        "responseId": "recorded-1",
    }

    def _record(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(size) if size else b""
        self.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": json.loads(body) if body else None,
            }
        )

    def _reply(self, status: int, kind: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._record()
        self._reply(404, "application/json", b"{}")

    def do_POST(self) -> None:
        self._record()
        if ":streamGenerateContent" in self.path:
            event = b"data: " + json.dumps(self.ANSWER).encode() + b"\r\n\r\n"
            self._reply(200, "text/event-stream", event)
        else:
            self._reply(404, "application/json", b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def capture(root: Path) -> list[dict[str, Any]]:
    """Every request ``gemini -p PROMPT -m CAPTURED_MODEL`` sends the
    recorder, home ``root``, once it has exited 0 with the recorder's answer."""
    seen: list[dict[str, Any]] = []
    handler = type("Recording", (Recorder,), {"seen": seen})
    with serving(handler) as port:
        status, report, stderr = run_gemini(
            root, f"http://127.0.0.1:{port}", "test-key", CAPTURED_MODEL, PROMPT
        )
    assert status == 0 and report is not None, f"gemini exited {status}\n{stderr[-3000:]}"
    assert report["response"] == "recorded"
    return seen


def scrub(request: dict[str, Any], root: Path) -> dict[str, Any]:
    """``request`` with its home and project paths as ``/path/to/...`` and
    ``_PLACEHOLDERS`` for the headers that are the capture's own."""
    headers = {k: _PLACEHOLDERS.get(k, v) for k, v in request["headers"].items()}
    text = json.dumps({**request, "headers": headers})
    for path, placeholder in ((root / "project", "/path/to/project"), (root, "/path/to/home")):
        text = text.replace(json.dumps(str(path))[1:-1], placeholder)
    scrubbed: dict[str, Any] = json.loads(text)
    return scrubbed


def shape(request: dict[str, Any]) -> dict[str, Any]:
    """What a Gemini CLI request is made of, without its words: the method
    and path, the header names and the user agent's product (not its
    platform), the body's members, its
    generation config, its tools (names and members) and its contents
    (roles and part members), and its last text."""
    body = request["body"]
    return {
        "method": request["method"],
        "path": request["path"],
        "headers": sorted(request["headers"]),
        "user-agent": request["headers"]["user-agent"].split(" (")[0],
        "members": sorted(body),
        "generationConfig": body["generationConfig"],
        "tools": [
            {d["name"]: sorted(d) for d in tool["functionDeclarations"]} for tool in body["tools"]
        ],
        "contents": [(c["role"], [sorted(p) for p in c["parts"]]) for c in body["contents"]],
        "last": body["contents"][-1]["parts"][-1]["text"],
    }


def fixture() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FIXTURE.read_text())
    return loaded


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("gemini-home")
    yield [scrub(r, root) for r in capture(root)]


def test_the_fixture_is_what_the_pinned_gemini_cli_sends(
    captured: list[dict[str, Any]],
) -> None:
    # One request, the turn: no model list, token count or other call first.
    [request] = captured
    assert shape(request) == shape(fixture())


def test_the_fixture_is_gemini_cli_s_large_first_turn() -> None:
    request = fixture()
    body = request["body"]
    assert request["path"] == f"/v1beta/models/{CAPTURED_MODEL}:streamGenerateContent?alt=sse"
    assert len(json.dumps(body)) > 30_000
    assert len(body["systemInstruction"]["parts"][0]["text"]) > 25_000
    declarations = [d for tool in body["tools"] for d in tool["functionDeclarations"]]
    assert declarations and all("parametersJsonSchema" in d for d in declarations)
    config = body["generationConfig"]
    assert config["topK"] and config["thinkingConfig"]["includeThoughts"] is True
    assert body["contents"][-1]["parts"][-1]["text"] == PROMPT


def test_the_fixture_decodes_as_a_gemini_request() -> None:
    body = fixture()["body"]
    request = decode_request(json.dumps(body).encode())
    assert request.system_instruction is not None
    assert request.tools and request.tools[0].function_declarations
    [declaration, *_] = request.tools[0].function_declarations
    assert len(declaration.parameters_json_schema)
    assert request.generation_config is not None
    assert request.generation_config.top_k == body["generationConfig"]["topK"]
    [turn] = request.contents
    assert [p.text for p in turn.parts][-1] == PROMPT


def test_the_edge_translates_the_fixture_whole() -> None:
    """Every field of it carried: the system instruction, the turn, each
    tool with its schema, the sampling slots; the thinking config an extra
    in Gemini's dialect."""
    body = fixture()["body"]
    buf = write_gemini(
        decode_request(json.dumps(body).encode()), provider=2, model_name=CAPTURED_MODEL,
        stream=True,
    )  # fmt: skip
    verify_request(buf)
    wire = read_request(buf)
    assert [m.role for m in wire.messages] == ["system", "user"]
    assert wire.messages[0].content == body["systemInstruction"]["parts"][0]["text"]
    assert (wire.messages[1].content or "").endswith(PROMPT)
    declarations = body["tools"][0]["functionDeclarations"]
    assert [t.function.name for t in wire.tools] == [d["name"] for d in declarations]
    for tool, declaration in zip(wire.tools, declarations, strict=True):
        assert tool.function.parameters is not None
        assert json.loads(bytes(tool.function.parameters)) == declaration["parametersJsonSchema"]
    config = body["generationConfig"]
    # The wire's sampling slots are 32-bit floats.
    assert (wire.temperature, wire.top_p) == pytest.approx((config["temperature"], config["topP"]))
    assert wire.top_k == config["topK"]
    assert json.loads(wire.extras) == {
        "generationConfig": {"thinkingConfig": config["thinkingConfig"]}
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with every_backend(tmp_path_factory.mktemp("gemini-cli")) as gateway:
        yield gateway


@pytest.mark.parametrize(("way", "name"), TARGETS, ids=[n for _, n in TARGETS])
def test_gemini_cli_finishes_its_turn_through_any_backend(
    gateway: Server, tmp_path: Path, way: str, name: str
) -> None:
    status, report, stderr = run_gemini(tmp_path, gateway.url, KEY, name, PROMPT)
    assert status == 0 and report is not None, f"gemini exited {status}\n{stderr[-3000:]}"
    assert "error" not in report, report["error"]
    # The stub echoes the last user turn: the session context, then the prompt.
    assert report["response"].rstrip().endswith(PROMPT), report["response"]
    # One request, answered (its stats are filed under the answer's modelVersion).
    [api] = [m["api"] for m in report["stats"]["models"].values()]
    assert (api["totalRequests"], api["totalErrors"]) == (1, 0)


@pytest.mark.parametrize(("way", "name"), TARGETS, ids=[n for _, n in TARGETS])
def test_the_fixture_streams_through_the_edge_to_any_backend(
    gateway: Server, way: str, name: str
) -> None:
    request = fixture()
    sent = {k: v for k, v in request["headers"].items() if k not in _PLACEHOLDERS}
    answer = httpx.post(
        gateway.url + request["path"].replace(CAPTURED_MODEL, name),
        content=json.dumps(request["body"]).encode(),
        headers={**sent, "accept-encoding": "identity", "x-goog-api-key": KEY},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream")
    if way in WHOLE:
        assert "x-flatgate-dropped-fields" not in answer.headers
    elif way in STRICT:
        assert answer.headers["x-flatgate-dropped-fields"] == "generationConfig.thinkingConfig"
    events = [
        msgspec.json.decode(line[len("data: ") :], type=GenerateContentResponse)
        for line in answer.text.splitlines()
        if line.startswith("data: ")
    ]
    parts = [p for e in events for c in e.candidates or [] if c.content for p in c.content.parts]
    text = "".join(p.text or "" for p in parts if not p.thought)
    assert text.rstrip().endswith(PROMPT), text
    last = (events[-1].candidates or [])[-1]
    assert last.finish_reason == "STOP"
