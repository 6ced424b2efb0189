"""The ``bedrock`` adapter: which API a model goes through, its URL and
credential, embeddings, refusals by AWS's error type, and its probe."""

from __future__ import annotations

import datetime
import json
from typing import Any

import botocore.session
import msgspec
import pytest

from flatgate.proxy.backends.base import Inbound, RefusalKind, Untranslatable
from flatgate.proxy.backends.bedrock.adapter import BedrockAdapter
from flatgate.proxy.backends.bedrock.auth import verify
from flatgate.proxy.backends.bedrock.config import (
    BedrockConfig,
    api_for,
    bedrock_problems,
    is_anthropic,
    region_of,
)
from flatgate.proxy.backends.bedrock.embeddings import encode_embeddings, read_embeddings
from flatgate.proxy.plumbing.config import Problems
from flatgate.proxy.transport.aws import AwsCredentials
from flatgate.proxy.transport.credentials import CredentialsUnavailable
from flatgate.proxy.wire.embeddings import EmbeddingInput, read_embedding_response
from tests.backends.helpers import request

URL = "https://bedrock-runtime.us-west-2.amazonaws.com"
CREDS = AwsCredentials("AKIDEXAMPLE", "secret-key", "token-1")
NO_ENV: dict[str, str] = {}


def _config(**kw: Any) -> BedrockConfig:
    return msgspec.convert({"name": "b", "url": URL, "protocol": "bedrock", **kw}, BedrockConfig)


def _adapter(creds: AwsCredentials | None = CREDS, **kw: Any) -> BedrockAdapter:
    a = BedrockAdapter(_config(**kw), NO_ENV)
    if creds is not None and a.credentials is not None:
        a.credentials._fetch = lambda: (creds, None)
        a.credentials.refresh()
    return a


def _call(body: dict[str, Any], model: str) -> Inbound[Any]:
    req = request(body, model_name=model)
    return Inbound(b"", lambda: req, "req-1", "Bearer caller-key")


_CHAT = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}


@pytest.mark.parametrize(
    ("model", "anthropic"),
    [
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", True),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", True),
        ("global.anthropic.claude-opus-4-1-20250805-v1:0", True),
        ("arn:aws:bedrock:us-east-1:1:inference-profile/eu.anthropic.claude-3-haiku-v1:0", True),
        ("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-v2", True),
        ("amazon.nova-pro-v1:0", False),
        ("us.amazon.nova-lite-v1:0", False),
        ("meta.llama3-70b-instruct-v1:0", False),
        ("arn:aws:bedrock:us-east-1:1:application-inference-profile/a1b2c3", False),
    ],
)
def test_which_api_a_model_takes(model: str, anthropic: bool) -> None:
    assert is_anthropic(model) is anthropic
    assert api_for("auto", model) == ("invoke" if anthropic else "converse")
    assert api_for("converse", model) == "converse"
    assert api_for("invoke", model) == "invoke"


def test_region_comes_from_the_url_or_is_required() -> None:
    assert region_of(_config()) == "us-west-2"
    assert region_of(_config(url="https://bedrock-runtime-fips.us-east-1.amazonaws.com")) == (
        "us-east-1"
    )
    assert region_of(_config(url="http://127.0.0.1:9", region="eu-west-1")) == "eu-west-1"
    problems = Problems()
    bedrock_problems(_config(url="http://127.0.0.1:9", forward_credentials=True), "b", problems)
    assert [p.split(":")[0] for p in problems] == ["b.region", "b.forward_credentials"]


def test_claude_is_invoked_signed_with_the_model_escaped() -> None:
    a = _adapter()
    model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    out = a.prepare(_call({**_CHAT, "stream": True}, model))
    assert (
        out.url
        == f"{URL}/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
    )
    assert not out.whole
    headers = dict(out.headers)
    assert headers["x-amzn-bedrock-accept"] == "application/json"
    assert headers["accept"] == "application/vnd.amazon.eventstream"
    assert headers["x-amz-security-token"] == "token-1"
    assert "Bearer caller-key" not in headers.values()  # never the caller's
    doc = json.loads(out.body)
    assert doc["anthropic_version"] == "bedrock-2023-05-31" and "model" not in doc
    table = {
        **{k.lower(): v for k, v in out.headers},
        "host": "bedrock-runtime.us-west-2.amazonaws.com",
    }
    stamp = datetime.datetime.strptime(table["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=datetime.UTC
    )
    assert verify("POST", out.url, table.get, out.body, "secret-key", now=lambda: stamp) == ""
    whole = a.prepare(_call(_CHAT, model))
    assert whole.whole and whole.url.endswith("/invoke")
    assert a.translator("r", model, True).__class__.__name__ == "AnthropicWhole"
    assert a.translator("r", model).__class__.__name__ == "InvokeStream"


def test_nova_goes_through_converse_and_the_model_key_renames() -> None:
    a = _adapter(model="amazon.nova-pro-v1:0")
    out = a.prepare(_call(_CHAT, "anthropic.claude-would-invoke"))
    assert out.url == f"{URL}/model/amazon.nova-pro-v1%3A0/converse"
    body = json.loads(out.body)
    assert "modelId" not in body and body["messages"][0]["role"] == "user"
    stream = a.prepare(_call({**_CHAT, "stream": True}, "x"))
    assert stream.url.endswith("/converse-stream")
    assert a.translator("r", "x").__class__.__name__ == "ConverseStream"
    assert a.translator("r", "x", True).__class__.__name__ == "ConverseWhole"


def test_a_port_the_scheme_implies_is_not_signed_apart() -> None:
    a = BedrockAdapter(_config(url=URL + ":443/"), NO_ENV)
    assert a.base == URL


def test_an_arn_is_one_path_segment() -> None:
    arn = (
        "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-3-haiku-v1:0"
    )
    out = _adapter().prepare(_call(_CHAT, arn))
    assert out.url == (
        f"{URL}/model/arn%3Aaws%3Abedrock%3Aus-west-2%3A123456789012%3Ainference-profile"
        "%2Fus.anthropic.claude-3-haiku-v1%3A0/invoke"
    )


def test_a_bedrock_api_key_is_a_bearer_and_needs_no_chain() -> None:
    a = BedrockAdapter(_config(api_key="bedrock-key"), NO_ENV)
    assert a.credentials is None
    headers = dict(a.prepare(_call(_CHAT, "amazon.nova-lite-v1:0")).headers)
    assert headers["authorization"] == "Bearer bedrock-key"
    assert "x-amz-date" not in headers
    env = BedrockAdapter(_config(), {"AWS_BEARER_TOKEN_BEDROCK": "from-env"})
    assert env.credentials is None
    assert dict(env.prepare(_call(_CHAT, "m")).headers)["authorization"] == "Bearer from-env"


def test_no_credentials_yet_is_the_gateways_problem() -> None:
    a = _adapter(creds=None)
    with pytest.raises(CredentialsUnavailable):
        a.prepare(_call(_CHAT, "amazon.nova-lite-v1:0"))


def test_the_configured_beta_goes_into_the_body_not_out_as_a_header() -> None:
    a = _adapter(headers={"anthropic-beta": "context-1m-2025-08-07", "x-team": "a"})
    out = a.prepare(_call(_CHAT, "anthropic.claude-sonnet-4-5-20250929-v1:0"))
    headers = dict(out.headers)
    assert "anthropic-beta" not in headers and headers["x-team"] == "a"
    assert json.loads(out.body)["anthropic_beta"] == ["context-1m-2025-08-07"]
    # Converse is sent the headers as configured.
    converse = dict(a.prepare(_call(_CHAT, "amazon.nova-pro-v1:0")).headers)
    assert converse["anthropic-beta"] == "context-1m-2025-08-07"


@pytest.mark.parametrize(
    ("status", "kind_name", "expected", "retry"),
    [
        (429, "ThrottlingException", RefusalKind.RATE_LIMITED, "3"),
        (400, "ValidationException", RefusalKind.REJECTED, None),
        (403, "AccessDeniedException", RefusalKind.AUTH, None),
        (403, "UnrecognizedClientException", RefusalKind.AUTH, None),
        (503, "ServiceUnavailableException", RefusalKind.UNAVAILABLE, None),
        (429, "ModelNotReadyException", RefusalKind.UNAVAILABLE, None),
        (424, "ModelErrorException", RefusalKind.UNAVAILABLE, None),
        (418, "", RefusalKind.REJECTED, None),
    ],
)
def test_refusals_by_aws_error_type(
    status: int, kind_name: str, expected: RefusalKind, retry: str | None
) -> None:
    headers = {"x-amzn-errortype": f"{kind_name}:http://internal.amazon.com/coral/"}
    if retry:
        headers["retry-after"] = retry
    r = _adapter().refusal(status, headers, b'{"message":"what AWS said"}')
    assert r.kind is expected
    assert r.status == status
    assert r.message == (f"{kind_name}: what AWS said" if kind_name else "what AWS said")
    assert r.retry_after == (3.0 if retry else None)


def test_the_probe_connects_only() -> None:
    p = _adapter().probe()
    assert p.connect_only and p.url == URL and p.headers == []


def test_not_ready_before_sigv4_credentials_are_fetched() -> None:
    with pytest.raises(CredentialsUnavailable, match="not fetched yet"):
        _adapter(creds=None).probe()
    # A Bedrock API key needs no fetch.
    assert _adapter(creds=None, api_key="bedrock-key").probe().connect_only


# -- embeddings ---------------------------------------------------------------

_SERVICE = botocore.session.get_session().get_service_model("bedrock-runtime")


def _input(*texts: str, dimensions: int = 0, extras: str = "") -> EmbeddingInput:
    return EmbeddingInput("r", 0, "m", texts, (), dimensions, "", "", extras, 1)


def test_titan_takes_one_input_and_refuses_more_naming_input() -> None:
    omitted: list[str] = []
    body = encode_embeddings(
        _input("hello world", dimensions=256, extras='{"normalize": true}'),
        model="amazon.titan-embed-text-v2:0",
        omitted=omitted,
        drop_unsupported=False,
    )
    assert json.loads(body) == {"inputText": "hello world", "dimensions": 256, "normalize": True}
    with pytest.raises(Untranslatable, match=r"^input: Titan"):
        encode_embeddings(
            _input("a", "b"),
            model="amazon.titan-embed-text-v2:0",
            omitted=[],
            drop_unsupported=False,
        )


def test_cohere_takes_a_batch_and_refuses_unknown_extras() -> None:
    body = encode_embeddings(
        _input("a", "b", extras='{"input_type": "search_query"}'),
        model="us.cohere.embed-v4:0",
        omitted=[],
        drop_unsupported=False,
    )
    assert json.loads(body) == {"texts": ["a", "b"], "input_type": "search_query"}
    with pytest.raises(Untranslatable, match="bogus"):
        encode_embeddings(
            _input("a", extras='{"bogus": 1}'),
            model="cohere.embed-english-v3",
            omitted=[],
            drop_unsupported=False,
        )
    with pytest.raises(Untranslatable, match=r"^model"):
        encode_embeddings(
            _input("a"), model="amazon.nova-pro-v1:0", omitted=[], drop_unsupported=False
        )


def test_embeddings_answers_become_one_buffer() -> None:
    titan = read_embeddings(
        b'{"embedding": [0.5, -0.25], "inputTextTokenCount": 3}',
        kind="titan",
        request_id="r",
        model="amazon.titan-embed-text-v2:0",
    )
    got = read_embedding_response(titan)
    assert (got.count, got.dimensions, got.prompt_tokens) == (1, 2, 3)
    cohere = read_embeddings(
        b'{"id": "x", "response_type": "embeddings_by_type", "texts": ["a", "b"],'
        b' "embeddings": {"float": [[1.0, 2.0], [3.0, 4.0]]}}',
        kind="cohere",
        request_id="r",
        model="cohere.embed-v4:0",
    )
    assert read_embedding_response(cohere).count == 2
    with pytest.raises(ValueError, match="different lengths"):
        read_embeddings(
            b'{"embeddings": [[1.0], [1.0, 2.0]]}', kind="cohere", request_id="r", model="c"
        )


def test_embeddings_of_a_model_that_has_none_are_refused_naming_model() -> None:
    with pytest.raises(Untranslatable, match=r"^model: 'm'"):
        _adapter().prepare_embeddings(Inbound(b"", lambda: _input("hi"), "req-1", ""))


def test_embeddings_of_a_titan_model() -> None:
    a = _adapter(model="amazon.titan-embed-text-v2:0")
    out = a.prepare_embeddings(Inbound(b"", lambda: _input("hi"), "req-1", ""))
    assert out.url == f"{URL}/model/amazon.titan-embed-text-v2%3A0/invoke"
    assert "authorization" in dict(out.headers)
    answer = a.embeddings_answer(b'{"embedding": [1.0, 0.0]}', "req-1", "ignored")
    assert read_embedding_response(answer).model == "amazon.titan-embed-text-v2:0"
    op = _SERVICE.operation_model("InvokeModel")
    assert op.http["requestUri"] == "/model/{modelId}/invoke"


def test_the_registry_converts_and_checks_a_bedrock_entry() -> None:
    from flatgate.proxy.backends.registry import (
        adapter_for,
        backend_config,
        backend_problems,
        kinds,
    )

    problems = Problems()
    entry = {"name": "b", "protocol": "bedrock", "url": "http://127.0.0.1:9", "api": "invoke"}
    config = backend_config(entry, "backends[0]", problems)
    assert isinstance(config, BedrockConfig) and problems == []
    assert kinds(config) == ("completions", "embeddings")
    assert backend_problems(config, "backends[0]", {}) == [
        "backends[0].region: required: the url's host names no region "
        "(bedrock-runtime.<region>.amazonaws.com)"
    ]
    assert isinstance(adapter_for(config), BedrockAdapter)
    foreign = backend_config({**entry, "max_tokens_field": "max_tokens"}, "backends[1]", problems)
    assert foreign is None
    assert problems == ["backends[1].max_tokens_field: applies to openai backends only"]
    wrong = backend_config({**entry, "api": "chat"}, "backends[2]", Problems())
    assert wrong is None
