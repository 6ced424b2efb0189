"""AWS credentials through botocore's own chain (``transport.aws``), and
never a connection outside loopback while it looks: the instance metadata
service and the container credentials endpoint are fakes on 127.0.0.1, and
an audit hook fails the test on any ``socket.connect`` (or name lookup)
that would leave 127.0.0.0/8."""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from flatgate.proxy.transport.aws import NoCredentials, aws_credentials
from flatgate.proxy.transport.credentials import Refreshing
from tests import loopback
from tests.loopback import SEEN as _SEEN
from tests.loopback import WATCHING as _WATCHING
from tests.loopback import LeftLoopback

# The guard against connections outside loopback (shared: ``tests.loopback``).
loopback_only = loopback.loopback_only


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment where botocore's chain finds nothing of the host's:
    no AWS variables, an empty home and config files that do not exist."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    return tmp_path


def _expiry(minutes: int) -> str:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=minutes)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


class _Fake(BaseHTTPRequestHandler):
    """A credentials endpoint: IMDSv2's token and role paths, and the
    container endpoint's one path."""

    seen: ClassVar[list[str]] = []
    token = "imds-token"

    def _send(self, status: int, body: str, kind: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        self.seen.append(f"PUT {self.path}")
        if self.path == "/latest/api/token":
            self._send(200, self.token)
        else:
            self._send(404, "")

    def do_POST(self) -> None:
        """STS's AssumeRoleWithWebIdentity (the query protocol's form body)."""
        form = self.rfile.read(int(self.headers["content-length"])).decode()
        self.seen.append(f"POST {self.path} {form}")
        if (
            "Action=AssumeRoleWithWebIdentity" not in form
            or "WebIdentityToken=irsa-jwt" not in form
        ):
            self._send(400, "")
            return
        self._send(200, _STS_ANSWER.format(expires=_expiry(60)), "text/xml")

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        creds = {
            "Code": "Success",
            "Type": "AWS-HMAC",
            "AccessKeyId": "ASIAFAKE",
            "SecretAccessKey": "fake-secret",
            "Token": "fake-session",
            "Expiration": _expiry(60),
        }
        if self.path == "/latest/meta-data/iam/security-credentials/":
            if self.headers.get("x-aws-ec2-metadata-token") == self.token:
                self._send(200, "flatgate-role")
            else:
                self._send(401, "")
        elif self.path == "/latest/meta-data/iam/security-credentials/flatgate-role":
            self._send(200, json.dumps(creds), "application/json")
        elif self.path == "/container/creds":
            if self.headers.get("authorization") == "container-token":
                self._send(200, json.dumps(creds), "application/json")
            else:
                self._send(403, "")
        else:
            self._send(404, "")

    def log_message(self, format: str, *args: Any) -> None:
        pass


_STS_ANSWER = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>ASIAIRSA</AccessKeyId>
      <SecretAccessKey>irsa-secret</SecretAccessKey>
      <SessionToken>irsa-session</SessionToken>
      <Expiration>{expires}</Expiration>
    </Credentials>
    <SubjectFromWebIdentityToken>system:serviceaccount:ns:flatgate</SubjectFromWebIdentityToken>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/flatgate/s</Arn>
      <AssumedRoleId>AROAEXAMPLE:s</AssumedRoleId>
    </AssumedRoleUser>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"""


@pytest.fixture
def fake() -> Iterator[int]:
    _Fake.seen = []
    server, port = _serve(_Fake)
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()


def test_nothing_configured_and_metadata_disabled_is_no_credentials(
    no_aws: Path, monkeypatch: pytest.MonkeyPatch, loopback_only: list[str]
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(NoCredentials):
        aws_credentials()()
    assert loopback_only == []  # not even a loopback connection was tried


def test_static_keys_from_the_environment_never_expire(
    no_aws: Path, monkeypatch: pytest.MonkeyPatch, loopback_only: list[str]
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    creds, expires = aws_credentials()()
    assert (creds.access_key, creds.secret_key, creds.token, expires) == (
        "AKIDENV", "env-secret", None, None,
    )  # fmt: skip


def test_a_profile_of_the_shared_files(
    no_aws: Path, monkeypatch: pytest.MonkeyPatch, loopback_only: list[str]
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (no_aws / "no-credentials").write_text(
        "[team]\naws_access_key_id = AKIDTEAM\naws_secret_access_key = team-secret\n"
    )
    creds, _ = aws_credentials("team")()
    assert creds.access_key == "AKIDTEAM"
    with pytest.raises(Exception, match="missing"):
        aws_credentials("missing")()


def test_instance_credentials_from_a_loopback_metadata_service(
    no_aws: Path, monkeypatch: pytest.MonkeyPatch, fake: int, loopback_only: list[str]
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{fake}/")
    refreshing = Refreshing("backend b (AWS credentials)", aws_credentials())
    wait = refreshing.refresh()
    creds = refreshing.current()
    assert (creds.access_key, creds.token) == ("ASIAFAKE", "fake-session")
    assert wait is not None and 3000 < wait < 3600  # again 5 minutes before the hour is up
    assert "PUT /latest/api/token" in _Fake.seen
    assert loopback_only and set(loopback_only) == {"127.0.0.1"}


def test_container_credentials_from_a_loopback_endpoint(
    no_aws: Path, monkeypatch: pytest.MonkeyPatch, fake: int, loopback_only: list[str]
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI", f"http://127.0.0.1:{fake}/container/creds"
    )
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-token")
    creds, expires = aws_credentials()()
    assert creds.secret_key == "fake-secret"
    assert expires is not None
    assert _Fake.seen == ["GET /container/creds"]


def test_the_guard_sees_a_connection_outside_loopback() -> None:
    """The audit hook itself: a connect to the metadata address is stopped
    before the socket sends anything, one to loopback is let through."""
    import socket

    _SEEN.clear()
    _WATCHING.set()
    try:
        with socket.socket() as s, pytest.raises(LeftLoopback):
            s.connect(("169.254.169.254", 80))
        with pytest.raises(LeftLoopback):
            socket.getaddrinfo("sts.amazonaws.com", 443)
        sys.audit("socket.connect", None, ("127.0.0.1", 80))
    finally:
        _WATCHING.clear()
    assert _SEEN == ["169.254.169.254", "sts.amazonaws.com", "127.0.0.1"]


def test_web_identity_as_on_eks_from_a_loopback_sts(
    no_aws: Path, monkeypatch: pytest.MonkeyPatch, fake: int, loopback_only: list[str]
) -> None:
    """IRSA: a service account's token file and a role, exchanged at STS
    (AWS_ENDPOINT_URL_STS: the fake on loopback) for credentials that expire."""
    (no_aws / "token").write_text("irsa-jwt")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(no_aws / "token"))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/flatgate")
    monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "flatgate-test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{fake}")
    creds, expires = aws_credentials()()
    assert (creds.access_key, creds.secret_key, creds.token) == (
        "ASIAIRSA", "irsa-secret", "irsa-session",
    )  # fmt: skip
    assert expires is not None
    [call] = _Fake.seen
    assert call.startswith("POST / ") and "RoleArn=arn%3Aaws%3Aiam" in call
