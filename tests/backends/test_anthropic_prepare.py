"""``backends.anthropic``'s adapter: what it sends a body with (the path,
the version, the key or the caller's credential, the model, a whole answer
or a stream), and its readiness probe. The bodies themselves:
``test_anthropic_request``."""

from __future__ import annotations

import json

import pytest

from flatgate.proxy.backends.anthropic.adapter import LONGEST_WHOLE_TOKENS, encode_request
from flatgate.proxy.backends.base import Inbound, Untranslatable
from flatgate.proxy.wire.schema import JSON, SSE
from tests.backends.helpers import request, user
from tests.backends.test_anthropic_request import adapter, assistant_calls, minimal


def test_prepare_posts_to_messages_with_version_and_key() -> None:
    req = request(minimal())
    out = adapter(api_key="sk-ant-x").prepare(
        Inbound(b"ignored", lambda: req, "rid-3", "Bearer caller")
    )
    assert out.url == "https://api.anthropic.com/v1/messages"
    headers = dict(out.headers)
    assert headers["content-type"] == JSON
    assert headers["accept"] == JSON  # the client did not stream: a whole answer
    assert headers["x-request-id"] == "rid-3"
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["x-api-key"] == "sk-ant-x"
    assert "authorization" not in headers


@pytest.mark.parametrize(
    ("client_streams", "whole_answers", "whole"),
    [(False, True, True), (True, True, False), (False, False, False), (True, False, False)],
)
def test_prepare_asks_for_a_whole_answer_when_the_client_did_not_stream(
    client_streams: bool, whole_answers: bool, whole: bool
) -> None:
    req = request(minimal(stream=client_streams))
    a = adapter(whole_answers=whole_answers)
    out = a.prepare(Inbound(b"", lambda: req, "r", ""))
    assert out.whole is whole
    assert json.loads(out.body)["stream"] is not whole
    assert dict(out.headers)["accept"] == (JSON if whole else SSE)
    assert out.body == encode_request(req, model=req.model_name, whole=whole)


@pytest.mark.parametrize(
    ("max_tokens", "default", "whole"),
    [
        (LONGEST_WHOLE_TOKENS, 4096, True),
        (LONGEST_WHOLE_TOKENS + 1, 4096, False),
        (0, LONGEST_WHOLE_TOKENS + 1, False),
        (0, 4096, True),
    ],
)
def test_an_answer_that_may_run_past_ten_minutes_is_streamed(
    max_tokens: int, default: int, whole: bool
) -> None:
    body = minimal()
    if max_tokens:
        body["max_tokens"] = max_tokens
    else:
        body.pop("max_tokens", None)
    req = request(body)
    out = adapter(default_max_tokens=default).prepare(Inbound(b"", lambda: req, "r", ""))
    assert out.whole is whole
    assert json.loads(out.body)["stream"] is not whole


def test_prepare_sends_the_configured_version_and_headers() -> None:
    req = request(minimal())
    a = adapter(anthropic_version="2099-01-01", headers={"anthropic-beta": "x-2025"})
    headers = a.prepare(Inbound(b"", lambda: req, "r", "")).headers
    assert ("anthropic-version", "2099-01-01") in headers
    assert ("anthropic-beta", "x-2025") in headers


def test_prepare_forwards_the_callers_credential_when_configured() -> None:
    req = request(minimal())
    out = adapter(forward_credentials=True).prepare(Inbound(b"", lambda: req, "r", "Bearer caller"))
    assert ("authorization", "Bearer caller") in out.headers
    assert "x-api-key" not in dict(out.headers)


def test_prepare_sends_the_configured_model_over_the_routed_one() -> None:
    req = request(minimal(), model_name="claude-routed")
    assert (
        json.loads(adapter().prepare(Inbound(b"", lambda: req, "r", "")).body)["model"]
        == "claude-routed"
    )
    body = adapter(model="claude-sonnet-4-5").prepare(Inbound(b"", lambda: req, "r", "")).body
    assert json.loads(body)["model"] == "claude-sonnet-4-5"


def test_prepare_raises_untranslatable_for_arguments_that_are_not_an_object() -> None:
    req = request(minimal(messages=[user("q"), assistant_calls(("c", "f", "[]"))]))
    with pytest.raises(Untranslatable):
        adapter().prepare(Inbound(b"", lambda: req, "r", ""))


def test_probe_is_a_connection_to_the_origin_without_a_health_path() -> None:
    probe = adapter(url="https://api.anthropic.com/v1").probe()
    assert probe.connect_only
    assert probe.url == "https://api.anthropic.com"
    assert probe.headers == []


def test_probe_gets_the_health_path_with_version_and_key() -> None:
    probe = adapter(url="http://127.0.0.1:9000/v1", api_key="k", health_path="/health").probe()
    assert not probe.connect_only
    assert probe.url == "http://127.0.0.1:9000/health"  # from the server root
    assert ("x-api-key", "k") in probe.headers
    assert ("anthropic-version", "2023-06-01") in probe.headers
