"""SigV4 as botocore signs it: the adapter's headers (signed by awscrt) are
the ones boto3's own client sends for the same request, and the stub's
check (botocore's signer) accepts them and nothing else."""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

import botocore.auth
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse

from flatgate.proxy.backends.bedrock.auth import bearer, sign, verify
from flatgate.proxy.transport.aws import AwsCredentials

AT = datetime.datetime(2026, 12, 2, 11, 0, 0, tzinfo=datetime.UTC)
CREDS = AwsCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)
MODEL = (
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-v1:0"
)
URL = (
    "https://bedrock-runtime.us-east-1.amazonaws.com/model/"
    "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
    "us.anthropic.claude-sonnet-4-5-v1%3A0/invoke"
)
BODY = b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"messages":[]}'


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: AT.replace(tzinfo=None))
    # With awscrt installed botocore's client signs with awscrt too: make it
    # sign with its own Python signer, so that the adapter's signature (awscrt's)
    # is held to another implementation.
    monkeypatch.setitem(botocore.auth.AUTH_TYPE_MAPS, "v4", botocore.auth.SigV4Auth)


def _boto3_request(token: str | None = None) -> dict[str, Any]:
    """What botocore's own bedrock-runtime client sends for InvokeModel."""
    session = botocore.session.Session()
    client = session.create_client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id=CREDS.access_key,
        aws_secret_access_key=CREDS.secret_key,
        aws_session_token=token,
    )
    seen: dict[str, Any] = {}

    def send(request: Any, **_: Any) -> AWSResponse:
        seen.update(url=request.url, headers=dict(request.headers), body=request.body)
        return AWSResponse(request.url, 200, {}, None)

    client.meta.events.register("before-send", send)
    # Only the headers the adapter sends go in: botocore's user agent and
    # invocation ids are its own.
    client.meta.events.register(
        "before-sign.bedrock-runtime.InvokeModel",
        lambda request, **_: [
            request.headers.__delitem__(h)
            for h in ("User-Agent", "amz-sdk-invocation-id", "amz-sdk-request")
            if h in request.headers
        ],
    )
    # The empty answer does not parse; the request is what is looked at.
    with contextlib.suppress(Exception):
        client.invoke_model(
            modelId=MODEL, body=BODY, contentType="application/json", accept="application/json"
        )
    return seen


def test_the_url_and_signature_are_botocores() -> None:
    seen = _boto3_request()
    assert seen["url"] == URL
    ours = dict(
        sign(
            "POST",
            URL,
            [("Content-Type", "application/json"), ("Accept", "application/json")],
            BODY,
            creds=CREDS,
            region="us-east-1",
            now=lambda: AT,
        )
    )
    theirs = {k: v.decode() if isinstance(v, bytes) else v for k, v in seen["headers"].items()}
    assert ours["authorization"] == theirs["Authorization"]
    assert ours["x-amz-date"] == theirs["X-Amz-Date"] == "20261202T110000Z"
    assert "x-amz-security-token" not in ours


def test_temporary_credentials_sign_their_token() -> None:
    temp = AwsCredentials(CREDS.access_key, CREDS.secret_key, "session-token")
    seen = _boto3_request(token="session-token")
    ours = dict(
        sign(
            "POST",
            URL,
            [("Content-Type", "application/json"), ("Accept", "application/json")],
            BODY,
            creds=temp,
            region="us-east-1",
            now=lambda: AT,
        )
    )
    assert ours["x-amz-security-token"] == "session-token"
    assert ours["authorization"] == seen["headers"]["Authorization"].decode()


def _header(headers: list[tuple[str, str]]) -> Any:
    table = {k.lower(): v for k, v in headers}
    table["host"] = "bedrock-runtime.us-east-1.amazonaws.com"
    return table.get


def test_verify_accepts_the_signature_and_refuses_any_change() -> None:
    headers = sign(
        "POST",
        URL,
        [("content-type", "application/json"), ("x-request-id", "r1")],
        BODY,
        creds=CREDS,
        region="us-east-1",
        now=lambda: AT,
    )
    check = {"now": lambda: AT}
    assert verify("POST", URL, _header(headers), BODY, CREDS.secret_key, **check) == ""
    assert "does not match" in verify(
        "POST", URL, _header(headers), BODY + b" ", CREDS.secret_key, **check
    )
    assert "does not match" in verify("POST", URL, _header(headers), BODY, "other-secret", **check)
    assert "does not match" in verify(
        "POST", URL.replace("invoke", "converse"), _header(headers), BODY, CREDS.secret_key, **check
    )
    changed = [(k, "r2" if k == "x-request-id" else v) for k, v in headers]
    assert "does not match" in verify(
        "POST", URL, _header(changed), BODY, CREDS.secret_key, **check
    )
    later = {"now": lambda: AT + datetime.timedelta(minutes=16)}
    assert "expired" in verify("POST", URL, _header(headers), BODY, CREDS.secret_key, **later)
    assert "Credential" in verify("POST", URL, _header(bearer("k")), BODY, "k", **check)
