"""What the cloud backends' client tests share (``test_bedrock``,
``test_gemini``, ``test_vertex``, ``test_azure``): a ``flatgate gateway`` in
front of a cloud stub, reached with the openai and anthropic SDKs
(``CloudStack``), a chat turn with an image (``image_turn``), the
gateway's environment that keeps its credential chains on loopback
(``aws_env``, ``google_env``), and the wait for a worker's first credential
fetch (``first_answer``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import httpx
import openai
from openai.types import CompletionUsage

from tests.clients.media import data_url
from tests.servers import Server

T = TypeVar("T")


class CloudStack:
    """A gateway (``key`` is its caller's) in front of one cloud stub."""

    def __init__(self, gateway: Server, stub: Server, key: str) -> None:
        self.gateway = gateway
        self.stub = stub
        self.key = key

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.gateway.url}/v1", api_key=self.key, max_retries=0)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.gateway.url, api_key=self.key, max_retries=0)

    def stub_saw(self) -> dict[str, Any]:
        """The stub's ``/stats``: its last request's headers (digests), body."""
        stats: dict[str, Any] = httpx.get(f"{self.stub.url}/stats", timeout=10).json()
        return stats


def aws_env(d: Path, secret: str) -> dict[str, str]:
    """A gateway's environment in which botocore's chain finds static AWS keys
    (``secret``: the secret access key the stub checks SigV4 with) and looks
    nowhere else: no instance metadata service, shared files that do not
    exist in ``d``, no Bedrock API key."""
    return {
        "AWS_ACCESS_KEY_ID": "AKIDFLATGATETEST",
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_SESSION_TOKEN": "session-token-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(d / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(d / "no-aws-credentials"),
        "AWS_BEARER_TOKEN_BEDROCK": "",
        "HOME": str(d),
        "NO_PROXY": "*",
    }


def google_env(d: Path, credentials: Path) -> dict[str, str]:
    """A gateway's environment in which google-auth's Application Default
    Credentials are the service account's key at ``credentials``: the
    metadata server not looked for (and, were it asked, a closed port on
    loopback), gcloud's configuration an empty directory in ``d``."""
    return {
        "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        "NO_GCE_CHECK": "true",
        "GCE_METADATA_HOST": "127.0.0.1:1",
        "GCE_METADATA_IP": "127.0.0.1:1",
        "CLOUDSDK_CONFIG": str(d / "gcloud"),
        "HOME": str(d),
        "NO_PROXY": "*",
    }


def first_answer(ask: Callable[[], T], says: str, seconds: float = 20.0) -> T:
    """What ``ask()`` answers once the worker holds its credential: its first
    fetch runs beside its start, and until it is done each request is a 502
    naming the credential (``says``: "AWS credentials", "Entra ID")."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return ask()
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            assert exc.status_code == 502 and says in str(exc), exc
            assert time.monotonic() < deadline, exc
            time.sleep(0.2)


@dataclass(frozen=True)
class Turn:
    """What a chat turn answered: its text, finish reason and usage."""

    text: str
    finish: str | None
    usage: CompletionUsage | None


def image_turn(stack: CloudStack, model: str, text: str, png: bytes, stream: bool) -> Turn:
    """The openai SDK's chat turn of ``text`` and a PNG through the gateway,
    whole or streamed (with its usage asked for)."""
    content: Any = [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": data_url(png, "image/png")}},
    ]
    messages: Any = [{"role": "user", "content": content}]
    with stack.openai() as client:
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model=model, messages=messages, stream=True,
                    stream_options={"include_usage": True},
                )
            )  # fmt: skip
            return Turn(
                "".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                [c.choices[0].finish_reason for c in chunks if c.choices][-1],
                chunks[-1].usage,
            )
        answer = client.chat.completions.create(model=model, messages=messages)
        choice = answer.choices[0]
        return Turn(choice.message.content or "", choice.finish_reason, answer.usage)
