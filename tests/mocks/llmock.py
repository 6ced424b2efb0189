"""llmock, a third-party mock of the OpenAI and Anthropic APIs, run for tests.

It lives in its own pinned environment (``.venv/llmock``, from
``tests/mocks/requirements-llmock.txt``; ``make test`` installs it) and runs
as a real server on a free loopback port. Its OpenAI API is under ``/v1``
(Chat Completions, and the Responses API at ``/v1/responses``: the base of an
``openai`` and an ``openai-responses`` backend alike), its Anthropic API under
``/anthropic/v1``. Tests script it through its control
API: ``scenario`` queues behaviours (replies, tool calls, HTTP failures,
mid-stream faults) and ``requests`` returns what it received.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
EXECUTABLE = ROOT / ".venv" / "llmock" / "bin" / "llmock"

__all__ = ["LLMock", "running_llmock"]


class LLMock:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.openai_url = f"{self.url}/v1"
        self.anthropic_url = f"{self.url}/anthropic/v1"

    def scenario(self, *behaviors: dict[str, Any]) -> None:
        r = httpx.post(f"{self.url}/_llmock/scenario", json={"behaviors": list(behaviors)})
        r.raise_for_status()

    def reset(self) -> None:
        httpx.post(f"{self.url}/_llmock/reset").raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/_llmock/requests")
        r.raise_for_status()
        doc = r.json()
        entries: list[dict[str, Any]] = doc["requests"] if isinstance(doc, dict) else doc
        return entries


@contextmanager
def running_llmock(log_dir: Path) -> Iterator[LLMock]:
    if not EXECUTABLE.exists():
        raise RuntimeError(f"{EXECUTABLE} is missing: `make test` installs it")
    port = free_port()
    log = log_dir / f"llmock-{port}.log"
    config = log_dir / f"llmock-{port}.yaml"
    config.write_text(
        f"server: {{host: 127.0.0.1, port: {port}}}\n"
        "responses: {style: echo, tool_mode: auto}\n"
        "stream: {chunk_delay_ms: 0}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMOCK_", "PYTEST_"))}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(EXECUTABLE), "serve", "--config", str(config), "--log-level", "warning"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    mock = LLMock(port)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llmock exited:\n{log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{mock.url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llmock did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield mock
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
