"""AWS Bedrock through ``flatgate gateway``: the openai SDK reaches a
Nova-style model through Converse, the anthropic SDK and Claude Code reach
Claude through InvokeModel, each with an image, on ``flatgate stub
--protocol bedrock``; every server a ``flatgate`` subprocess on loopback.

The stub has an api key: it takes a request signed with SigV4 with that key
as the secret access key (checked with botocore's signer over the body), or
that key as a Bedrock API key. The gateway's backends:

- ``sigv4``-signed ones, whose credentials the gateway takes from botocore's
  chain: the environment's ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
  / ``AWS_SESSION_TOKEN``, with the instance metadata service disabled and
  the shared files pointed at files that do not exist, so that the chain
  looks nowhere else (nothing leaves loopback);
- one with the key as ``api_key`` (``Authorization: Bearer``).

A model id goes in the URL (``model`` renames: the route's name is the
client's, the backend's ``model`` Bedrock's): Nova through Converse, Claude
(a cross-region inference profile id) through InvokeModel, Titan Text
Embeddings V2 through InvokeModel. A model id with a fault suffix makes the
stub throttle: a 429 with ``Retry-After`` to the client.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.clients.cloud import CloudStack, aws_env, first_answer, image_turn
from tests.clients.media import b64, image_echo, png
from tests.clients.test_claude_code import IMAGE_PROMPT, claude_env, image_answer
from tests.servers import spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-flatgate-bedrock"
# The stub's key: the secret access key SigV4 signs with, and the Bedrock API key.
SECRET = "bedrock-stub-secret"
NOVA = "amazon.nova-pro-v1:0"
CLAUDE_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
TITAN = "amazon.titan-embed-text-v2:0"
PNG = png()
TEXT = "flatgate reaches bedrock"
# route (the client's model name) -> (backend, Bedrock's model id)
ROUTES = {
    "nova-pro": ("sigv4", NOVA),
    "claude-sonnet-bedrock": ("sigv4", CLAUDE_ID),
    "claude-bearer-bedrock": ("bearer", CLAUDE_ID),
    "titan-embed": ("sigv4", TITAN),
    "nova-throttled": ("sigv4", NOVA + "@rate_limit"),
}


class BedrockStack(CloudStack):
    """The gateway in front of the bedrock stub."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BedrockStack]:
    d: Path = tmp_path_factory.mktemp("bedrock")
    stub = spawn("stub", ["--protocol", "bedrock", "--api-key", SECRET], d)
    common = {"url": stub.url, "protocol": "bedrock", "region": "us-east-1"}
    backends: dict[str, Any] = {}
    for route, (kind, model_id) in ROUTES.items():
        backends[route] = {**common, "model": model_id}
        if kind == "bearer":
            backends[route]["api_key"] = SECRET
    config = write_stack(
        d / "gateway.toml",
        proxy={**QUIET, "cooldown_seconds": 0},
        backends=backends,
        routes={route: route for route in ROUTES},
        models={r: ("Anthropic" if "claude" in r else "OpenAI") for r in ROUTES},
        keys={KEY: "acme"},
    )
    gateway = spawn("gateway", ["--config", config, "--workers", "1"], d, env=aws_env(d, SECRET))
    servers = [stub, gateway]
    start_all(servers)
    try:
        made = BedrockStack(gateway, stub, KEY)
        _ready(made)
        yield made
    finally:
        stop_all(servers)


def _ready(stack: BedrockStack) -> None:
    with stack.openai() as client:
        first_answer(
            lambda: client.chat.completions.create(
                model="nova-pro", messages=[{"role": "user", "content": "ready"}]
            ),
            "AWS credentials",
        )


def _digest(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


def _signed(stack: BedrockStack) -> None:
    """The stub's last request was signed with SigV4 (and so checked)."""
    seen = stack.stub_saw()["last_headers"]
    assert seen["authorization"] is not None and seen["authorization"].startswith("sha256:")
    assert seen["authorization"] != _digest(f"Bearer {SECRET}")


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_reaches_nova_through_converse_with_an_image(
    stack: BedrockStack, stream: bool
) -> None:
    turn = image_turn(stack, "nova-pro", TEXT, PNG, stream)
    text, finish, usage = turn.text, turn.finish, turn.usage
    assert text == f"{TEXT} {image_echo(PNG)}"
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens == len(text.split())
    _signed(stack)


def test_the_openai_sdk_gets_titan_embeddings_one_input_a_call(stack: BedrockStack) -> None:
    with stack.openai() as client:
        made = client.embeddings.create(model="titan-embed", input="a parrot", dimensions=256)
        assert len(made.data) == 1 and len(made.data[0].embedding) == 256
        assert made.usage.prompt_tokens == 2
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="titan-embed", input=["a parrot", "a cage"])
    assert "input" in str(refused.value) and "one input per call" in str(refused.value)


def test_a_throttled_model_is_a_429_with_retry_after(stack: BedrockStack) -> None:
    with stack.openai() as client, pytest.raises(openai.RateLimitError) as throttled:
        client.chat.completions.create(
            model="nova-throttled", messages=[{"role": "user", "content": "x"}]
        )
    # Bedrock's ThrottlingException says no wait: the caller is told the
    # backend's cooldown (cooldown_seconds, 0 here), at least a second.
    assert throttled.value.response.headers.get("retry-after") == "1"


@pytest.mark.parametrize("model", ["claude-sonnet-bedrock", "claude-bearer-bedrock"])
def test_the_anthropic_sdk_reaches_claude_through_invoke_model(
    stack: BedrockStack, model: str
) -> None:
    image: Any = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)},
    }
    messages: Any = [{"role": "user", "content": [image, {"type": "text", "text": TEXT}]}]
    with stack.anthropic() as client:
        whole = client.messages.create(model=model, max_tokens=256, messages=messages)
        assert [b.text for b in whole.content if b.type == "text"] == [f"{image_echo(PNG)} {TEXT}"]
        assert whole.stop_reason == "end_turn"
        with client.messages.stream(
            model=model,
            max_tokens=2048,
            messages=messages,
            thinking={"type": "enabled", "budget_tokens": 1024},
        ) as events:
            final = events.get_final_message()
    [thought, said] = final.content
    assert thought.type == "thinking" and thought.signature
    assert said.type == "text" and said.text == f"{image_echo(PNG)} {TEXT}"
    # The signed thinking goes back to Claude unchanged on the next turn.
    turn: Any = [
        *messages,
        {"role": "assistant", "content": [thought.model_dump(), {"type": "text", "text": "ok"}]},
        {"role": "user", "content": "again"},
    ]
    with stack.anthropic() as client:
        again = client.messages.create(
            model=model,
            max_tokens=2048,
            messages=turn,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
    assert [b.text for b in again.content if b.type == "text"] == ["again"]
    seen = stack.stub_saw()["last_headers"]
    if model == "claude-bearer-bedrock":
        assert seen["authorization"] == _digest(f"Bearer {SECRET}")
    else:
        _signed(stack)


def test_claude_code_runs_through_bedrock_with_an_image(
    stack: BedrockStack, tmp_path: Path
) -> None:
    env = claude_env(tmp_path, stack.gateway.url, KEY)
    text = image_answer(tmp_path, PNG, "claude-sonnet-bedrock", env)
    assert image_echo(PNG) in text and text.index(image_echo(PNG)) < text.index(IMAGE_PROMPT), text
    _signed(stack)


def test_claude_code_in_bedrock_mode_takes_the_stub_for_bedrock(
    stack: BedrockStack, tmp_path: Path
) -> None:
    """Claude Code's own Bedrock client (CLAUDE_CODE_USE_BEDROCK, its own
    SigV4 signer, which keeps ``:`` in the model id's path) against the stub
    itself: the stub is a Bedrock a real client takes, image and all."""
    env = claude_env(tmp_path, stack.stub.url, "unused")
    del env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"]
    env |= {
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "ANTHROPIC_BEDROCK_BASE_URL": stack.stub.url,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIDCLAUDECODE",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }
    assert image_echo(PNG) in image_answer(tmp_path, PNG, CLAUDE_ID, env)
    _signed(stack)
