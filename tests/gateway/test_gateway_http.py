"""``flatgate gateway``: edge and proxy in one process, spoken to with the
official openai SDK over loopback, in front of fbs and openai stubs."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from flatgate.proxy.wire.request import build_request
from tests.servers import Server, running
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration


class Stack:
    def __init__(self, fbs: Server, oai: Server, slow: Server, gateway: Server) -> None:
        self.fbs, self.oai, self.slow, self.gateway = fbs, oai, slow, gateway

    def client(self, retries: int = 0) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.gateway.url}/v1", api_key="unused", max_retries=retries
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("gateway")
    with (
        running("stub", [], d) as fbs,
        running("stub", ["--protocol", "openai"], d) as oai,
        running("stub", ["--ttft-ms", "3000"], d) as slow,
    ):
        cfg = write_stack(
            d / "g.toml",
            proxy=QUIET,
            backends={
                "fbs": fbs.url,
                "oai": {"url": f"{oai.url}/v1", "protocol": "openai"},
                "slow": {"url": slow.url, "first_byte_timeout": 10.0},
            },
            routes={"echo": "fbs", "echo-openai": "oai", "slow": "slow"},
            edge={"log_format": "json"},
            models={"echo": "SelfHosted", "echo-openai": "OpenAI", "slow": "SelfHosted"},
        )
        with running("gateway", ["--config", cfg], d) as gateway:
            yield Stack(fbs, oai, slow, gateway)


@pytest.mark.parametrize("model", ["echo", "echo-openai"])
def test_whole_and_streamed_answers(stack: Stack, model: str) -> None:
    c = stack.client()
    done = c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "one two three"}]
    )
    assert done.choices[0].message.content == "one two three"
    assert done.usage is not None and done.usage.completion_tokens == 3
    stream = c.chat.completions.create(
        model=model, stream=True, messages=[{"role": "user", "content": "four five"}]
    )
    assert "".join(e.choices[0].delta.content or "" for e in stream if e.choices) == "four five"


def test_errors_reach_the_client_as_over_http(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.RateLimitError) as limited:
        c.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": "x"}],
            extra_body={"metadata": {"stub.fault": "rate_limit"}},
        )
    assert limited.value.response.headers["retry-after"] == "1"
    assert limited.value.code == "backend_rate_limited"
    stream = c.chat.completions.create(
        model="echo",
        stream=True,
        messages=[{"role": "user", "content": "a b c d"}],
        extra_body={"metadata": {"stub.fault": "die", "stub.fault_after": "2"}},
    )
    got: list[str] = []
    with pytest.raises(openai.APIError):
        for event in stream:
            got.append(event.choices[0].delta.content or "" if event.choices else "")
    assert "".join(got) == "a b "


def test_the_fbs_api_is_not_on_the_public_port(stack: Stack) -> None:
    body = build_request("echo", [("user", "hi")], tenant="someone-else")
    r = httpx.post(
        f"{stack.gateway.url}/v1/completions",
        content=body,
        headers={"content-type": "application/x-flatbuffers"},
    )
    assert r.status_code == 404


def test_ready_and_one_metrics_for_both_layers(stack: Stack) -> None:
    ready = httpx.get(f"{stack.gateway.url}/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    stack.client().chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "count me"}]
    )
    text = httpx.get(f"{stack.gateway.url}/metrics").text
    assert 'flatgate_requests_total{route="echo",status="200"}' in text
    assert 'flatgate_edge_requests_total{route="/v1/chat/completions",status="200"}' in text


def test_a_client_leaving_before_the_first_token_cancels_the_backend(stack: Stack) -> None:
    before = httpx.get(f"{stack.slow.url}/stats").json()["cancelled"]

    async def leave() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            task = asyncio.ensure_future(
                client.post(
                    f"{stack.gateway.url}/v1/chat/completions",
                    json={"model": "slow", "messages": [{"role": "user", "content": "x"}]},
                )
            )
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(leave())
    left = time.monotonic()
    cancelled = before
    while time.monotonic() - left < 1.5 and cancelled == before:
        time.sleep(0.05)
        cancelled = httpx.get(f"{stack.slow.url}/stats").json()["cancelled"]
    assert cancelled == before + 1


def test_the_access_log_names_the_backend(stack: Stack) -> None:
    stack.client().chat.completions.create(
        model="echo-openai",
        messages=[{"role": "user", "content": "log me"}],
        extra_headers={"x-request-id": "gw-log-1"},
    )
    deadline = time.monotonic() + 5
    line = None
    while line is None and time.monotonic() < deadline:
        time.sleep(0.2)
        for text in Path(stack.gateway.log).read_text().splitlines():
            if '"gw-log-1"' in text:
                line = json.loads(text)
    assert line is not None
    assert line["backend"] == "oai" and line["status"] == 200 and line["service"] == "edge"
