"""A real vLLM server (0.32, CPU) behind flatgate's ``openai`` backend:
each request goes to vLLM directly and through the gateway, and the client
reads the same answer both ways. Greedy (temperature 0) or seeded, on a
tiny random-weight model (``make_model.py``): the text means nothing, but
it is the same text each time, and every field that reaches vLLM changes it.

Covered: text, finish reason, usage and logprobs / top_logprobs (whole and
streamed), ``logit_bias``, vLLM's own sampling fields (``extra_body``:
``min_p``, ``repetition_penalty``, ``top_k``, ``ignore_eos`` with
``min_tokens``), stop sequences, seeds at temperature > 0, a strict tool
(vLLM constrains the arguments to its schema), the context-length 400, and
the Anthropic Messages edge in front of the same vLLM.

A request the client did not stream reaches vLLM with ``stream: false``
and its answer comes back whole (``openai_whole``): what the client reads
is then vLLM's whole answer, a tool call's arguments to the character. Each
exchange between flatgate and vLLM is captured by the recorder in between,
and kept as a fixture with ``FLATGATE_VLLM_RECORD=1`` (see ``conftest``);
``tests/backends/test_vllm_fixtures.py`` replays them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.backends.vllm_fixtures import chat_view, messages_view, write_capture
from tests.vllm.conftest import MAX_MODEL_LEN, MODEL, VllmStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

STORY = [{"role": "user", "content": "tell me a story about paris"}]
PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": PARAMS,
        # A random model writes valid arguments only where vLLM constrains them.
        "strict": True,
    },
}
FORCED = {"type": "function", "function": {"name": "get_weather"}}
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "unused"}


def _post(c: httpx.Client, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    with c.stream("POST", url, json=body, headers=headers) as r:
        return r.status_code, r.read()


class Exchange:
    """One request both ways: the views, and what flatgate's adapter sent."""

    def __init__(self, direct: Any, through: Any, adapter: Any) -> None:
        self.direct = direct
        self.through = through
        self.adapter = adapter


def _one(stack: VllmStack) -> Any:
    seen = stack.recorder.take()
    assert len(seen) == 1, [s.path for s in seen]
    return seen[0]


def chat(
    stack: VllmStack, capture: Path | None, case: str, body: dict[str, Any], stream: bool = False
) -> Exchange:
    """``body`` to vLLM and to flatgate, the answers as the client reads them."""
    req = {"model": MODEL, **body}
    if stream:
        req |= {"stream": True, "stream_options": {"include_usage": True}}
    stack.recorder.take()
    with stack.client() as c:
        d_status, d_body = _post(c, stack.vllm + "/chat/completions", req)
        f_status, f_body = _post(c, stack.gateway + "/chat/completions", req)
    seen = _one(stack)
    if capture is not None:
        record = {
            "case": case,
            "api": "chat",
            "request": req,
            "direct": {"status": d_status, "body": d_body.decode()},
            "flatgate": {"status": f_status, "body": f_body.decode()},
            "adapter_request": json.loads(seen.request),
            "backend": {"status": seen.status, "content_type": seen.content_type},
        }
        write_capture(capture, record, seen.body)
    adapter = json.loads(seen.request)
    # Whole when the client did not stream (OpenAI refuses stream_options then).
    assert adapter["stream"] is stream
    assert ("stream_options" in adapter) is stream
    return Exchange(
        chat_view(d_status, d_body, stream),
        chat_view(f_status, f_body, stream),
        adapter,
    )


def direct_chat(stack: VllmStack, body: dict[str, Any]) -> Any:
    with stack.client() as c:
        status, raw = _post(c, stack.vllm + "/chat/completions", {"model": MODEL, **body})
    return chat_view(status, raw, False)


def only(view: Any) -> Any:
    assert view["status"] == 200, view
    return view["choices"][0]


# -- Chat Completions ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_text_usage_and_logprobs(stack: VllmStack, capture_dir: Path | None, stream: bool) -> None:
    body = {"messages": STORY, "max_tokens": 12, "temperature": 0, "logprobs": True}
    ex = chat(
        stack,
        capture_dir,
        f"logprobs_{'stream' if stream else 'whole'}",
        {**body, "top_logprobs": 3},
        stream,
    )
    assert ex.through == ex.direct
    choice = only(ex.direct)
    assert choice["text"]
    assert ex.direct["usage"]["completion_tokens"] == len(choice["logprobs"])
    assert all(len(t["top_logprobs"]) == 3 for t in choice["logprobs"])
    assert ex.adapter["logprobs"] is True and ex.adapter["top_logprobs"] == 3


def test_logit_bias_makes_one_token_the_answer(stack: VllmStack, capture_dir: Path | None) -> None:
    with stack.client() as c:
        root = stack.vllm.removesuffix("/v1")
        tokens = c.post(root + "/tokenize", json={"model": MODEL, "prompt": " story"}).json()
    assert tokens["tokens"], tokens
    token = tokens["tokens"][0]
    bias = {str(token): 100}
    body = {"messages": STORY, "max_tokens": 6, "temperature": 0, "logit_bias": bias}
    ex = chat(stack, capture_dir, "logit_bias", body)
    assert ex.through == ex.direct
    with stack.client() as c:
        text = c.post(root + "/detokenize", json={"model": MODEL, "tokens": [token]}).json()
    assert only(ex.direct)["text"] == text["prompt"] * 6
    assert ex.adapter["logit_bias"] == bias


def test_vendor_fields_reach_vllm(stack: VllmStack, capture_dir: Path | None) -> None:
    vendor = {
        "min_p": 0.05,
        "repetition_penalty": 1.3,
        "top_k": 20,
        "ignore_eos": True,
        "min_tokens": 24,
    }
    base = {"messages": STORY, "max_tokens": 24, "temperature": 0}
    ex = chat(stack, capture_dir, "vendor_fields", {**base, **vendor})
    assert ex.through == ex.direct
    assert {k: ex.adapter[k] for k in vendor} == vendor
    # ignore_eos + min_tokens: exactly max_tokens, where the model stops sooner.
    assert ex.direct["usage"]["completion_tokens"] == 24
    assert only(ex.direct)["finish_reason"] == "length"
    assert direct_chat(stack, base)["usage"]["completion_tokens"] < 24
    # repetition_penalty: another greedy answer.
    same_length = direct_chat(stack, {**base, "ignore_eos": True, "min_tokens": 24})
    assert only(same_length)["text"] != only(ex.direct)["text"]


def test_stop_sequences(stack: VllmStack, capture_dir: Path | None) -> None:
    free = only(
        direct_chat(
            stack, {"messages": STORY, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        )
    )["text"]
    assert len(free) > 6, free
    stop = free[3:6]
    body = {
        "messages": STORY,
        "max_tokens": 16,
        "temperature": 0,
        "ignore_eos": True,
        "stop": [stop, "zzz"],
    }
    ex = chat(stack, capture_dir, "stop_sequences", body)
    assert ex.through == ex.direct
    choice = only(ex.direct)
    assert choice["finish_reason"] == "stop"
    assert choice["text"] == free[: free.index(stop)]
    assert ex.adapter["stop"] == [stop, "zzz"]


def test_seed_at_temperature_one(stack: VllmStack, capture_dir: Path | None) -> None:
    body = {"messages": STORY, "max_tokens": 16, "temperature": 1.0, "seed": 42, "ignore_eos": True}
    ex = chat(stack, capture_dir, "seed", body)
    assert ex.through == ex.direct
    other = direct_chat(stack, {**body, "seed": 43})
    assert only(other)["text"] != only(ex.direct)["text"]
    assert ex.adapter["seed"] == 42


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_strict_tool_call(stack: VllmStack, capture_dir: Path | None, stream: bool) -> None:
    body = {
        "messages": [{"role": "user", "content": "what is the weather in paris?"}],
        "max_tokens": 100,
        "temperature": 0,
        "tools": [WEATHER],
        "tool_choice": FORCED,
    }
    ex = chat(stack, capture_dir, f"tool_{'stream' if stream else 'whole'}", body, stream)
    got, want = only(ex.through), only(ex.direct)
    assert want["tool_calls"], want
    name, args = want["tool_calls"][0]
    assert name == "get_weather" and set(args) == {"city", "unit"}
    assert got["tool_calls"] == want["tool_calls"]
    # The arguments' very text: a whole answer is asked for whole (vLLM
    # spaces a streamed call's JSON otherwise), a stream streamed.
    assert got["arguments"] == want["arguments"]
    assert ex.adapter["stream"] is stream
    assert got["text"] == want["text"]
    assert ex.through["usage"] == ex.direct["usage"]
    assert ex.adapter["tools"] == [WEATHER]
    assert ex.adapter["tool_choice"] == FORCED
    # vLLM says "stop" for a forced call; flatgate, "tool_calls" (its adapter
    # turns any stop after tool deltas into tool_calls).
    assert (want["finish_reason"], got["finish_reason"]) in {
        ("stop", "tool_calls"),
        ("tool_calls", "tool_calls"),
    }


def test_context_length_400(stack: VllmStack, capture_dir: Path | None) -> None:
    long = [{"role": "user", "content": "paris " * (MAX_MODEL_LEN + 50)}]
    ex = chat(stack, capture_dir, "context_length", {"messages": long, "temperature": 0})
    assert ex.direct["status"] == 400
    reason = ex.direct["error"]["message"]
    assert "maximum context length" in reason
    assert ex.through["status"] == 400, ex.through
    error = ex.through["error"]
    assert error["type"] == "invalid_request_error", error
    assert reason in error["message"], error


# -- Anthropic Messages ----------------------------------------------------------


def messages(
    stack: VllmStack, capture: Path | None, case: str, body: dict[str, Any], chat_view_: Any
) -> tuple[Any, Any]:
    """``body`` to flatgate's Messages edge; the view and what the adapter sent."""
    req = {"model": MODEL, **body}
    stack.recorder.take()
    with stack.client() as c:
        status, raw = _post(c, stack.gateway + "/messages", req, ANTHROPIC)
    seen = _one(stack)
    if capture is not None:
        choice = chat_view_["choices"][0]
        record = {
            "case": case,
            "api": "messages",
            "request": req,
            "chat_text": choice["text"],
            "chat_tool_calls": choice["tool_calls"],
            "flatgate": {"status": status, "body": raw.decode()},
            "adapter_request": json.loads(seen.request),
            "backend": {"status": seen.status, "content_type": seen.content_type},
        }
        write_capture(capture, record, seen.body)
    adapter = json.loads(seen.request)
    assert adapter["stream"] is False and "stream_options" not in adapter
    if status == 200:
        assert seen.content_type.startswith("application/json"), seen.content_type
    return messages_view(status, raw, False), adapter


def test_messages_text_matches_chat(stack: VllmStack, capture_dir: Path | None) -> None:
    want = direct_chat(stack, {"messages": STORY, "max_tokens": 12, "temperature": 0})
    got, _ = messages(
        stack,
        capture_dir,
        "messages_text",
        {"messages": STORY, "max_tokens": 12, "temperature": 0},
        want,
    )
    assert got["text"] == only(want)["text"]
    assert got["usage"]["input_tokens"] == want["usage"]["prompt_tokens"]
    assert got["usage"]["output_tokens"] == want["usage"]["completion_tokens"]


def test_messages_stop_sequences(stack: VllmStack, capture_dir: Path | None) -> None:
    base = {"messages": STORY, "max_tokens": 16, "temperature": 0}
    free = only(direct_chat(stack, base))["text"]
    assert len(free) > 4, free
    stop = free[2:4]
    want = direct_chat(stack, {**base, "stop": [stop]})
    assert only(want)["text"] == free[: free.index(stop)]
    got, adapter = messages(
        stack, capture_dir, "messages_stop", {**base, "stop_sequences": [stop]}, want
    )
    assert got["text"] == only(want)["text"]
    assert (got["stop_reason"], got["stop_sequence"]) == ("stop_sequence", stop)
    assert adapter["stop"] == [stop]


def test_messages_tool_call_matches_chat(stack: VllmStack, capture_dir: Path | None) -> None:
    question = [{"role": "user", "content": "what is the weather in paris?"}]
    want = direct_chat(
        stack,
        {
            "messages": question,
            "max_tokens": 100,
            "temperature": 0,
            "tools": [WEATHER],
            "tool_choice": FORCED,
        },
    )
    tool = {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": PARAMS,
        "strict": True,
    }
    body = {
        "messages": question,
        "max_tokens": 100,
        "temperature": 0,
        "tools": [tool],
        "tool_choice": {"type": "tool", "name": "get_weather"},
    }
    got, adapter = messages(stack, capture_dir, "messages_tool", body, want)
    assert got["tool_calls"] == only(want)["tool_calls"]
    assert got["stop_reason"] == "tool_use"
    assert adapter["tool_choice"] == FORCED
