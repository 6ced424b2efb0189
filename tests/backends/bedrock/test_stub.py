"""``flatgate stub --protocol bedrock`` spoken to by clients nobody here
wrote: botocore's own bedrock-runtime client (its SigV4 signer, its
serializers and its event-stream parser) and the anthropic SDK's
``AnthropicBedrock`` (InvokeModel with a Bedrock API key)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import botocore.config
import botocore.session
import httpx
import pytest
from botocore.exceptions import ClientError

from tests.servers import Server
from tests.stub.helpers import stub

pytestmark = pytest.mark.integration

KEY = "stub-secret-key"
NOVA = "amazon.nova-pro-v1:0"
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("bedrock", tmp_path_factory.mktemp("bedrock-stub"), "--api-key", KEY) as s:
        yield s


def runtime(server: Server, secret: str = KEY, token: str | None = None) -> Any:
    """botocore's bedrock-runtime client, signing with ``secret``, no retries."""
    return botocore.session.Session().create_client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=server.url,
        aws_access_key_id="AKIDSTUB",
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}),
    )


def _user(*content: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(content)}]


def test_converse_whole_signed_by_botocore(server: Server) -> None:
    out = runtime(server, token="session-token").converse(
        modelId=NOVA,
        messages=_user({"text": "hello from botocore"}),
        inferenceConfig={"maxTokens": 64},
    )
    assert out["output"]["message"]["content"][0]["text"] == "hello from botocore"
    assert out["stopReason"] == "end_turn"
    assert out["usage"]["outputTokens"] == 3


def test_converse_stream_parsed_by_botocore(server: Server) -> None:
    out = runtime(server).converse_stream(
        modelId=NOVA,
        messages=_user(
            {"text": "one two three"}, {"image": {"format": "png", "source": {"bytes": PNG}}}
        ),
    )
    events = list(out["stream"])
    text = "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )
    digest = hashlib.sha256(PNG).hexdigest()[:12]
    assert text == f"one two three [image image/png {len(PNG)} bytes sha256:{digest} 1x1]"
    assert [k for e in events for k in e][-2:] == ["messageStop", "metadata"]


def test_a_wrong_secret_or_no_credential_is_refused(server: Server) -> None:
    with pytest.raises(ClientError) as err:
        runtime(server, secret="not-the-key").converse(modelId=NOVA, messages=_user({"text": "x"}))
    assert err.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    r = httpx.post(f"{server.url}/model/{NOVA}/converse", json={"messages": []})
    assert (r.status_code, r.headers["x-amzn-errortype"]) == (
        403,
        "MissingAuthenticationTokenException",
    )


def test_faults_are_bedrocks_errors(server: Server) -> None:
    with pytest.raises(ClientError) as err:
        runtime(server).converse(modelId=NOVA + "@rate_limit", messages=_user({"text": "x"}))
    assert err.value.response["Error"]["Code"] == "ThrottlingException"
    with pytest.raises(ClientError) as err:
        runtime(server).converse(
            modelId=NOVA, messages=[{"role": "assistant", "content": [{"text": "x"}]}]
        )
    assert err.value.response["Error"]["Code"] == "ValidationException"


def test_invoke_claude_with_an_arn_signed_by_botocore(server: Server) -> None:
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/" + CLAUDE
    body = (
        b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":50,'
        b'"messages":[{"role":"user","content":"hi claude"}]}'
    )
    out = runtime(server).invoke_model(modelId=arn, body=body, contentType="application/json")

    message = json.loads(out["body"].read())
    assert message["content"] == [{"type": "text", "text": "hi claude"}]
    assert message["model"] == arn
    refused = httpx.post(
        f"{server.url}/model/{CLAUDE}/invoke",
        content=body.replace(b'"max_tokens"', b'"model":"x","max_tokens"'),
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert refused.status_code == 400
    assert "extraneous key [model]" in refused.json()["message"]


def test_invoke_with_response_stream_parsed_by_botocore(server: Server) -> None:
    body = (
        b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":50,'
        b'"messages":[{"role":"user","content":"streamed words here"}]}'
    )
    out = runtime(server).invoke_model_with_response_stream(modelId=CLAUDE, body=body)

    events = [json.loads(e["chunk"]["bytes"]) for e in out["body"]]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "ping" not in kinds
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert text == "streamed words here"
    assert events[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] == 3


def test_titan_and_cohere_embeddings(server: Server) -> None:

    client = runtime(server)
    titan = json.loads(
        client.invoke_model(
            modelId="amazon.titan-embed-text-v2:0",
            body=json.dumps({"inputText": "hello world", "dimensions": 256}),
        )["body"].read()
    )
    assert len(titan["embedding"]) == 256 and titan["inputTextTokenCount"] == 2
    cohere = json.loads(
        client.invoke_model(
            modelId="cohere.embed-english-v3",
            body=json.dumps({"texts": ["a", "b c"], "input_type": "search_document"}),
        )["body"].read()
    )
    assert cohere["response_type"] == "embeddings_floats" and len(cohere["embeddings"]) == 2
    # The same text, the same vector, whichever family.
    again = json.loads(
        client.invoke_model(
            modelId="amazon.titan-embed-text-v2:0",
            body=json.dumps({"inputText": "a", "dimensions": 1024}),
        )["body"].read()
    )
    assert again["embedding"] == cohere["embeddings"][0]
    with pytest.raises(ClientError, match="extraneous key"):
        client.invoke_model(
            modelId="amazon.titan-embed-text-v2:0", body=json.dumps({"inputText": "a", "bogus": 1})
        )


def _anthropic_bedrock(server: Server) -> anthropic.AnthropicBedrock:
    return anthropic.AnthropicBedrock(
        api_key=KEY, aws_region="us-east-1", base_url=server.url, max_retries=0
    )


def test_anthropic_bedrock_sdk_whole_and_streamed(server: Server) -> None:
    with _anthropic_bedrock(server) as client:
        msg = client.messages.create(
            model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "hello sdk"}]
        )
        assert msg.content[0].type == "text" and msg.content[0].text == "hello sdk"
        assert msg.stop_reason == "end_turn"
        with client.messages.stream(
            model=CLAUDE,
            max_tokens=64,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": base64.b64encode(PNG).decode(),
                            },
                        },
                        {"type": "text", "text": "what is this"},
                    ],
                }
            ],
            thinking={"type": "enabled", "budget_tokens": 1024},
            extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
        ) as stream:
            final = stream.get_final_message()
        assert [b.type for b in final.content] == ["thinking", "text"]
        assert final.content[1].type == "text"
        assert final.content[1].text.startswith("[image image/png")
