"""An Azure OpenAI deployment answers the openai SDK and the anthropic SDK
through ``flatgate gateway``: Azure-configured ``openai`` and
``openai-responses`` backends in front of the stub, which serves Azure's
paths and takes its ``api-key`` header (``OpenAIWire.own_path``), every
server a ``flatgate`` subprocess on a loopback port.

The backends: the deployment URLs (``azure_api_version``, ``url`` the
stub's root: only Azure's ``/openai/deployments/{model}/...?api-version=``
paths reach an answer there) with ``api-key``; the v1 API's base
(``/openai/v1``) with ``api-key``; the v1 API with an Entra ID token, which
the gateway fetches with azure-identity's ``DefaultAzureCredential`` from an
App Service managed-identity endpoint served on loopback by the test; and the
Responses API at ``/openai/responses?api-version=``. The stub's ``/stats``
shows which credential header reached it (by digest).

Content filters: a fake Azure on loopback answers with Azure's documented
bodies (``tests/backends/azure/golden``): a filtered prompt is a 400 naming
its categories in each client API's error shape; a completion the filter
ends is ``finish_reason: content_filter`` to a Chat Completions client,
``stop_reason: refusal`` to a Messages client, and a response ``incomplete``
for ``content_filter`` to a Responses client.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.clients.cloud import first_answer
from tests.clients.conftest import serving
from tests.servers import Server, spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-flatgate-azure"
# The stubs' key: Azure's api-key, and the token the identity endpoint issues.
UPSTREAM = "azure-upstream-key-0123"
SECRET = "identity-header-secret"
VERSION = "2024-10-21"
TEXT = "tell me how to care for a parrot"
MODELS = {
    "azure-dep-4o": "deployments",
    "azure-v1-4o": "v1",
    "azure-entra-4o": "entra",
    "azure-embed-small": "deployments",
    "azure-resp-4o": "responses",
    "azure-filtered-4o": "filtering",
    "azure-filtered-resp": "filtering-responses",
}


class _Identity(BaseHTTPRequestHandler):
    """App Service's managed-identity endpoint: the stubs' key as the token."""

    def do_GET(self) -> None:
        ok = self.headers.get("X-IDENTITY-HEADER") == SECRET
        doc = {
            "access_token": UPSTREAM,
            "expires_on": str(int(time.time()) + 3600),
            "resource": "https://cognitiveservices.azure.com",
            "token_type": "Bearer",
        }
        body = json.dumps(doc if ok else {"error": "unauthorized"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


GOLDEN = Path(__file__).resolve().parents[1] / "backends" / "azure" / "golden"
# The prompt the fake Azure refuses as its content filter does.
FILTERED_PROMPT = "a prompt the content filter refuses"
# The whole answer the fake gives a request not streamed: the filter ended it.
_FILTERED_WHOLE = {
    "id": "chatcmpl-filtered",
    "object": "chat.completion",
    "created": 1699587397,
    "model": "gpt-35-turbo",
    "choices": [
        {
            "index": 0,
            "finish_reason": "content_filter",
            "message": {"role": "assistant", "content": "Hey Jude, better"},
            "content_filter_results": {
                "protected_material_text": {"detected": True, "filtered": True}
            },
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
}


class _FilteringAzure(BaseHTTPRequestHandler):
    """Azure OpenAI whose content filter acts, answering with Azure's
    documented bodies (``tests/backends/azure/golden``): a filtered prompt's
    400, a completion the filter ends (``content_filter``), a response left
    incomplete by it."""

    def do_GET(self) -> None:
        self._send(200, "application/json", b'{"object":"list","data":[]}')

    def do_POST(self) -> None:
        doc = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.headers.get("api-key") != UPSTREAM:
            self._send(401, "application/json", b'{"error":{"code":"401","message":"denied"}}')
            return
        if FILTERED_PROMPT in json.dumps(doc):
            self._send(
                400, "application/json", (GOLDEN / "error_prompt_filtered_400.json").read_bytes()
            )
            return
        responses = self.path.startswith("/openai/responses?")
        if doc.get("stream"):
            name = (
                "responses_stream_incomplete_content_filter.sse"
                if responses
                else "chat_stream_async_filter_blocked.sse"
            )
            self._send(200, "text/event-stream", (GOLDEN / name).read_bytes())
        elif responses:
            self._send(
                200,
                "application/json",
                (GOLDEN / "responses_incomplete_content_filter.json").read_bytes(),
            )
        else:
            self._send(200, "application/json", json.dumps(_FILTERED_WHOLE).encode())

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class AzureStack:
    def __init__(self, gateway: Server, chat: Server, responses: Server) -> None:
        self.gateway = gateway
        self.chat = chat
        self.responses = responses

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.gateway.url}/v1", api_key=KEY, max_retries=0)

    def stub_saw(self, stub: Server) -> dict[str, Any]:
        """The credential headers of the stub's last request."""
        seen: dict[str, Any] = httpx.get(f"{stub.url}/stats", timeout=10).json()["last_headers"]
        return {k: seen.get(k) for k in ("api-key", "authorization")}


def digest(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureStack]:
    d: Path = tmp_path_factory.mktemp("azure")
    with serving(_Identity) as identity_port, serving(_FilteringAzure) as filtering_port:
        chat = spawn("stub", ["--protocol", "openai", "--api-key", UPSTREAM], d)
        responses = spawn("stub", ["--protocol", "openai-responses", "--api-key", UPSTREAM], d)
        keyed = {"auth": "api-key", "api_key": UPSTREAM}
        config = write_stack(
            d / "gateway.toml",
            proxy={**QUIET, "cooldown_seconds": 0},
            backends={
                "deployments": {
                    "url": chat.url,
                    "protocol": "openai",
                    "azure_api_version": VERSION,
                    **keyed,
                },
                "v1": {"url": f"{chat.url}/openai/v1", "protocol": "openai", **keyed},
                "entra": {"url": f"{chat.url}/openai/v1", "protocol": "openai", "auth": "entra"},
                "filtering": {
                    "url": f"http://127.0.0.1:{filtering_port}",
                    "protocol": "openai",
                    "azure_api_version": VERSION,
                    **keyed,
                },
                "filtering-responses": {
                    "url": f"http://127.0.0.1:{filtering_port}",
                    "protocol": "openai-responses",
                    "azure_api_version": VERSION,
                    **keyed,
                },
                "responses": {
                    "url": responses.url,
                    "protocol": "openai-responses",
                    "azure_api_version": "2025-04-01-preview",
                    **keyed,
                },
            },
            routes=MODELS,
            models=dict.fromkeys(MODELS, "OpenAI"),
            keys={KEY: "acme"},
        )
        env = {
            "IDENTITY_ENDPOINT": f"http://127.0.0.1:{identity_port}/msi/token",
            "IDENTITY_HEADER": SECRET,
            "HOME": str(d),  # no CLI login or token cache to find
            "NO_PROXY": "*",
        }
        gateway = spawn("gateway", ["--config", config, "--workers", "1"], d, env=env)
        servers = [chat, responses, gateway]
        start_all(servers)
        try:
            yield AzureStack(gateway, chat, responses)
        finally:
            stop_all(servers)


@pytest.mark.parametrize("stream", [False, True])
def test_a_deployment_answers_the_openai_sdk(stack: AzureStack, stream: bool) -> None:
    with stack.openai() as client:
        messages: Any = [{"role": "user", "content": TEXT}]
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model="azure-dep-4o",
                    messages=messages,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            answer = client.chat.completions.create(model="azure-dep-4o", messages=messages)
            text = answer.choices[0].message.content or ""
            finish = answer.choices[0].finish_reason
    assert text == TEXT
    assert finish == "stop"
    assert stack.stub_saw(stack.chat) == {"api-key": digest(UPSTREAM), "authorization": None}


def test_the_v1_api_answers_the_openai_sdk(stack: AzureStack) -> None:
    with stack.openai() as client:
        answer = client.chat.completions.create(
            model="azure-v1-4o", messages=[{"role": "user", "content": TEXT}]
        )
    assert answer.choices[0].message.content == TEXT
    assert stack.stub_saw(stack.chat) == {"api-key": digest(UPSTREAM), "authorization": None}


def test_a_deployment_answers_the_anthropic_sdk(stack: AzureStack) -> None:
    with anthropic.Anthropic(base_url=stack.gateway.url, api_key=KEY, max_retries=0) as client:
        message = client.messages.create(
            model="azure-dep-4o",
            max_tokens=256,
            messages=[{"role": "user", "content": TEXT}],
        )
        assert [b.text for b in message.content if b.type == "text"] == [TEXT]
        assert message.stop_reason == "end_turn"
        with client.messages.stream(
            model="azure-v1-4o", max_tokens=256, messages=[{"role": "user", "content": TEXT}]
        ) as events:
            assert "".join(events.text_stream) == TEXT
    assert stack.stub_saw(stack.chat)["api-key"] == digest(UPSTREAM)


def test_an_entra_id_token_fetched_by_the_gateway_reaches_azure(stack: AzureStack) -> None:
    with stack.openai() as client:
        answer = first_answer(
            lambda: client.chat.completions.create(
                model="azure-entra-4o", messages=[{"role": "user", "content": TEXT}]
            ),
            "Entra ID",
        )
    assert answer.choices[0].message.content == TEXT
    assert stack.stub_saw(stack.chat) == {
        "api-key": None,
        "authorization": digest(f"Bearer {UPSTREAM}"),
    }


def test_embeddings_from_a_deployment(stack: AzureStack) -> None:
    with stack.openai() as client:
        made = client.embeddings.create(model="azure-embed-small", input=["a parrot", "a cage"])
    assert len(made.data) == 2
    assert all(len(e.embedding) > 0 for e in made.data)


@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_api_through_azures_responses_url(stack: AzureStack, stream: bool) -> None:
    with stack.openai() as client:
        if stream:
            events = list(client.responses.create(model="azure-resp-4o", input=TEXT, stream=True))
            assert events[-1].type == "response.completed"
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        else:
            text = client.responses.create(model="azure-resp-4o", input=TEXT).output_text
    assert text == TEXT
    assert stack.stub_saw(stack.responses) == {
        "api-key": digest(UPSTREAM),
        "authorization": None,
    }


# -- content filters, as each client API says them ------------------------------


def test_a_filtered_prompt_is_a_400_naming_the_categories_in_each_api(stack: AzureStack) -> None:
    said = "Azure's content filter refused the prompt (self_harm (medium))"
    with stack.openai() as client:
        with pytest.raises(openai.BadRequestError) as chat:
            client.chat.completions.create(
                model="azure-filtered-4o", messages=[{"role": "user", "content": FILTERED_PROMPT}]
            )
        with pytest.raises(openai.BadRequestError) as responses:
            client.responses.create(model="azure-filtered-resp", input=FILTERED_PROMPT)
    with (
        anthropic.Anthropic(base_url=stack.gateway.url, api_key=KEY, max_retries=0) as messages,
        pytest.raises(anthropic.BadRequestError) as refused,
    ):
        messages.messages.create(
            model="azure-filtered-4o",
            max_tokens=64,
            messages=[{"role": "user", "content": FILTERED_PROMPT}],
        )
    for exc in (chat.value, responses.value, refused.value):
        assert exc.status_code == 400
        assert said in str(exc)


@pytest.mark.parametrize("stream", [False, True])
def test_a_completion_the_filter_ends_in_each_api(stack: AzureStack, stream: bool) -> None:
    ask: Any = [{"role": "user", "content": "sing Hey Jude"}]
    with stack.openai() as client:
        if stream:
            chunks = list(
                client.chat.completions.create(model="azure-filtered-4o", messages=ask, stream=True)
            )
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
            events = list(
                client.responses.create(model="azure-filtered-resp", input="x", stream=True)
            )
            final = events[-1]
            assert final.type == "response.incomplete"
            response = final.response
        else:
            answer = client.chat.completions.create(model="azure-filtered-4o", messages=ask)
            finish = answer.choices[0].finish_reason
            response = client.responses.create(model="azure-filtered-resp", input="x")
    assert finish == "content_filter"
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "content_filter"
    with anthropic.Anthropic(base_url=stack.gateway.url, api_key=KEY, max_retries=0) as messages:
        if stream:
            with messages.messages.stream(
                model="azure-filtered-4o", max_tokens=64, messages=ask
            ) as events_:
                stop = events_.get_final_message().stop_reason
        else:
            stop = messages.messages.create(
                model="azure-filtered-4o", max_tokens=64, messages=ask
            ).stop_reason
    assert stop == "refusal"
