"""The Open Responses specification's requests (``tests/edge/responses/golden/spec``)
through ``flatgate gateway`` to each backend protocol's stub, whole and
streamed: the answer has every field and event the specification requires,
with its types (``tests/edge/responses/spec.py``), the echoed defaults its
example shows, and a stream that is ``text/event-stream`` ending with
``data: [DONE]``; ``presence_penalty`` and ``frequency_penalty`` are
carried to every backend that has them and echoed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clients.conftest import PROTOCOLS, ClientStack, model
from tests.edge.responses.spec import problems, stream_problems

GOLDEN = Path(__file__).resolve().parents[1] / "edge" / "responses" / "golden" / "spec"
EXAMPLE: dict[str, Any] = json.loads((GOLDEN / "response_resource_example.json").read_text())
# The protocols that carry an allowed_tools tool_choice; the others refuse it
# unless they drop it (docs/api/openai-responses.md).
CARRY_ALLOWED_TOOLS = ("fbs", "openai-responses")


def spec_request(name: str, **changed: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((GOLDEN / f"request_{name}.json").read_text())
    body.pop("type", None)  # the WebSocket envelope's
    return {**body, **changed}


def post(stack: ClientStack, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{stack.base_url}/responses",
        json=body,
        headers={"Authorization": "Bearer sk-flatgate-acme"},
        timeout=30,
    )


def bodies(protocol: str) -> list[dict[str, Any]]:
    """The golden requests ``protocol`` answers (to its model)."""
    out = [
        spec_request("websocket_create"),
        spec_request("allowed_tools", tool_choice="auto"),
    ]
    if protocol in CARRY_ALLOWED_TOOLS:
        out.append(spec_request("allowed_tools"))
    return [{**b, "model": model(protocol)} for b in out]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_whole_answer_has_every_field_the_specification_requires(
    stack: ClientStack, protocol: str
) -> None:
    for body in bodies(protocol):
        got = post(stack, body)
        assert got.status_code == 200, got.text
        assert got.headers["content-type"].startswith("application/json")
        answer = got.json()
        assert problems(answer, "ResponseResource") == [], body
        assert answer["status"] == "completed"
        assert answer["completed_at"] >= answer["created_at"]
        for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
            assert answer[key] == EXAMPLE[key]
        for key in ("top_logprobs", "service_tier", "truncation", "text", "metadata"):
            assert answer[key] == EXAMPLE[key]
        assert all(t["strict"] is True for t in answer["tools"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stream_has_every_event_field_the_specification_requires_and_ends_with_done(
    stack: ClientStack, protocol: str
) -> None:
    for body in bodies(protocol):
        got = post(stack, {**body, "stream": True})
        assert got.status_code == 200, got.text
        assert got.headers["content-type"].startswith("text/event-stream")
        assert stream_problems(got.content) == [], body
        assert got.content.endswith(b"\n\ndata: [DONE]\n\n")


@pytest.mark.parametrize("protocol", sorted(set(PROTOCOLS) - set(CARRY_ALLOWED_TOOLS)))
def test_allowed_tools_is_refused_where_it_cannot_be_carried(
    stack: ClientStack, protocol: str
) -> None:
    got = post(stack, {**spec_request("allowed_tools"), "model": model(protocol)})
    assert got.status_code == 400
    assert got.json()["error"]["code"] == "untranslatable_request"
    assert "tool_choice" in got.json()["error"]["message"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_penalties_are_carried_to_every_backend_that_has_them_and_echoed(
    stack: ClientStack, protocol: str
) -> None:
    sent = {"presence_penalty": 0.5, "frequency_penalty": -0.25}
    for stream in (False, True):
        got = post(
            stack,
            {
                **spec_request("websocket_create"),
                **sent,
                "model": model(protocol),
                "stream": stream,
            },
        )
        assert got.status_code == 200, got.text
        dropped = got.headers.get("x-flatgate-dropped-fields", "")
        if protocol == "anthropic":  # Anthropic's API has neither: left out, named
            assert dropped == "presence_penalty,frequency_penalty"
        else:
            assert "penalty" not in dropped
        if stream:
            assert stream_problems(got.content) == []
            last = got.content.decode().split("\n\n")[-3]
            answer = json.loads(last.split("data: ", 1)[1])["response"]
        else:
            answer = got.json()
        assert {k: answer[k] for k in sent} == sent
