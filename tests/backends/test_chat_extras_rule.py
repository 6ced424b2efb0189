"""The rule at the ``openai`` (Chat Completions) backend (issue 22): a Chat
Completions client's own fields (vendor sampling fields, ``logprobs``,
unknown ones) reach it as sent; another API's field with no mapping is
refused naming it, unless the backend sets ``drop_unsupported``; fields mapped
to nothing are named, never refused. And logprobs come back: each choice's
``logprobs`` in its chunk's extras.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import NOTHING, UnsupportedField, unsupported
from flatgate.proxy.backends.openai import adapter as openai
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.registry import backend_problems
from flatgate.proxy.plumbing.config import ConfigError
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.inprocess import InProcessRouter
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import Upstream
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.request.writer import RequestWriter
from flatgate.proxy.wire.schema import OMITTED_HEADER, ApiDialect, Provider, Role
from tests.backends.helpers import config_of, data_events, translate_openai
from tests.backends.wire_requests import ANTHROPIC, CHAT, RESPONSES, msg, wire
from tests.proxy.routed import answered

HI = [msg(Role.User, "hi")]
VENDOR: dict[str, Any] = {
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "ignore_eos": False,
    "min_tokens": 2,
    "chat_template_kwargs": {"enable_thinking": False},
    "guided_json": {"type": "object"},
    "guided_regex": "a+",
    "guided_choice": ["yes", "no"],
    "guided_grammar": "root ::= 'a'",
    "structured_outputs": {"choice": ["a", "b"]},
    "logit_bias": {"50256": -100},
    "logprobs": True,
    "top_logprobs": 2,
    "x_vendor_knob": [1, {"deep": None}],
}


def body_of(req: Request, drop: bool = False) -> tuple[dict[str, Any], list[str]]:
    omitted: list[str] = []
    raw = openai.encode_request(req, model="m", omitted=omitted, drop_unsupported=drop)
    return json.loads(raw), omitted


def test_vendor_and_unknown_chat_fields_reach_the_backend_as_sent() -> None:
    out, omitted = body_of(wire(HI, extras=VENDOR, dialect=CHAT))
    assert {k: out[k] for k in VENDOR} == VENDOR
    assert omitted == []


def test_the_clients_bytes_are_spliced_untouched() -> None:
    text = '{"logit_bias":{"50256" : -100},"min_p":5e-2}'
    omitted: list[str] = []
    raw = openai.encode_request(wire(HI, extras=text, dialect=CHAT), model="m", omitted=omitted)
    assert raw.endswith(b',"logit_bias":{"50256" : -100},"min_p":5e-2}')


@pytest.mark.parametrize(
    ("dialect", "extras", "field"),
    [
        (RESPONSES, {"background": True}, "background"),
        (RESPONSES, {"conversation": "conv_1"}, "conversation"),
        (RESPONSES, {"truncation": "auto"}, "truncation"),
        (RESPONSES, {"text": {"format": {"type": "text"}, "extra": 1}}, "text.extra"),
        (RESPONSES, {"made_up": 1}, "made_up"),
        (ANTHROPIC, {"context_management": {"edits": []}}, "context_management"),
        (ANTHROPIC, {"mcp_servers": []}, "mcp_servers"),
        (ANTHROPIC, {"output_config": {"task_budget": 1}}, "output_config.task_budget"),
    ],
)
def test_a_field_with_no_mapping_is_refused_naming_it_unless_dropped(
    dialect: int, extras: dict[str, Any], field: str
) -> None:
    req = wire(HI, extras=extras, dialect=dialect)
    with pytest.raises(UnsupportedField) as info:
        body_of(req)
    assert info.value.param == field
    assert f"'{field}'" in str(info.value) and "drop_unsupported" in str(info.value)
    out, omitted = body_of(req, drop=True)
    assert omitted == [field]
    assert field.split(".", maxsplit=1)[0] not in out


def test_codex_fields_map_or_mean_nothing_and_are_never_refused() -> None:
    extras = {
        "reasoning": {"effort": "medium", "summary": "auto"},
        "text": {"verbosity": "low"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "client_metadata": {"session_id": "s"},
        "tools": [{"type": "web_search"}, {"type": "tool_search"}],
    }
    out, omitted = body_of(wire(HI, extras=extras, dialect=RESPONSES))
    assert (out["reasoning_effort"], out["verbosity"]) == ("medium", "low")
    assert out["prompt_cache_key"] == "thread-1"
    assert "include" not in out and "client_metadata" not in out and "store" not in out
    assert omitted == [
        "reasoning.summary",
        "include",
        "client_metadata",
        "tools[web_search]",
        "tools[tool_search]",
    ]


def test_off_values_ask_for_nothing() -> None:
    extras = {"truncation": "disabled", "background": False, "store": False}
    assert body_of(wire(HI, extras=extras, dialect=RESPONSES))[1] == []


@pytest.mark.parametrize(
    ("extras", "effort"),
    [
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "low"),
        ({"thinking": {"type": "enabled", "budget_tokens": 8000}}, "medium"),
        ({"thinking": {"type": "enabled", "budget_tokens": 32000}}, "high"),
        ({"output_config": {"effort": "max"}}, "high"),
        (
            {
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "output_config": {"effort": "medium"},
            },
            "medium",
        ),
    ],
)
def test_anthropic_thinking_maps_to_reasoning_effort(extras: dict[str, Any], effort: str) -> None:
    out, omitted = body_of(wire(HI, extras=extras, dialect=ANTHROPIC))
    assert out["reasoning_effort"] == effort
    assert "thinking" not in out and "output_config" not in out
    assert omitted == []


def test_anthropic_fields_mapped_to_nothing_are_named() -> None:
    extras = {
        "thinking": {"type": "adaptive"},
        "metadata": {"user_id": "u"},
        "$cache_control": [{"at": "system", "index": 0, "cache_control": {"type": "ephemeral"}}],
        "$headers": {"anthropic-beta": "x"},
    }
    out, omitted = body_of(wire(HI, extras=extras, dialect=ANTHROPIC))
    assert "reasoning_effort" not in out and "metadata" not in out
    assert omitted == ["thinking.adaptive", "metadata", "$cache_control", "$headers"]


def test_every_field_mapped_to_nothing_says_why() -> None:
    for fields in NOTHING.values():
        assert fields and all(why for why in fields.values())


def test_unsupported_refuses_or_records() -> None:
    omitted: list[str] = []
    with pytest.raises(Untranslatable, match="'prediction'"):
        unsupported("prediction", omitted, False)
    assert omitted == []
    unsupported("prediction", omitted, True)
    assert omitted == ["prediction"]


# -- the option ---------------------------------------------------------------------


def test_drop_unsupported_reaches_the_adapter() -> None:
    config = OpenAIConfig(
        name="b", url="http://127.0.0.1:9/v1", protocol="openai", drop_unsupported=True
    )
    omitted: list[str] = []
    req = wire(HI, extras={"made_up": 1}, dialect=RESPONSES)
    OpenAIAdapter(config).encode(req, "m", omitted, False)
    assert omitted == ["made_up"]
    strict = OpenAIConfig(name="b", url="http://127.0.0.1:9/v1", protocol="openai")
    with pytest.raises(UnsupportedField):
        OpenAIAdapter(strict).encode(req, "m", [], False)


def test_drop_unsupported_is_not_for_an_fbs_backend() -> None:
    fbs = {"name": "b", "url": "http://127.0.0.1:9", "drop_unsupported": True}
    with pytest.raises(ConfigError, match=r"b\.drop_unsupported: an fbs backend"):
        config_of(fbs, "b")
    for protocol in ("openai", "openai-responses", "anthropic"):
        ok = config_of({**fbs, "url": "http://127.0.0.1:9/v1", "protocol": protocol}, "b")
        assert ok.drop_unsupported and backend_problems(ok, "b") == []


# -- through the proxy --------------------------------------------------------------


class _Never:
    """A transport the refusal must never reach."""

    async def request(self, req: Upstream) -> Any:
        raise AssertionError("a refused request reached the backend")


def _buffer(extras: dict[str, Any], dialect: int) -> bytes:
    w = RequestWriter()
    w.strings(
        request_id="r1",
        model_name="c-1",
        tenant="",
        user="",
        tool_choice_name="",
        response_format=b"",
        extras=json.dumps(extras).encode(),
    )
    w.messages([(int(Role.User), b"hi")])
    return w.finish(provider=int(Provider.OpenAI), extras_dialect=dialect)


async def test_the_proxy_answers_a_refused_field_with_a_400_naming_it() -> None:
    config = {
        "proxy": {"access_log": False},
        "backends": [{"name": "chat", "url": "http://127.0.0.1:9/v1", "protocol": "openai"}],
        "routes": [{"model": "c-*", "backends": ["chat"]}],
    }
    proxy = ProxyServer(parse_config(config), worker="t")
    proxy._transport = _Never()  # type: ignore[assignment]
    t = InProcessRouter(proxy)
    body = _buffer({"context_management": {"edits": []}}, int(ApiDialect.ANTHROPIC_MESSAGES))
    status, headers, data = await answered(t.complete(body, "", admitted=True))
    got = json.loads(data)
    assert status == 400
    assert got["error"]["code"] == "untranslatable_request"
    assert "'context_management'" in got["error"]["message"]
    assert OMITTED_HEADER not in headers


# -- logprobs back ------------------------------------------------------------------

LOGPROB = {"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}


def test_each_choices_logprobs_ride_in_its_content_chunks_extras() -> None:
    lp = {"content": [LOGPROB], "refusal": None}
    data = data_events(
        {
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
            ]
        },
        {"choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": lp}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}]},
    )
    chunks = translate_openai(data)
    carrying = [c for c in chunks if c.extras]
    assert len(carrying) == 1
    [c] = carrying
    assert c.content == "Hi"
    assert c.extras_dialect == int(ApiDialect.OPENAI_CHAT)
    assert json.loads(c.extras) == {"logprobs": lp}
    assert "".join(c.content for c in chunks) == "Hi"


def test_logprobs_without_text_still_come_back() -> None:
    lp = {"content": None, "refusal": [LOGPROB]}
    data = data_events(
        {"choices": [{"index": 0, "delta": {}, "logprobs": lp}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )
    [c] = [c for c in translate_openai(data) if c.extras]
    assert c.content == "" and json.loads(c.extras) == {"logprobs": lp}
