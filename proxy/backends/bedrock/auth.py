"""How a ``bedrock`` request is authorized: AWS Signature Version 4, or a
Bedrock API key; and the stub's check of either.

- ``sign``: the headers of a request signed with SigV4 for the ``bedrock``
  service (Bedrock Runtime's signing name) in a region, by the AWS Common
  Runtime's signer (``awscrt``, AWS's own C library, which the AWS CLI v2
  and boto3's CRT option sign with): ``x-amz-date``, ``x-amz-security-token``
  for temporary credentials, and ``authorization``, over the method, the
  path as sent (escaped again, as SigV4 wants for every service but S3), the
  query, every header given, ``host`` (read from the url, which is what the
  transport sends) and the body's SHA-256. A header added after signing (the
  transport's own ``content-length``, ``user-agent``) is not signed.
- ``bearer``: a Bedrock API key's header (``Authorization: Bearer``).
- ``verify``: whether a received request carries a valid signature made
  with ``secret`` (the stub's configured credential): the signature is
  computed again by **botocore's** signer (``SigV4Auth``, the one boto3
  signs with) over the headers the request says it signed, at the time it
  says it was signed (at most ``MAX_SKEW`` seconds from now, as AWS allows),
  and compared in constant time. So every signature the adapter makes in a
  test is checked by a second implementation, not its own.

Why two libraries: botocore's signer costs 59.8 us a 2 KB request here (its
``AWSRequest`` and ``HTTPHeaders``, an ``email.message``, are most of it);
awscrt's 15.6 us (``make bench``'s cost checks, the ``sigv4`` rows). The
credentials still come from botocore's chain (``transport.aws``): awscrt is
handed them frozen, one static provider per set (a refresh makes a new one).
Both libraries are imported at their first use (a signed request, a
checked one), not when flatgate starts: each costs 50 to 150 ms to import.

Pure: the credentials are given (``transport.aws`` fetches them), the clock
is read.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from flatgate.proxy.transport.aws import AwsCredentials

__all__ = ["MAX_SKEW", "SERVICE", "bearer", "sign", "verify"]

# Bedrock Runtime's signing name (the service model's ``signingName``).
SERVICE = "bedrock"
# How far a signature's time may be from the server's (AWS: 15 minutes).
MAX_SKEW = 15 * 60

Header = tuple[str, str]
# SigV4's x-amz-date format.
_TIMESTAMP = "%Y%m%dT%H%M%SZ"
# The headers the signer adds.
_ADDED = frozenset(("x-amz-date", "x-amz-security-token", "authorization"))
_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request,"
    r"\s*SignedHeaders=([a-z0-9;._-]+),\s*Signature=([0-9a-f]{64})"
)


class _Headers(dict[str, str]):
    """Header names in lower case, looked up in any case (as botocore does)."""

    def __setitem__(self, name: str, value: str) -> None:
        super().__setitem__(name.lower(), value)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name.lower())

    def get_all(self, name: str) -> list[str]:
        value = self.get(name.lower())
        return [] if value is None else [value]


class _Request:
    """What botocore's ``SigV4Auth`` reads of a request (the check's)."""

    __slots__ = ("body", "context", "headers", "method", "params", "url")

    def __init__(self, method: str, url: str, headers: Iterable[Header], body: bytes) -> None:
        self.method = method
        self.url = url
        self.body = body
        self.context: dict[str, object] = {}
        self.params: dict[str, str] = {}
        self.headers = _Headers()
        for name, value in headers:
            self.headers[name] = value


@functools.cache
def _checker() -> Any:
    """botocore's signer, taking exactly the headers the request says it
    signed (botocore's own leaves some out: a signer's choice, not a check's)."""
    from botocore.auth import SigV4Auth

    class Checker(SigV4Auth):  # type: ignore[misc]
        def headers_to_sign(self, request: _Request) -> _Headers:
            return request.headers

    return Checker


@functools.cache
def _crt() -> Any:
    import awscrt.auth
    import awscrt.http

    return awscrt


@functools.lru_cache(maxsize=16)
def _provider(creds: AwsCredentials) -> Any:
    """awscrt's static provider of one frozen set (a refresh makes a new set)."""
    return _crt().auth.AwsCredentialsProvider.new_static(
        creds.access_key, creds.secret_key, creds.token
    )


def bearer(key: str) -> list[Header]:
    """A Bedrock API key's header."""
    return [("authorization", f"Bearer {key}")]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def sign(
    method: str,
    url: str,
    headers: Sequence[Header],
    body: bytes,
    *,
    creds: AwsCredentials,
    region: str,
    now: Callable[[], datetime.datetime] = _now,
) -> list[Header]:
    """``headers`` and the SigV4 headers that sign the request (see the
    module docstring)."""
    crt = _crt()
    parts = urlsplit(url)
    target = f"{parts.path}?{parts.query}" if parts.query else parts.path
    request = crt.http.HttpRequest(
        method, target, crt.http.HttpHeaders([("host", parts.netloc), *headers])
    )
    config = crt.auth.AwsSigningConfig(
        credentials_provider=_provider(creds),
        region=region,
        service=SERVICE,
        date=now(),
        signed_body_value=hashlib.sha256(body).hexdigest(),
    )
    # A static provider's signing is done before the call returns (no I/O).
    signed = crt.auth.aws_sign_request(request, config).result()
    out = list(headers)
    for name, value in signed.headers:
        low = name.lower()
        if low in _ADDED:
            out.append((low, value))
    return out


def verify(
    method: str,
    url: str,
    header: Callable[[str], str | None],
    body: bytes,
    secret: str,
    *,
    now: Callable[[], datetime.datetime] = _now,
) -> str:
    """Why the request's SigV4 signature is not ``secret``'s (``""``: it is):
    the reason, in AWS's words where AWS has them."""
    m = _AUTH.fullmatch((header("authorization") or "").strip())
    if m is None:
        return "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature'"
    access_key, day, region, service, names, given = m.groups()
    stamp = header("x-amz-date") or ""
    try:
        when = datetime.datetime.strptime(stamp, _TIMESTAMP).replace(tzinfo=datetime.UTC)
    except ValueError:
        return "Authorization header requires existence of either a 'X-Amz-Date' header"
    if service != SERVICE:
        return f"Credential should be scoped to correct service: '{SERVICE}'."
    if day != stamp[:8]:
        return "Credential should be scoped to a valid date."
    if abs((now() - when).total_seconds()) > MAX_SKEW:
        return "Signature expired: the request's x-amz-date is more than 15 minutes away"
    signed = names.split(";")
    if "host" not in signed:
        return "'Host' must be a signed header"
    values: dict[str, str] = {}
    for name in signed:
        value = header(name)
        if value is None:
            return f"the signed header {name!r} is missing"
        values[name] = value
    token = values.get("x-amz-security-token")
    from botocore.credentials import Credentials

    request = _Request(method, url, values.items(), body)
    request.context["timestamp"] = stamp
    signer = _checker()(Credentials(access_key, secret, token), SERVICE, region)
    expected = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request
    )
    if not hmac.compare_digest(expected, given):
        return (
            "The request signature we calculated does not match the signature you "
            "provided. Check your AWS Secret Access Key and signing method."
        )
    return ""
