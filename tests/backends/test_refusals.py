"""Answers other than 200: the status classes every protocol shares
(``backends.base.classify``), ``Retry-After`` (``transport.base.retry_after``),
and the message each adapter's ``refusal`` takes from the error body, over the
providers' documented and captured error bodies.
"""

from __future__ import annotations

import calendar
import dataclasses
import email.utils
import json
import time
from collections.abc import Iterator

import pytest

from flatgate.proxy.backends.anthropic.adapter import AnthropicAdapter
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.backends.base import Adapter, Refusal, RefusalKind, classify
from flatgate.proxy.backends.fbs.adapter import FbsAdapter
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.transport.base import MAX_RETRY_AFTER, retry_after
from tests.backends.helpers import fixture

OPENAI = OpenAIAdapter(OpenAIConfig(name="o", url="https://api.openai.com/v1", protocol="openai"))
ANTHROPIC = AnthropicAdapter(
    AnthropicConfig(name="a", url="https://api.anthropic.com/v1", protocol="anthropic")
)
FBS = FbsAdapter(BackendConfig(name="f", url="http://127.0.0.1:8082"))
ADAPTERS: list[Adapter] = [OPENAI, ANTHROPIC, FBS]

# 1994-11-06 08:49:00 UTC, the RFC's example date less 37 seconds.
NOW = float(calendar.timegm((1994, 11, 6, 8, 49, 0)))


def at_now() -> float:
    return NOW


def parse_http(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """A captured response: status, lower-cased headers, body."""
    head, _, body = raw.partition(b"\n\n")
    status_line, *lines = head.decode().split("\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body.strip()


# -- status classes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, RefusalKind.REJECTED),
        (404, RefusalKind.REJECTED),
        (409, RefusalKind.REJECTED),
        (413, RefusalKind.REJECTED),
        (422, RefusalKind.REJECTED),
        (401, RefusalKind.AUTH),
        (403, RefusalKind.AUTH),
        (429, RefusalKind.RATE_LIMITED),
        (408, RefusalKind.UNAVAILABLE),
        (500, RefusalKind.UNAVAILABLE),
        (502, RefusalKind.UNAVAILABLE),
        (503, RefusalKind.UNAVAILABLE),
        (504, RefusalKind.UNAVAILABLE),
        (529, RefusalKind.UNAVAILABLE),
        (599, RefusalKind.UNAVAILABLE),
    ],
)
def test_status_classes(status: int, kind: RefusalKind) -> None:
    assert classify(status) is kind


def test_every_documented_anthropic_error_status_has_its_class() -> None:
    table = json.loads(fixture("anthropic_error_types.json"))["errors"]
    want = {
        "invalid_request_error": RefusalKind.REJECTED,
        "authentication_error": RefusalKind.AUTH,
        # the gateway's own account: never the caller's to fix
        "billing_error": RefusalKind.AUTH,
        "permission_error": RefusalKind.AUTH,
        "not_found_error": RefusalKind.REJECTED,
        "conflict_error": RefusalKind.REJECTED,
        "request_too_large": RefusalKind.REJECTED,
        "rate_limit_error": RefusalKind.RATE_LIMITED,
        "api_error": RefusalKind.UNAVAILABLE,
        "timeout_error": RefusalKind.UNAVAILABLE,
        "overloaded_error": RefusalKind.UNAVAILABLE,
    }
    assert {e["type"]: classify(e["status"]) for e in table} == want


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.protocol)
@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 429, 500, 503, 529])
def test_every_adapter_classifies_the_same_way(adapter: Adapter, status: int) -> None:
    refusal = adapter.refusal(status, {}, b"{}")
    assert refusal.kind is classify(status)
    assert refusal.status == status


def test_a_refusal_is_immutable() -> None:
    refusal = OPENAI.refusal(500, {}, b"")
    with pytest.raises(dataclasses.FrozenInstanceError):
        refusal.status = 200  # type: ignore[misc]


# -- Retry-After -----------------------------------------------------------------


def test_no_retry_after_headers_is_none() -> None:
    assert retry_after({}) is None
    assert retry_after({"content-type": "application/json"}) is None


@pytest.mark.parametrize(("value", "want"), [("17", 17.0), ("0", 0.0), ("1.5", 1.5), (" 7 ", 7.0)])
def test_retry_after_seconds(value: str, want: float) -> None:
    assert retry_after({"retry-after": value}) == want


@pytest.mark.parametrize(
    ("value", "want"), [("250", 0.25), ("1500", 1.5), ("0", 0.0), ("12.5", 0.0125)]
)
def test_retry_after_ms(value: str, want: float) -> None:
    assert retry_after({"retry-after-ms": value}) == want


def test_retry_after_ms_wins_over_retry_after() -> None:
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25


@pytest.mark.parametrize("garbage", ["soon", "", "nan", "0x10", "1,5"])
def test_garbage_retry_after_ms_falls_back_to_retry_after(garbage: str) -> None:
    assert retry_after({"retry-after-ms": garbage, "retry-after": "9"}) == 9.0


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT",  # obsolete RFC 850
        "Sun Nov  6 08:49:37 1994",  # obsolete asctime (no zone: GMT by definition)
    ],
    ids=["imf-fixdate", "rfc850", "asctime"],
)
def test_retry_after_http_date_in_every_http_format(value: str) -> None:
    assert retry_after({"retry-after": value}, now=at_now) == pytest.approx(37.0)


@pytest.fixture
def east_of_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone five hours east of UTC."""
    monkeypatch.setenv("TZ", "FGT-5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("east_of_utc")
@pytest.mark.parametrize(
    "value",
    ["Sun, 06 Nov 1994 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"],
    ids=["imf-fixdate", "asctime"],
)
def test_retry_after_http_date_is_gmt_whatever_the_local_zone(value: str) -> None:
    # RFC 9110 5.6.7: HTTP-date is always GMT, asctime's zone-less form too.
    assert retry_after({"retry-after": value}, now=at_now) == pytest.approx(37.0)


def test_an_http_date_in_the_past_is_zero() -> None:
    assert retry_after({"retry-after": "Sat, 05 Nov 1994 08:49:37 GMT"}, now=at_now) == 0.0


def test_an_http_date_far_ahead_is_clamped() -> None:
    assert retry_after({"retry-after": "Sun, 06 Nov 1995 08:49:37 GMT"}, now=at_now) == (
        MAX_RETRY_AFTER
    )


@pytest.mark.parametrize(
    "garbage",
    ["soon", "", "nan", "NaN", "Sun, 99 Nov 1994 08:49:37 GMT", "tomorrow at noon", "0x10", "1,5"],
)
def test_garbage_retry_after_is_none(garbage: str) -> None:
    assert retry_after({"retry-after": garbage}, now=at_now) is None


@pytest.mark.parametrize(
    ("headers", "want"),
    [
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "-inf"}, 0.0),
        ({"retry-after": "86400"}, MAX_RETRY_AFTER),
        ({"retry-after": "inf"}, MAX_RETRY_AFTER),
        ({"retry-after": "1e400"}, MAX_RETRY_AFTER),
        ({"retry-after-ms": "-5"}, 0.0),
        ({"retry-after-ms": "999999999"}, MAX_RETRY_AFTER),
        ({"retry-after-ms": "inf"}, MAX_RETRY_AFTER),
    ],
)
def test_retry_after_is_clamped(headers: dict[str, str], want: float) -> None:
    assert retry_after(headers) == want


def test_the_default_clock_is_the_wall_clock() -> None:
    soon = email.utils.formatdate(time.time() + 120, usegmt=True)
    got = retry_after({"retry-after": soon})
    assert got is not None
    assert 100 < got <= 120


# -- messages from error bodies ------------------------------------------------


OPENAI_SHAPED = [
    (
        "openai_error_context_length_400.json",
        400,
        RefusalKind.REJECTED,
        "This model's maximum context length is 4097 tokens. However, your messages resulted "
        "in 4294 tokens. Please reduce the length of the messages.",
    ),
    (
        "openai_error_invalid_api_key_401.json",
        401,
        RefusalKind.AUTH,
        "Incorrect API key provided: sk-VKMIs***************************************wjh3. "
        "You can find your API key at https://platform.openai.com/account/api-keys.",
    ),
    (
        "openai_error_unsupported_max_tokens_400.json",
        400,
        RefusalKind.REJECTED,
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
    ),
    (
        "deepseek_error_context_length_400.json",
        400,
        RefusalKind.REJECTED,
        "This model's maximum context length is 131072 tokens. However, you requested 131134 "
        "tokens (122942 in the messages, 8192 in the completion). Please reduce the length of "
        "the messages or completion.",
    ),
    (
        "vllm_error_400.json",
        400,
        RefusalKind.REJECTED,
        "This model's maximum context length is 4096 tokens. However, you requested 5000 "
        "tokens in the messages. Please reduce the length of the messages.",
    ),
    (
        "ollama_error_404.json",
        404,
        RefusalKind.REJECTED,
        'model "llama9" not found, try pulling it first',
    ),
    ("openrouter_error_shape.json", 429, RefusalKind.RATE_LIMITED, "Rate limit exceeded"),
]

ANTHROPIC_SHAPED = [
    ("anthropic_error_not_found.json", 404, RefusalKind.REJECTED,
     "The requested resource could not be found."),
    ("anthropic_error_prefill_400.json", 400, RefusalKind.REJECTED,
     "This model does not support assistant message prefill. The conversation must end with "
     "a user message."),
    ("anthropic_error_prompt_too_long_400.json", 400, RefusalKind.REJECTED,
     "prompt is too long: 219898 tokens > 200000 maximum"),
    ("anthropic_error_context_limit_400.json", 400, RefusalKind.REJECTED,
     "input length and `max_tokens` exceed context limit: 143653 + 64000 > 200000, decrease "
     "input length or `max_tokens` and try again"),
    ("anthropic_error_authentication_401.json", 401, RefusalKind.AUTH, "invalid x-api-key"),
    ("anthropic_error_overloaded_529.json", 529, RefusalKind.UNAVAILABLE, "Overloaded"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "status", "kind", "message"), OPENAI_SHAPED)
def test_openai_adapter_takes_the_message_of_openai_shaped_errors(
    name: str, status: int, kind: RefusalKind, message: str
) -> None:
    assert OPENAI.refusal(status, {}, fixture(name)) == Refusal(kind, status, message)


@pytest.mark.parametrize(("name", "status", "kind", "message"), ANTHROPIC_SHAPED)
def test_anthropic_adapter_takes_the_message_of_anthropic_errors(
    name: str, status: int, kind: RefusalKind, message: str
) -> None:
    assert ANTHROPIC.refusal(status, {}, fixture(name)) == Refusal(kind, status, message)


@pytest.mark.parametrize(("name", "status", "kind", "message"), ANTHROPIC_SHAPED[:2])
def test_openai_adapter_reads_anthropic_shaped_errors_too(
    name: str, status: int, kind: RefusalKind, message: str
) -> None:
    assert OPENAI.refusal(status, {}, fixture(name)).message == message


def test_anthropic_429_with_its_rate_limit_headers() -> None:
    status, headers, body = parse_http(fixture("anthropic_ratelimit_headers_429.txt"))
    assert ANTHROPIC.refusal(status, headers, body) == Refusal(
        RefusalKind.RATE_LIMITED,
        429,
        "Number of request tokens has exceeded your per-minute rate limit",
        17.0,
    )


def test_openai_rate_limit_headers_without_retry_after_give_no_wait() -> None:
    # x-ratelimit-reset-* say when a budget refills, not how long to wait.
    _, headers, _ = parse_http(fixture("openai_ratelimit_headers.txt") + b"\n\n")
    assert "x-ratelimit-reset-requests" in headers
    assert OPENAI.refusal(429, headers, b"{}").retry_after is None


def test_retry_after_reaches_the_refusal() -> None:
    for adapter in ADAPTERS:
        assert adapter.refusal(503, {"retry-after": "4"}, b"").retry_after == 4.0
        assert adapter.refusal(429, {"retry-after-ms": "40"}, b"").retry_after == 0.04


def test_a_string_error_is_the_message() -> None:
    # text-generation-inference's shape
    body = (
        b'{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096",'
        b'"error_type":"validation"}'
    )
    assert OPENAI.refusal(422, {}, body).message.startswith("Input validation error")


@pytest.mark.parametrize("adapter", [OPENAI, ANTHROPIC], ids=lambda a: a.protocol)
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b"<html><body><h1>502 Bad Gateway</h1></body></html>\n",
            "<html><body><h1>502 Bad Gateway</h1></body></html>",
        ),
        (b'{"detail": "Not Found"}', '{"detail": "Not Found"}'),
        (b'{"error": {"message": ""}}', '{"error": {"message": ""}}'),
        (b'["a list"]', '["a list"]'),
        (b"upstream connect error", "upstream connect error"),
        (b"", "no message"),
        (b"   \n", "no message"),
    ],
    ids=["html", "fastapi-detail", "empty-message", "list", "text", "empty", "blank"],
)
def test_a_body_without_an_error_message_is_its_text(
    adapter: Adapter, body: bytes, message: str
) -> None:
    assert adapter.refusal(502, {}, body).message == message


def test_a_long_text_body_is_cut_to_512_bytes() -> None:
    message = OPENAI.refusal(500, {}, b"x" * 5000).message
    assert message == "x" * 512


def test_a_body_that_is_not_utf8_is_replaced_not_raised() -> None:
    message = OPENAI.refusal(500, {}, b"bad \xff\xfe bytes").message
    assert message == "bad \ufffd\ufffd bytes"


def test_fbs_refusal_takes_flatgates_own_error_message() -> None:
    body = codes.error_body(codes.BACKENDS_BUSY, "all 3 at max_outstanding")
    assert FBS.refusal(503, {"retry-after": "2"}, body) == Refusal(
        RefusalKind.UNAVAILABLE, 503, "all 3 at max_outstanding", 2.0
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"plain failure", "plain failure"),
        (b'{"error": "flat"}', '{"error": "flat"}'),
        (b'{"other": 1}', '{"other": 1}'),
    ],
)
def test_fbs_refusal_of_a_foreign_body_is_its_text(body: bytes, message: str) -> None:
    assert FBS.refusal(500, {}, body).message == message
