"""The one stack of every backend way, the one the real clients that must
reach each of them run against (Gemini CLI, ``test_gemini_cli.py``; the
google-genai SDK, ``test_genai_sdk.py``; the AI SDK's Google provider,
``test_aisdk_google.py``; the Responses API's WebSocket clients,
``test_responses_websocket.py``): the stub in each protocol
of ``PROTOCOLS``, each behind a backend of that protocol, and one ``flatgate
gateway`` in front of them, every one a ``flatgate`` subprocess on a loopback
port.

Every stub calls the one function tool a request offers, once per new user
input (``--tools offered``): a function-calling round trip ends, and a
request that offers many tools (Gemini CLI's) is echoed.

Models: ``model(<way>)`` (``echo-<way>``, one of ``WAYS``) reaches the stub
speaking that way's protocol (``protocol_of``): each protocol once, and the
cloud ones twice: Bedrock through Converse (a Nova model id) and InvokeModel
(``bedrock-invoke``, a Claude one: the Anthropic Messages body), Vertex
through Google's publisher (``gemini-2.5-flash``, as the ``gemini`` one
answers) and Anthropic's (``vertex-claude``, ``:rawPredict``).
``dropping(<protocol>)`` (one of ``DROPPING``) reaches the stub through a
second backend, one with ``drop_unsupported = true`` (a field it can neither
carry nor map is dropped and named in ``x-flatgate-dropped-fields``, not
refused). And the models the SDK's error and Gemini-only tests use:
``limited`` (the openai stub's ``echo@rate_limit``, a 429 with its retry),
``signed`` (a Gemini 3 model, which signs its calls and refuses a call that
lost its signature) and ``vectors`` (a Gemini embedding model).

The cloud backends' credentials stay on loopback, as ``test_bedrock`` and
``test_vertex`` set them up (``cloud.aws_env``, ``cloud.google_env``): SigV4
with static AWS keys in the gateway's environment (no metadata service, no
shared files), and a Google service account whose token endpoint is a
thread here (``google_fakes``). A worker's first credential fetch runs
beside its start: the stack is handed over once a Bedrock and a Vertex
model have answered (``first_answer``). The gateway's keys: ``KEYS`` (each
client's), one tenant.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai

from tests.backends.vertex.google_fakes import TokenEndpoint, serve, service_account_key
from tests.clients import aisdk
from tests.clients.cloud import aws_env, first_answer, google_env
from tests.clients.conftest import dropping, model
from tests.servers import Server, spawn
from tests.stacks import QUIET, start_all, write_stack

__all__ = [
    "DROPPING",
    "GENAI_KEY",
    "KEY",
    "KEYS",
    "PROTOCOLS",
    "WAYS",
    "dropping",
    "every_backend",
    "model",
    "protocol_of",
]

# The backend protocols a client is tested through.
PROTOCOLS = ("fbs", "openai", "anthropic", "openai-responses", "gemini", "bedrock", "vertex")
# The second way to a cloud backend, a Claude model id's (Anthropic's Messages
# body): Bedrock's InvokeModel beside its Converse, Vertex's Anthropic
# publisher beside Google's: way -> its protocol.
_CLAUDE_WAYS = {"bedrock-invoke": "bedrock", "vertex-claude": "vertex"}
# The ways a client reaches a backend: each protocol, and the Claude ones.
WAYS = (*PROTOCOLS, *_CLAUDE_WAYS)
# The protocols also reached through a backend that drops what it cannot take.
DROPPING = ("openai", "anthropic", "openai-responses")
KEY = "sk-flatgate-gemini-client"
GENAI_KEY = "sk-flatgate-genai"
KEYS = (KEY, GENAI_KEY, aisdk.KEY)
_UPSTREAM_KEY = "sk-flatgate-upstream"
# The cloud stubs' keys: SigV4's secret access key; the prefix of Google's tokens.
_AWS_SECRET = "bedrock-stub-secret"
_GOOGLE_SECRET = "vertex-stub-token"
_NOVA = "amazon.nova-pro-v1:0"
_CLAUDE = {
    "bedrock": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "vertex": "claude-sonnet-4-5@20250929",
}
_PROVIDERS = {
    "openai": "OpenAI",
    "openai-responses": "OpenAI",
    "anthropic": "Anthropic",
    "bedrock": "OpenAI",
    **dict.fromkeys(_CLAUDE_WAYS, "Anthropic"),
}


def protocol_of(way: str) -> str:
    """The protocol of the backend ``model(way)`` reaches."""
    return _CLAUDE_WAYS.get(way, way)


def _stub_key(protocol: str) -> list[str]:
    secret = {"fbs": None, "bedrock": _AWS_SECRET, "vertex": _GOOGLE_SECRET}
    key = secret.get(protocol, _UPSTREAM_KEY)
    return [] if key is None else ["--api-key", key]


def _backend(way: str, url: str, name: str = "") -> dict[str, Any]:
    """The backend of ``way`` at the stub at ``url`` (``name``: the model
    the backend asks for, else the way's own)."""
    protocol = protocol_of(way)
    if way in _CLAUDE_WAYS:
        name = name or _CLAUDE[protocol]
    if protocol == "fbs":
        return {"url": url}
    if protocol == "bedrock":
        return {"url": url, "protocol": protocol, "region": "us-east-1",
                "model": name or _NOVA}  # fmt: skip
    if protocol == "vertex":
        return {"url": f"{url}/v1", "protocol": protocol, "project": "test-project",
                "location": "us-central1", "model": name or "gemini-2.5-flash"}  # fmt: skip
    if protocol == "gemini":
        return {"url": f"{url}/v1beta", "protocol": protocol, "api_key": _UPSTREAM_KEY,
                "model": name or "gemini-2.5-flash"}  # fmt: skip
    fields = {"url": f"{url}/v1", "protocol": protocol, "api_key": _UPSTREAM_KEY}
    return {**fields, "model": name} if name else fields


def _ready(gateway: Server) -> None:
    """Once a Bedrock and a Vertex model answer: each worker's first fetch of
    its AWS and Google credentials is done."""
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0) as client:

        def ask(way: str) -> Callable[[], object]:
            return lambda: client.chat.completions.create(
                model=model(way), messages=[{"role": "user", "content": "ready"}]
            )

        first_answer(ask("bedrock"), "AWS credentials")
        first_answer(ask("vertex"), "Google credentials")


@contextlib.contextmanager
def every_backend(d: Path) -> Iterator[Server]:
    """The stubs, the token endpoint and the gateway (one worker), their
    logs in ``d``, for the block: the gateway, once it answers on every way."""
    # The token endpoint's state is its class's: a class of this stack's own.
    tokens: type[TokenEndpoint] = type("GeminiStackTokens", (TokenEndpoint,), {
        "seen": [], "issued": 0, "prefix": _GOOGLE_SECRET, "lifetime": 3600,
    })  # fmt: skip
    with serve(tokens) as port:
        credentials = d / "service-account.json"
        tokens.public_key = service_account_key(credentials, f"http://127.0.0.1:{port}/token")
        stubs = {
            p: spawn("stub", ["--protocol", p, "--tools", "offered", *_stub_key(p)], d)
            for p in PROTOCOLS
        }
        openai_url, gemini_url = stubs["openai"].url, stubs["gemini"].url
        config = write_stack(
            d / "gateway.toml",
            proxy={**QUIET, "cooldown_seconds": 0},
            backends={
                **{f"stub-{w}": _backend(w, stubs[protocol_of(w)].url) for w in WAYS},
                **{
                    f"stub-{p}-dropping": {**_backend(p, stubs[p].url), "drop_unsupported": True}
                    for p in DROPPING
                },
                "limited": _backend("openai", openai_url, "echo@rate_limit"),
                "signed": _backend("gemini", gemini_url, "gemini-3-pro-preview"),
                "vectors": _backend("gemini", gemini_url, "gemini-embedding-001"),
            },
            routes={
                **{model(w): f"stub-{w}" for w in WAYS},
                **{dropping(p): f"stub-{p}-dropping" for p in DROPPING},
                **{name: name for name in ("limited", "signed", "vectors")},
            },
            edge={"log_format": "json"},
            models={
                **{model(w): _PROVIDERS.get(w, "SelfHosted") for w in WAYS},
                **{dropping(p): _PROVIDERS[p] for p in DROPPING},
                "limited": "OpenAI",
                "signed": "SelfHosted",
                "vectors": "SelfHosted",
            },
            keys=dict.fromkeys(KEYS, "gemini-clients"),
        )
        env = {**aws_env(d, _AWS_SECRET), **google_env(d, credentials)}
        gateway = spawn("gateway", ["--config", config, "--workers", "1"], d, env=env)
        servers = [*stubs.values(), gateway]
        start_all(servers)
        try:
            _ready(gateway)
            yield gateway
        finally:
            _stop_together(servers)


def _stop_together(servers: list[Server], grace: float = 10.0) -> None:
    """Stop each (SIGINT, SIGKILL after ``grace``), all at once: eight
    servers shutting down one after another take seconds."""
    for server in reversed(servers):
        server.interrupt()
    deadline = time.monotonic() + grace
    for server in reversed(servers):
        server.finish(deadline)
