"""The pure pieces: OpenAI's duration format, a rate's quota, the UTC day."""

from __future__ import annotations

import pytest

from flatgate.proxy.limits import Quota, go_duration
from flatgate.proxy.limits.algorithms import rate_quota, utc_day


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (-1.0, "0s"),
        (0.0001, "1ms"),
        (0.02, "20ms"),
        (0.6000000029802322, "600ms"),  # the doubles' noise adds no millisecond
        (0.999, "999ms"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (59.9999, "1m0s"),
        (60.0, "1m0s"),
        (360.0, "6m0s"),
        (61.25, "1m1.25s"),
        (3723.0, "1h2m3s"),
        (7200.5, "2h0m0.5s"),
    ],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_rate_quota() -> None:
    assert rate_quota(60, 0.0) == Quota(60, 60, 0.0)
    assert rate_quota(60, -3.0) == Quota(60, 60, 0.0)
    assert rate_quota(60, 1.0) == Quota(60, 59, 1.0)
    assert rate_quota(60, 59.5) == Quota(60, 0, 59.5)  # one more would pass 60 s
    assert rate_quota(60, 75.0) == Quota(60, 0, 75.0)  # in debt
    assert rate_quota(7, 60 / 7) == Quota(7, 6, 60 / 7)
    assert rate_quota(100, 0.6000000029802322).remaining == 99


def test_utc_day() -> None:
    assert utc_day(1_772_323_200.0) == ("20260301", 86_400.0)
    assert utc_day(1_772_323_200.0 + 86_399.5) == ("20260301", 0.5)
    assert utc_day(1_772_323_200.0 - 1.0) == ("20260228", 1.0)
