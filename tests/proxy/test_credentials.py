"""``transport.credentials.Refreshing``: a credential fetched off the request's
path, read without I/O, fetched again before it expires, retried on failure."""

from __future__ import annotations

import asyncio
import threading

import pytest

from flatgate.proxy.errors import codes
from flatgate.proxy.transport.credentials import CredentialsUnavailable, Refreshing


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_read_before_the_first_fetch() -> None:
    creds: Refreshing[str] = Refreshing("backend b (test)", lambda: ("v", None))
    with pytest.raises(CredentialsUnavailable) as info:
        creds.current()
    assert info.value.code is codes.BACKEND_AUTH_FAILED
    assert "backend b (test): no credentials: not fetched yet" in str(info.value)


def test_a_value_is_current_until_it_expires_and_due_margin_seconds_before() -> None:
    clock = Clock()
    values = iter([("first", clock.now + 3600), ("second", clock.now + 7200)])
    creds = Refreshing("b", lambda: next(values), margin=300, clock=clock)
    assert creds.refresh() == 3300
    assert creds.current() == "first"
    clock.now += 3599
    assert creds.current() == "first"
    clock.now += 1  # expired, and not fetched again
    with pytest.raises(CredentialsUnavailable):
        creds.current()
    creds.refresh()
    assert creds.current() == "second"


def test_a_static_value_is_never_due_again() -> None:
    creds = Refreshing("b", lambda: ("key", None))
    assert creds.refresh() is None
    assert creds.current() == "key"


def test_a_value_almost_expired_is_due_in_a_second_not_at_once() -> None:
    clock = Clock()
    creds = Refreshing("b", lambda: ("v", clock.now + 10), margin=300, clock=clock)
    assert creds.refresh() == 1.0


def test_the_refresher_fetches_in_a_thread_and_retries_a_failure() -> None:
    fetched_on: list[int] = []
    outcomes: list[Exception | tuple[str, float | None]] = [
        RuntimeError("metadata service unreachable"),
        ("token", None),
    ]

    def fetch() -> tuple[str, float | None]:
        fetched_on.append(threading.get_ident())
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    creds = Refreshing("b", fetch)

    async def run() -> None:
        creds.start(asyncio.get_running_loop())
        creds.start(asyncio.get_running_loop())  # once: the running one is kept
        for _ in range(100):
            await asyncio.sleep(0.05)
            if outcomes == []:
                break
        task = creds._task
        assert task is not None
        await asyncio.wait_for(task, 5)  # a static value: the refresher ends

    with pytest.raises(CredentialsUnavailable, match="metadata service unreachable"):
        asyncio.run(asyncio.wait_for(_first_failure(creds), 5))
    asyncio.run(run())
    assert creds.current() == "token"
    assert len(fetched_on) == 2 and threading.get_ident() not in fetched_on


async def _first_failure(creds: Refreshing[str]) -> None:
    """Starts the refresher and reads once its first fetch has failed."""
    creds.start(asyncio.get_running_loop())
    while creds._error == "not fetched yet":
        await asyncio.sleep(0.01)
    creds.stop()
    creds.current()
