"""What the cloud backends' client tests share (``test_bedrock``,
``test_gemini``, ``test_vertex``, ``test_azure``): a ``flatgate gateway`` in
front of a cloud stub, reached with the openai and anthropic SDKs
(``CloudStack``), a chat turn with an image (``image_turn``), and the
wait for a worker's first credential fetch (``first_answer``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
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
