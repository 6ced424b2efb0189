"""What the cloud backends' client tests share (``test_bedrock``,
``test_gemini``, ``test_vertex``, ``test_azure``): a ``flatgate gateway`` in
front of a cloud stub, reached with the openai and anthropic SDKs
(``CloudStack``), and the wait for a worker's first credential fetch
(``first_answer``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import anthropic
import httpx
import openai

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
