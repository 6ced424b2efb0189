"""``POST /v1/responses/compact`` end to end, through ``flatgate gateway``
to the stub speaking each backend protocol (fbs, openai, openai-responses,
anthropic), and to an ``openai-responses`` backend that compacts itself
(``compact = true``: the stub's ``/v1/responses/compact``): the
``response.compaction`` object held to the specification's schema, its
window sent back as the next request's input, the errors in the Responses
API's shape, and the same keys and model allow-lists as ``/v1/responses``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import CompactedResponse, ResponseCompactionItem

from flatgate.proxy.apis.openai_responses.compact import PROMPT, summary_of, summary_text
from flatgate.proxy.backends.responses.stub_request import compaction_content
from tests.edge.responses.test_compact import check_compact_resource
from tests.servers import Server, free_port, spawn
from tests.stacks import QUIET, loopback, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY, LIMITED = "sk-compact", "sk-limited"
PROTOCOLS = ("fbs", "openai", "openai-responses", "anthropic")
TALK = [
    {"type": "message", "role": "user", "content": "We launch on Tuesday."},
    {"type": "message", "role": "assistant", "content": "Understood: Tuesday."},
]


def _config(d: Path, stubs: dict[str, int]) -> str:
    backends: dict[str, Any] = {"s-fbs": loopback(stubs["fbs"])}
    for protocol in PROTOCOLS[1:]:
        backends[f"s-{protocol}"] = {"url": f"{loopback(stubs[protocol])}/v1", "protocol": protocol}
    backends["s-compacting"] = {**backends["s-openai-responses"], "compact": True}
    return write_stack(
        d / "flatgate.toml",
        proxy=dict(QUIET),
        backends=backends,
        routes={
            **{f"echo-{p}": f"s-{p}" for p in PROTOCOLS},
            "echo-compacting": "s-compacting",
        },
        edge=dict(QUIET),
        models={
            "echo-fbs": "SelfHosted",
            **{f"echo-{p}": "OpenAI" for p in (*PROTOCOLS[1:], "compacting")},
        },
        keys={KEY: "acme", LIMITED: {"tenant": "beta", "models": ["echo-fbs"]}},
    )


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("compact-e2e")
    ports = {p: free_port() for p in PROTOCOLS}
    config = _config(d, ports)
    servers = [spawn("stub", ["--protocol", p], d, port=ports[p]) for p in PROTOCOLS]
    servers.append(spawn("gateway", ["--config", config], d))
    start_all(servers)
    try:
        yield servers[-1]
    finally:
        stop_all(servers)


def post(gw: Server, path: str, body: dict[str, Any], key: str = KEY) -> httpx.Response:
    return httpx.post(
        f"{gw.url}{path}", json=body, headers={"authorization": f"Bearer {key}"}, timeout=20
    )


def compact(gw: Server, model: str, **body: Any) -> dict[str, Any]:
    r = post(gw, "/v1/responses/compact", {"model": model, "input": TALK, **body})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    doc: dict[str, Any] = r.json()
    check_compact_resource(doc)
    return doc


def answer_text(doc: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in doc["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_gateway_compacts_with_the_route_s_model(gateway: Server, protocol: str) -> None:
    doc = compact(gateway, f"echo-{protocol}", prompt_cache_key="session-1")
    user, item = doc["output"]
    assert (user["role"], user["content"]) == (
        "user",
        [{"type": "input_text", "text": "We launch on Tuesday."}],
    )
    assert item["id"].startswith("cmp_")
    # The echo stub's summary is the prompt it was asked (its last message).
    summary = summary_of(item["encrypted_content"])
    assert summary is not None and PROMPT in summary
    assert doc["usage"]["input_tokens"] > 0 and doc["usage"]["output_tokens"] > 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_compacted_window_is_the_next_request_s_input(gateway: Server, protocol: str) -> None:
    """The window goes back as is; the backend is sent the summary as the
    last user message, which the echo says back."""
    window = compact(gateway, f"echo-{protocol}")["output"]
    r = post(gateway, "/v1/responses", {"model": f"echo-{protocol}", "input": window})
    assert r.status_code == 200, r.text
    said = answer_text(r.json())
    assert said.endswith(summary_text(summary_of(window[-1]["encrypted_content"]) or "-"))
    more = [*window, {"type": "message", "role": "user", "content": "Go on."}]
    r = post(gateway, "/v1/responses", {"model": f"echo-{protocol}", "input": more})
    assert r.status_code == 200 and answer_text(r.json()).endswith("Go on.")


@pytest.mark.parametrize("protocol", [*PROTOCOLS, "compacting"])
def test_the_openai_sdk_compacts_and_continues(gateway: Server, protocol: str) -> None:
    """The SDK's compact call, its answer as the SDK types it; its window
    back into a create call as the SDK dumps it."""
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0) as client:
        compacted = client.responses.compact(
            model=f"echo-{protocol}",
            input=TALK,  # type: ignore[arg-type]
            prompt_cache_key="session-1",
            prompt_cache_retention="24h",
        )
        assert isinstance(compacted, CompactedResponse)
        assert compacted.object == "response.compaction" and compacted.usage.total_tokens > 0
        item = compacted.output[-1]
        assert isinstance(item, ResponseCompactionItem) and item.id.startswith("cmp_")
        # The SDK types a user message of ``output`` as an output message
        # (OpenAI answers the same shape), and warns when it serializes one.
        window = [i.model_dump(exclude_none=True, warnings=False) for i in compacted.output]
        window.append({"type": "message", "role": "user", "content": "Go on."})
        answer = client.responses.create(model=f"echo-{protocol}", input=window)  # type: ignore[arg-type]
        assert answer.status == "completed" and answer.output_text.endswith("Go on.")


def test_a_backend_that_compacts_is_forwarded_the_request(gateway: Server) -> None:
    doc = compact(gateway, "echo-compacting", prompt_cache_key="session-1")
    user, item = doc["output"]
    assert user["content"] == [{"type": "input_text", "text": "We launch on Tuesday."}]
    summary = "The stub compacted 2 items: We launch on Tuesday. | Understood: Tuesday."
    assert item["encrypted_content"] == compaction_content(summary)
    assert doc["usage"]["input_tokens"] == 6  # the conversation's words: no prompt was sent
    # Its item goes back to it as it came; the stub checks it is its own.
    r = post(gateway, "/v1/responses", {"model": "echo-compacting", "input": doc["output"]})
    assert r.status_code == 200 and answer_text(r.json()) == summary
    forged = {**item, "encrypted_content": "gAAAA-not-the-stub-s="}
    r = post(gateway, "/v1/responses", {"model": "echo-compacting", "input": [user, forged]})
    assert r.status_code == 400, r.text
    assert "could not be verified" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": TALK}, "model"),
        ({"model": "echo-openai", "input": TALK, "stream": True}, "stream"),
        ({"model": "echo-openai", "input": [{"type": "compaction", "id": "cmp_1"}]}, None),
    ],
    ids=["no model", "stream", "item without content"],
)
def test_a_bad_compact_request_is_a_400_in_the_responses_shape(
    gateway: Server, body: dict[str, Any], param: str | None
) -> None:
    r = post(gateway, "/v1/responses/compact", body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == (param or "input.[0].encrypted_content")


def test_compact_takes_the_keys_and_allow_lists_of_responses(gateway: Server) -> None:
    anonymous = httpx.post(f"{gateway.url}/v1/responses/compact", json={"model": "echo-fbs"})
    assert anonymous.status_code == 401 and "error" in anonymous.json()
    allowed = post(gateway, "/v1/responses/compact", {"model": "echo-fbs", "input": TALK}, LIMITED)
    assert allowed.status_code == 200
    body = {"model": "echo-openai", "input": TALK}
    denied = post(gateway, "/v1/responses/compact", body, LIMITED)
    same = post(gateway, "/v1/responses", body, LIMITED)
    assert denied.status_code == same.status_code and denied.status_code in (403, 404)
    assert denied.json()["error"]["code"] == same.json()["error"]["code"]


def test_compact_is_no_stored_response(gateway: Server) -> None:
    r = httpx.get(f"{gateway.url}/v1/responses/compact", headers={"authorization": f"Bearer {KEY}"})
    assert (r.status_code, r.headers["allow"]) == (405, "POST")


def test_compact_takes_a_stored_chain(gateway: Server) -> None:
    first = post(gateway, "/v1/responses", {"model": "echo-openai", "input": "Remember: slate."})
    assert first.status_code == 200
    asked = [{"type": "message", "role": "user", "content": "Compress this."}]
    doc = compact(gateway, "echo-openai", input=asked, previous_response_id=first.json()["id"])
    said = [item["content"][0]["text"] for item in doc["output"][:-1]]
    assert said == ["Remember: slate.", "Compress this."]
    body = {"model": "echo-openai", "input": asked, "previous_response_id": "resp_none"}
    r = post(gateway, "/v1/responses/compact", body)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "previous_response_not_found"
