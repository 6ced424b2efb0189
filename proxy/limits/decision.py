"""What an acquire answers: a ``Decision`` (allowed or not, which limit
refused, when to retry, the rate headers) and, when something must be given
back later, a ``Lease``.

Knows nothing of HTTP beyond the names of OpenAI's ``x-ratelimit-*`` headers;
the apps turn a refusal into their 429 (or 503, ``STORE_UNAVAILABLE``). No I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from flatgate.proxy.limits.algorithms import (
    REQUESTS,
    TOKENS,
    Quota,
    go_duration,
    rate_remaining,
)
from flatgate.proxy.limits.rules import Plan
from flatgate.proxy.transport.base import retry_after_value

__all__ = ["Decision", "Lease", "Outcome"]


class Outcome(enum.Enum):
    ALLOWED = "allowed"
    # A limit refused: 429 with Retry-After.
    LIMITED = "limited"
    # The shared store did not answer: allowed ("open") or refused ("closed",
    # a 503) by [state] on_store_error; no rate headers either way.
    STORE_UNAVAILABLE = "store_unavailable"


@dataclass(slots=True, eq=False)  # one per request: compared by identity
class Lease:
    """What an allowed request holds until it is settled: its concurrency
    slots and its token reservation. Settle or release it once."""

    plan: Plan
    keys: Sequence[str]
    id: str
    estimate: int
    # The UTC date the day counters were charged on (they are settled there).
    day: str
    # Settled or released (a second time does nothing).
    done: bool = field(default=False, init=False)

    def __repr__(self) -> str:
        return f"Lease({self.id!r}, tenant={self.plan.tenant!r}, estimate={self.estimate})"


class Decision:
    """The answer to one acquire.

    ``allowed``; ``outcome``; for a refusal, ``limit`` (the kind, e.g.
    ``"requests_per_minute"``, or ``"store_unavailable"``), ``message`` (e.g.
    ``"requests_per_minute (60) for tenant acme"``) and ``retry_after``
    (seconds); ``lease`` when allowed with something to settle; ``requests``
    and ``tokens``, the ``Quota`` of the tightest per-minute rate of each
    kind (``None`` when none applies or the store did not answer)."""

    __slots__ = (
        "_levels",
        "_plan",
        "allowed",
        "lease",
        "limit",
        "message",
        "outcome",
        "retry_after",
    )

    def __init__(
        self,
        allowed: bool,
        outcome: Outcome,
        *,
        limit: str = "",
        message: str = "",
        retry_after: float = 0.0,
        lease: Lease | None = None,
        plan: Plan | None = None,
        levels: Sequence[float] = (),
    ) -> None:
        self.outcome = outcome
        self.allowed = allowed
        self.limit = limit
        self.message = message
        self.retry_after = retry_after
        self.lease = lease
        self._plan = plan
        self._levels = levels

    def quotas(self) -> tuple[Quota | None, Quota | None]:
        """``(requests, tokens)``: see the class docstring."""
        plan = self._plan
        if plan is None:
            return None, None
        # The tightest of each kind: (remaining, limit, level).
        req: tuple[int, int, float] | None = None
        tok: tuple[int, int, float] | None = None
        for (kind, limit, _), level in zip(plan.specs, self._levels, strict=True):
            if kind <= TOKENS:
                q = (rate_remaining(limit, level), limit, level)
                if kind == REQUESTS:
                    if req is None or q[0] < req[0]:
                        req = q
                elif tok is None or q[0] < tok[0]:
                    tok = q
        return (
            None if req is None else Quota(req[1], req[0], max(req[2], 0.0)),
            None if tok is None else Quota(tok[1], tok[0], max(tok[2], 0.0)),
        )

    @property
    def requests(self) -> Quota | None:
        return self.quotas()[0]

    @property
    def tokens(self) -> Quota | None:
        return self.quotas()[1]

    def headers(self) -> list[tuple[str, str]]:
        """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
        for the rates that apply, and ``retry-after`` (whole seconds, rounded
        up) on a refusal."""
        out: list[tuple[str, str]] = []
        req, tok = self.quotas()
        if req is not None:
            out += (
                ("x-ratelimit-limit-requests", str(req.limit)),
                ("x-ratelimit-remaining-requests", str(req.remaining)),
                ("x-ratelimit-reset-requests", go_duration(req.reset)),
            )
        if tok is not None:
            out += (
                ("x-ratelimit-limit-tokens", str(tok.limit)),
                ("x-ratelimit-remaining-tokens", str(tok.remaining)),
                ("x-ratelimit-reset-tokens", go_duration(tok.reset)),
            )
        if not self.allowed:
            out.append(("retry-after", retry_after_value(self.retry_after)))
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def _key(self) -> tuple[object, ...]:
        return (
            self.outcome,
            self.allowed,
            self.limit,
            self.message,
            self.retry_after,
            tuple(self._levels),
            None if self.lease is None else self.lease.estimate,
        )

    def __repr__(self) -> str:
        if self.allowed:
            return f"Decision({self.outcome.value}, requests={self.requests}, tokens={self.tokens})"
        return f"Decision({self.outcome.value}, {self.message!r}, retry_after={self.retry_after})"
