"""The bedrock stub's faults mid-stream, and its canned and cadence modes
(every endpoint its own prebuilt answer), read by botocore's own client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import botocore.config
import botocore.session
import httpx
import pytest
from botocore.exceptions import BotoCoreError, ClientError, EventStreamError
from urllib3.exceptions import ProtocolError

from flatgate.proxy.backends.registry import PROTOCOLS
from flatgate.proxy.stub.cadence import TOKEN, prebuilt
from tests.servers import Server, running
from tests.stub.helpers import stub

pytestmark = pytest.mark.integration

NOVA = "amazon.nova-lite-v1:0"
CLAUDE = "anthropic.claude-3-5-haiku-20241022-v1:0"
ENVELOPE = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64}


_clients: list[Any] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Every client closed when its test ends (a stream cut short leaves
    its connection open until then)."""
    yield
    while _clients:
        _clients.pop().close()


def runtime(server: Server) -> Any:
    client = botocore.session.Session().create_client(
        "bedrock-runtime",
        region_name="us-west-2",
        endpoint_url=server.url,
        aws_access_key_id="AKID",
        aws_secret_access_key="unchecked",
        config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}),
    )
    _clients.append(client)
    return client


def _say(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"text": text}]}]


def _invoke_body(text: str) -> bytes:
    return json.dumps({**ENVELOPE, "messages": [{"role": "user", "content": text}]}).encode()


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("bedrock", tmp_path_factory.mktemp("bedrock-echo")) as s:
        yield s


def test_an_error_mid_converse_stream_is_an_exception_event(echo: Server) -> None:
    out = runtime(echo).converse_stream(modelId=NOVA + "@error:2", messages=_say("a b c d"))
    texts: list[str] = []
    with pytest.raises(EventStreamError) as err:
        for event in out["stream"]:
            if "contentBlockDelta" in event:
                texts.append(event["contentBlockDelta"]["delta"]["text"])
    out["stream"].close()
    assert texts == ["a ", "b "]
    assert err.value.response["Error"]["Code"] == "modelStreamErrorException"


def test_an_error_mid_invoke_stream_is_an_exception_event(echo: Server) -> None:
    out = runtime(echo).invoke_model_with_response_stream(
        modelId=CLAUDE + "@error:1", body=_invoke_body("a b c")
    )
    kinds: list[str] = []
    with pytest.raises(EventStreamError) as err:
        for event in out["body"]:
            kinds.append(json.loads(event["chunk"]["bytes"])["type"])
    out["body"].close()
    assert kinds.count("content_block_delta") == 1
    assert err.value.response["Error"]["Code"] == "modelStreamErrorException"


def test_a_cut_stream_and_faults_before_the_head(echo: Server) -> None:
    out = runtime(echo).converse_stream(modelId=NOVA + "@die:1", messages=_say("a b c"))
    with pytest.raises((BotoCoreError, ProtocolError)):  # urllib3's, as botocore lets it through
        list(out["stream"])
    out["stream"].close()
    for fault, code in (
        ("overloaded", "ServiceUnavailableException"),
        ("auth", "UnrecognizedClientException"),
        ("reject", "ValidationException"),
        ("fail", "InternalServerException"),
        ("error", "InternalServerException"),
    ):
        with pytest.raises(ClientError) as err:
            runtime(echo).converse(modelId=f"{NOVA}@{fault}", messages=_say("x"))
        assert err.value.response["Error"]["Code"] == code


def test_canned_answers_every_endpoint(tmp_path_factory: pytest.TempPathFactory) -> None:
    with stub("bedrock", tmp_path_factory.mktemp("bedrock-canned"), "--canned", "3") as s:
        client = runtime(s)
        whole = client.converse(modelId=NOVA, messages=_say("ignored"))
        assert whole["output"]["message"]["content"][0]["text"] == "tok tok tok "
        streamed = client.converse_stream(modelId=NOVA, messages=_say("ignored"))
        deltas = [e for e in streamed["stream"] if "contentBlockDelta" in e]
        assert len(deltas) == 3
        message = json.loads(
            client.invoke_model(modelId=CLAUDE, body=_invoke_body("x"))["body"].read()
        )
        assert message["content"][0]["text"] == "tok tok tok "


def test_cadence_paces_each_endpoint_from_prebuilt_frames(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    env = {"FLATGATE_STUB_CADENCE": "true", "FLATGATE_STUB_CADENCE_TOKENS": "4"}
    d = tmp_path_factory.mktemp("bedrock-cadence")
    with running("stub", ["--protocol", "bedrock"], d, env=env) as s:
        client = runtime(s)
        streamed = client.converse_stream(modelId=NOVA, messages=_say("ignored"))
        texts = [
            e["contentBlockDelta"]["delta"]["text"]
            for e in streamed["stream"]
            if "contentBlockDelta" in e
        ]
        assert texts == [TOKEN] * 4
        chunks = client.invoke_model_with_response_stream(modelId=CLAUDE, body=_invoke_body("x"))
        kinds = [json.loads(e["chunk"]["bytes"])["type"] for e in chunks["body"]]
        assert kinds.count("content_block_delta") == 4 and kinds[-1] == "message_stop"
        whole = client.converse(modelId=NOVA, messages=_say("ignored"))
        assert whole["output"]["message"]["content"][0]["text"] == TOKEN * 4
        cadence = httpx.get(f"{s.url}/stats", timeout=5).json()["cadence"]
        assert set(cadence) == {
            "/model/{model}/converse",
            "/model/{model}/converse-stream",
            "/model/{model}/invoke",
            "/model/{model}/invoke-with-response-stream",
        }


def test_prebuilt_frames_of_each_streaming_endpoint() -> None:
    wire = PROTOCOLS["bedrock"].stub()
    for endpoint in wire.endpoints:  # type: ignore[attr-defined]
        if endpoint.always_streams:
            p = prebuilt(endpoint, 3, lambda name: None)
            assert p.content_type == "application/vnd.amazon.eventstream"
            assert p.first and p.delta and p.final
