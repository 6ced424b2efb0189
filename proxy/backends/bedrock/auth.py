"""How a ``bedrock`` request is authorized: AWS Signature Version 4 by
botocore's signer, or a Bedrock API key; and the stub's check of either.

- ``sign``: the headers of a request signed with SigV4 for the ``bedrock``
  service (Bedrock Runtime's signing name) in a region, by botocore's
  ``SigV4Auth`` (the signer boto3 and the AWS CLI use): ``x-amz-date``,
  ``x-amz-security-token`` for temporary credentials, and ``authorization``,
  over the method, the path as sent (botocore escapes it again, as SigV4
  wants for every service but S3), the query, every header given and the
  body's SHA-256. A header added after signing (the transport's own
  ``host``, ``content-length``, ``user-agent``) is not signed; ``host`` is
  signed as botocore reads it from the url, which is what the transport sends.
- ``bearer``: a Bedrock API key's header (``Authorization: Bearer``).
- ``verify``: whether a received request carries a valid signature made
  with ``secret`` (the stub's configured credential): the signature is
  computed again by botocore's signer over the headers the request says it
  signed, at the time it says it was signed (at most ``MAX_SKEW`` seconds
  from now, as AWS allows), and compared in constant time.

The request botocore signs is a light one of ours (``_Request``: the
attributes ``SigV4Auth`` reads, its headers a dict whose names are lower
case) and ``_Signer`` lists the headers to sign from it without botocore's
``HTTPHeaders`` (an ``email.message`` underneath): every step of SigV4 is
still botocore's (the canonical request, the string to sign, the key and
the signature), and the tests hold the headers to those botocore's own
client writes. 48 us a 2 KB request here, against 71 through ``AWSRequest``.

Pure: the credentials are given (``transport.aws`` fetches them), the clock
is read.
"""

from __future__ import annotations

import datetime
import hmac
import re
from collections.abc import Callable, Iterable, Sequence

from botocore.auth import SIGNED_HEADERS_BLACKLIST, SIGV4_TIMESTAMP, SigV4Auth, _host_from_url
from botocore.credentials import Credentials

from flatgate.proxy.transport.aws import AwsCredentials

__all__ = ["MAX_SKEW", "SERVICE", "bearer", "sign", "verify"]

# Bedrock Runtime's signing name (the service model's ``signingName``).
SERVICE = "bedrock"
# How far a signature's time may be from the server's (AWS: 15 minutes).
MAX_SKEW = 15 * 60

Header = tuple[str, str]
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
    """What ``SigV4Auth`` reads of a request."""

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


class _Signer(SigV4Auth):  # type: ignore[misc]
    # Whether to leave out the headers botocore never signs (a signer's
    # choice: a check takes every header the request says it signed).
    skip = SIGNED_HEADERS_BLACKLIST

    def headers_to_sign(self, request: _Request) -> _Headers:
        out = _Headers()
        for name, value in request.headers.items():
            if name not in self.skip:
                dict.__setitem__(out, name, value)
        if "host" not in out:
            dict.__setitem__(out, "host", _host_from_url(request.url))
        return out


class _Checker(_Signer):
    skip: frozenset[str] = frozenset()


def bearer(key: str) -> list[Header]:
    """A Bedrock API key's header."""
    return [("authorization", f"Bearer {key}")]


def sign(
    method: str,
    url: str,
    headers: Sequence[Header],
    body: bytes,
    *,
    creds: AwsCredentials,
    region: str,
) -> list[Header]:
    """``headers`` and the SigV4 headers that sign the request (see the
    module docstring)."""
    request = _Request(method, url, headers, body)
    signer = _Signer(Credentials(creds.access_key, creds.secret_key, creds.token), SERVICE, region)
    signer.add_auth(request)
    out = list(headers)
    out.append(("x-amz-date", request.headers["x-amz-date"]))
    if creds.token:
        out.append(("x-amz-security-token", creds.token))
    out.append(("authorization", request.headers["authorization"]))
    return out


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


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
        when = datetime.datetime.strptime(stamp, SIGV4_TIMESTAMP).replace(tzinfo=datetime.UTC)
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
    request = _Request(method, url, values.items(), body)
    request.context["timestamp"] = stamp
    signer = _Checker(Credentials(access_key, secret, token), SERVICE, region)
    expected = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request
    )
    if not hmac.compare_digest(expected, given):
        return (
            "The request signature we calculated does not match the signature you "
            "provided. Check your AWS Secret Access Key and signing method."
        )
    return ""
