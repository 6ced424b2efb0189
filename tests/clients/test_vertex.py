"""Vertex AI through ``flatgate gateway``: Claude Code and the anthropic SDK
reach Claude through the Anthropic publisher (``:rawPredict`` /
``:streamRawPredict``), the openai SDK reaches Gemini through Google's
(``:generateContent``), each with an image, on ``flatgate stub --protocol
vertex``; every server a ``flatgate`` subprocess on loopback.

The gateway's tokens come from google-auth's Application Default
Credentials: ``GOOGLE_APPLICATION_CREDENTIALS`` names a service account's key
made for the test, whose ``token_uri`` is a token endpoint on loopback
(``tests.backends.vertex.google_fakes.TokenEndpoint``: PyJWT checks each
assertion) handing out tokens ``<stub key>.<n>`` that live 302 s, so the
gateway fetches a new one every 2 s or so (300 s before each expires): the
stub sees the token change. The metadata server is not looked for
(``NO_GCE_CHECK``) and, were it asked, is a closed port on loopback; gcloud's
configuration is an empty directory: nothing leaves loopback, which a guard
in the gateway's processes checks (``tests.loopback.guard_env``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.backends.vertex.google_fakes import TokenEndpoint, serve, service_account_key
from tests.clients.cloud import CloudStack, first_answer, google_env, image_turn
from tests.clients.media import b64, image_echo, png
from tests.clients.test_claude_code import IMAGE_PROMPT, claude_env, image_answer
from tests.loopback import guard_env, guard_log
from tests.servers import Server, spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-flatgate-vertex"
# The stub's key: the tokens the token endpoint hands out begin with it.
SECRET = "vertex-stub-token"
CLAUDE_ID = "claude-sonnet-4-5@20250929"
PNG = png()
TEXT = "flatgate reaches vertex"
# route (the client's model name) -> (location, Vertex's model id)
ROUTES = {
    "claude-vertex": ("us-east5", CLAUDE_ID),
    "claude-vertex-global": ("global", CLAUDE_ID),
    "gemini-vertex": ("us-central1", "gemini-2.5-flash"),
    "claude-throttled": ("us-east5", CLAUDE_ID + "@rate_limit"),
}


class VertexStack(CloudStack):
    def __init__(self, gateway: Server, stub: Server, guard: Path) -> None:
        super().__init__(gateway, stub, KEY)
        # What the gateway's processes connected to (``tests.loopback.guard_env``).
        self.guard = guard

    def token_seen(self) -> str | None:
        stats: dict[str, Any] = httpx.get(f"{self.stub.url}/stats", timeout=10).json()
        seen: str | None = stats["last_headers"]["authorization"]
        return seen


def _digest(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VertexStack]:
    d: Path = tmp_path_factory.mktemp("vertex")
    TokenEndpoint.seen = []
    TokenEndpoint.issued = 0
    TokenEndpoint.prefix = SECRET
    TokenEndpoint.lifetime = 302
    with serve(TokenEndpoint) as port:
        key = d / "service-account.json"
        TokenEndpoint.public_key = service_account_key(key, f"http://127.0.0.1:{port}/token")
        stub = spawn("stub", ["--protocol", "vertex", "--api-key", SECRET], d)
        backends = {
            route: {
                "url": f"{stub.url}/v1",
                "protocol": "vertex",
                "project": "test-project",
                "location": location,
                "model": model,
            }
            for route, (location, model) in ROUTES.items()
        }
        config = write_stack(
            d / "gateway.toml",
            proxy={**QUIET, "cooldown_seconds": 0},
            backends=backends,
            routes={route: route for route in ROUTES},
            models={r: ("Anthropic" if "claude" in r else "SelfHosted") for r in ROUTES},
            keys={KEY: "acme"},
        )
        env = {**google_env(d, key), **guard_env(d / "guard.log")}
        gateway = spawn("gateway", ["--config", config, "--workers", "1"], d, env=env)
        servers = [stub, gateway]
        start_all(servers)
        try:
            made = VertexStack(gateway, stub, d / "guard.log")
            _ready(made)
            yield made
        finally:
            stop_all(servers)


def _ready(stack: VertexStack) -> None:
    with stack.anthropic() as client:
        first_answer(
            lambda: client.messages.create(
                model="claude-vertex",
                max_tokens=16,
                messages=[{"role": "user", "content": "ready"}],
            ),
            "Google credentials",
        )


def _image_message() -> Any:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": b64(PNG)}}  # fmt: skip
    return [{"role": "user", "content": [image, {"type": "text", "text": TEXT}]}]


@pytest.mark.parametrize("model", ["claude-vertex", "claude-vertex-global"])
def test_the_anthropic_sdk_reaches_claude_with_an_image_and_its_thinking(
    stack: VertexStack, model: str
) -> None:
    messages = _image_message()
    with stack.anthropic() as client:
        whole = client.messages.create(model=model, max_tokens=256, messages=messages)
        assert [b.text for b in whole.content if b.type == "text"] == [f"{image_echo(PNG)} {TEXT}"]
        with client.messages.stream(
            model=model,
            max_tokens=2048,
            messages=messages,
            thinking={"type": "enabled", "budget_tokens": 1024},
        ) as events:
            final = events.get_final_message()  # fmt: skip
        [thought, said] = final.content
        assert thought.type == "thinking" and thought.signature
        assert said.type == "text" and said.text == f"{image_echo(PNG)} {TEXT}"
        # The signed thinking goes back to Claude unchanged: the stub checks it.
        turn: Any = [
            *messages,
            {
                "role": "assistant",
                "content": [thought.model_dump(), {"type": "text", "text": "ok"}],
            },
            {"role": "user", "content": "again"},
        ]
        again = client.messages.create(
            model=model, max_tokens=2048, messages=turn,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )  # fmt: skip
    assert [b.text for b in again.content if b.type == "text"] == ["again"]
    assert (stack.token_seen() or "").startswith("sha256:")


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_reaches_gemini_on_vertex_with_an_image(
    stack: VertexStack, stream: bool
) -> None:
    text = image_turn(stack, "gemini-vertex", TEXT, PNG, stream).text
    assert text == f"{TEXT} {image_echo(PNG)}"


def test_the_token_is_fetched_again_before_it_expires(stack: VertexStack) -> None:
    """Tokens that live 302 s are fetched again 300 s before they expire:
    the gateway's requests carry each new one."""
    first = TokenEndpoint.issued
    deadline = time.monotonic() + 20
    # A new token is issued, then taken by the worker as its fetch returns
    # (a moment later on a loaded machine): a request soon carries one.
    while True:
        with stack.anthropic() as client:
            client.messages.create(
                model="claude-vertex", max_tokens=16, messages=[{"role": "user", "content": "x"}]
            )
        issued = range(first + 1, TokenEndpoint.issued + 1)
        if stack.token_seen() in {_digest(f"Bearer {SECRET}.{n}") for n in issued}:
            break
        assert time.monotonic() < deadline, "the gateway's requests kept the first token"
        time.sleep(0.2)
    assert all(
        s.endswith("urn:ietf:params:oauth:grant-type:jwt-bearer") for s in TokenEndpoint.seen
    )


def test_the_backends_are_ready_once_they_hold_a_token(stack: VertexStack) -> None:
    ready = httpx.get(f"{stack.gateway.url}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text


def test_a_quota_is_a_429_with_the_retry_delay(stack: VertexStack) -> None:
    with stack.anthropic() as client, pytest.raises(anthropic.RateLimitError) as throttled:
        client.messages.create(
            model="claude-throttled", max_tokens=16, messages=[{"role": "user", "content": "x"}]
        )
    assert throttled.value.response.headers.get("retry-after") == "2"


def test_claude_code_runs_through_vertex_with_an_image(stack: VertexStack, tmp_path: Path) -> None:
    env = claude_env(tmp_path, stack.gateway.url, KEY)
    text = image_answer(tmp_path, PNG, "claude-vertex", env)
    assert image_echo(PNG) in text and text.index(image_echo(PNG)) < text.index(IMAGE_PROMPT), text
    assert (stack.token_seen() or "").startswith("sha256:")


def test_the_gateway_never_left_loopback(stack: VertexStack) -> None:
    """The guard in the gateway's processes (``tests.loopback.guard_env``: an
    audit hook on Python's sockets, which google-auth's transport uses; the
    event loop's own connects to the backend, the stub on loopback, raise no
    audit event) saw the token endpoint's connections, and none outside
    127.0.0.0/8 (the module's other tests ran first)."""
    seen = guard_log(stack.guard)
    assert "127.0.0.1" in seen
    assert [s for s in seen if s.endswith(" outside")] == []


def test_claude_code_in_vertex_mode_takes_the_stub_for_vertex(tmp_path: Path) -> None:
    """Claude Code's own Vertex client (CLAUDE_CODE_USE_VERTEX: its URLs,
    its body, the model id with its ``@``) against the stub itself, image
    and all: the stub is a Vertex a real client takes. Its Google auth is
    skipped (CLAUDE_CODE_SKIP_VERTEX_AUTH), so this stub takes no key."""
    stub = spawn("stub", ["--protocol", "vertex"], tmp_path)
    start_all([stub])
    try:
        env = claude_env(tmp_path, stub.url, "unused")
        del env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"]
        env |= {
            "CLAUDE_CODE_USE_VERTEX": "1",
            "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1",
            "ANTHROPIC_VERTEX_BASE_URL": f"{stub.url}/v1",
            "ANTHROPIC_VERTEX_PROJECT_ID": "test-project",
            "CLOUD_ML_REGION": "us-east5",
        }
        text = image_answer(tmp_path, PNG, CLAUDE_ID, env)
    finally:
        stop_all([stub])
    assert image_echo(PNG) in text
