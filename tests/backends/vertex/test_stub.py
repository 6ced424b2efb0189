"""``flatgate stub --protocol vertex`` spoken to by a client nobody here
wrote: the anthropic SDK's ``AnthropicVertex`` (its URLs, its
``anthropic_version``, its streaming), with a bearer token the stub's key
prefixes; and Google's error shape for what it refuses."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.servers import Server
from tests.stub.helpers import stub

pytestmark = pytest.mark.integration

KEY = "vertex-stub-secret"
CLAUDE = "claude-sonnet-4-5@20250929"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("vertex", tmp_path_factory.mktemp("vertex-stub"), "--api-key", KEY) as s:
        yield s


def client(server: Server, token: str = KEY + ".1", region: str = "us-east5") -> Any:
    return anthropic.AnthropicVertex(
        base_url=f"{server.url}/v1",
        region=region,
        project_id="test-project",
        access_token=token,
        max_retries=0,
    )


def _url(server: Server, model: str, method: str) -> str:
    return (
        f"{server.url}/v1/projects/p/locations/global/publishers/anthropic/models/{model}:{method}"
    )


def test_claude_whole_and_streamed_with_an_image(server: Server) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(PNG).decode()}}  # fmt: skip
    messages: Any = [{"role": "user", "content": [{"type": "text", "text": "hello vertex"}, image]}]
    with client(server) as c:
        whole = c.messages.create(model=CLAUDE, max_tokens=64, messages=messages)
        text = whole.content[0].text
        assert text.startswith("hello vertex [image image/png 70 bytes sha256:")
        assert whole.stop_reason == "end_turn"
        with c.messages.stream(
            model=CLAUDE,
            max_tokens=2048,
            messages=messages,
            thinking={"type": "enabled", "budget_tokens": 1024},
        ) as events:
            final = events.get_final_message()
    [thought, said] = final.content
    assert thought.type == "thinking" and thought.signature
    assert said.type == "text" and said.text == text


def test_the_global_location_and_a_token_refreshed(server: Server) -> None:
    with client(server, token=KEY + ".2", region="global") as c:
        answer = c.messages.create(
            model=CLAUDE, max_tokens=16, messages=[{"role": "user", "content": "again"}]
        )
    assert answer.content[0].text == "again"


def test_a_wrong_token_is_google_s_401(server: Server) -> None:
    with (
        client(server, token="not-the-key") as c,
        pytest.raises(anthropic.AuthenticationError) as refused,
    ):
        c.messages.create(model=CLAUDE, max_tokens=16, messages=[{"role": "user", "content": "x"}])
    assert refused.value.body["error"]["status"] == "UNAUTHENTICATED"  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}, "anthropic_version"),
        (
            {
                "anthropic_version": "vertex-2023-10-16",
                "model": CLAUDE,
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "x"}],
            },
            "model",
        ),
        (
            {
                "anthropic_version": "vertex-2099",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "x"}],
            },
            "anthropic_version",
        ),
    ],
)
def test_what_vertex_refuses(server: Server, body: dict[str, Any], said: str) -> None:
    answer = httpx.post(
        _url(server, CLAUDE, "rawPredict"),
        json=body,
        headers={"authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    assert answer.status_code == 400
    err = answer.json()["error"]
    assert err["status"] == "INVALID_ARGUMENT" and said in err["message"]


def test_a_rate_limit_names_its_retry_delay(server: Server) -> None:
    answer = httpx.post(
        _url(server, CLAUDE + "@rate_limit", "rawPredict"),
        json={
            "anthropic_version": "vertex-2023-10-16",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "x"}],
        },
        headers={"authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    assert answer.status_code == 429 and "retry-after" not in answer.headers
    err = answer.json()["error"]
    assert err["status"] == "RESOURCE_EXHAUSTED"
    assert err["details"] == [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}
    ]
