"""Which limits apply to a request, and the keys they count under.

For a ``(tenant, model)`` pair the rules are those whose ``tenant`` is the
tenant exactly, else (none of those) the ``"*"`` rules; among them, every
rule whose ``model`` matches applies, each counted on its own. A rule counts
per tenant: one key per (rule, limit, tenant); a glob rule counts every model
it matches together (``model = "gpt-*"`` with 1,000 tokens per minute is
1,000 for all of a tenant's gpt-* models, not 1,000 each). Keys are named by
the rule's model and the tenant, not by the rule's place in the file, so a
reload that keeps a rule keeps its counts.

A key is ``<prefix>:{<tenant>}:<kind>:<model>`` (the tenant in braces: a
Redis Cluster hash tag, so one request's keys share a slot), with ``%``,
``:``, ``{``, ``}`` escaped in the tenant and the model; a day key ends in
``:<YYYYMMDD>``.

A request may be charged in two steps (the edge's): ``EARLY``, the limits no
model changes (the ``model = "*"`` rules' requests per minute and streams in
flight), as soon as the caller is known and before its body is read; then
``LATE``, the rest, once the body says which model. ``FULL`` is both at once
(the proxy's, which learns the tenant from the body).

``Plan``s are cached per ``(tenant, model, phase)`` in a bounded dict (oldest out
first), as are ``allowed``'s answers: a lookup is a dict hit. No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fnmatch import translate
from typing import Final

from flatgate.proxy.limits.algorithms import (
    CONCURRENT,
    DAY,
    GIVEN_WAIT,
    KIND_CODES,
    KINDS,
    PERIOD,
    REQUESTS,
    TOKENS,
)
from flatgate.proxy.limits.sections import LimitRule

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "EARLY",
    "FULL",
    "LATE",
    "Check",
    "Plan",
    "RuleSet",
    "allowed",
    "key_part",
]

DEFAULT_CACHE_SIZE: Final = 4096
# Longer tenant and model names are resolved every time, never cached.
_MAX_CACHED_CHARS: Final = 512
_GLOB_CHARS: Final = frozenset("*?[")
_SHORT: Final = ("rpm", "tpm", "conc", "tpd")
_ESCAPES: Final = str.maketrans({"%": "%25", ":": "%3A", "{": "%7B", "}": "%7D"})
# Which of a request's checks a plan holds (see the module docstring).
FULL: Final = 0
EARLY: Final = 1
LATE: Final = 2
# The kinds an EARLY plan charges, of the model = "*" rules.
_EARLY_KINDS: Final = frozenset({REQUESTS, CONCURRENT})


def key_part(name: str) -> str:
    """A tenant or model name as it appears in a key (see the docstring)."""
    return name.translate(_ESCAPES)


def _matcher(glob: str) -> re.Pattern[str] | str | None:
    """``None`` for ``"*"``, the name for an exact name, else the compiled glob."""
    if glob == "*":
        return None
    if _GLOB_CHARS.isdisjoint(glob):
        return glob
    return re.compile(translate(glob))


def _matches(matcher: re.Pattern[str] | str | None, model: str) -> bool:
    if matcher is None:
        return True
    if isinstance(matcher, str):
        return matcher == model
    return matcher.match(model) is not None


class Check:
    """One limit of one rule, for one tenant: what the stores count."""

    __slots__ = ("amount", "code", "key", "kind", "what")

    def __init__(self, kind: int, amount: int, key: str, what: str) -> None:
        self.kind = kind
        self.amount = amount
        self.code = KIND_CODES[kind]
        # For DAY, the key without its date.
        self.key = key
        # "requests_per_minute (60) for tenant acme": the refusal's message.
        self.what = what

    def __repr__(self) -> str:
        return f"Check({self.what!r}, key={self.key!r})"


class Plan:
    """The checks of one ``(tenant, model)``, in rule order and, within a
    rule, in ``algorithms.KINDS`` order; with what the stores need prepared."""

    __slots__ = (
        "_dated",
        "args",
        "checks",
        "conc_at",
        "day_at",
        "keys",
        "leased",
        "no_waits",
        "specs",
        "tenant",
        "tokens_at",
        "waits_at",
    )

    def __init__(self, tenant: str, checks: Sequence[Check]) -> None:
        self.tenant = tenant
        self.checks = tuple(checks)
        self.keys: Sequence[str] = tuple(c.key for c in self.checks)
        # (kind, amount, a rate's seconds per unit) per check, for the hot loop.
        self.specs = tuple((c.kind, c.amount, PERIOD / c.amount) for c in self.checks)
        # Positions of the day keys (their date is added per request).
        self.day_at = tuple(i for i, c in enumerate(self.checks) if c.kind == DAY)
        # Positions of the checks whose refusal waits what the caller gives
        # (``algorithms.GIVEN_WAIT``): ``waits_on``.
        self.waits_at = tuple(i for i, c in enumerate(self.checks) if c.kind in GIVEN_WAIT)
        # The waits of a plan with none given (never read).
        self.no_waits: Sequence[float] = (0.0,) * len(self.checks)
        # The Redis script's per-check arguments: code, amount, wait (a
        # placeholder, never read: the store puts in those at ``waits_at``).
        self.args = tuple(x for c in self.checks for x in (c.code, str(c.amount), "0"))
        # What a lease settles: token reservations, concurrency slots.
        self.tokens_at = tuple(i for i, c in enumerate(self.checks) if c.kind in (TOKENS, DAY))
        self.conc_at = tuple(i for i, c in enumerate(self.checks) if c.kind == CONCURRENT)
        # Whether an acquire leaves something to settle or release.
        self.leased = bool(self.tokens_at or self.conc_at)
        self._dated: tuple[str, Sequence[str]] = ("", ())

    def __bool__(self) -> bool:
        return bool(self.checks)

    def keys_on(self, date: str) -> Sequence[str]:
        """The keys for a request on ``date`` (``YYYYMMDD``); the last
        date's are kept."""
        if not self.day_at:
            return self.keys
        dated = self._dated
        if dated[0] == date:
            return dated[1]
        keys = list(self.keys)
        for i in self.day_at:
            keys[i] = f"{keys[i]}:{date}"
        self._dated = (date, tuple(keys))
        return self._dated[1]

    def waits_on(self, day_left: float) -> Sequence[float]:
        """The per-check waits ``Store.acquire`` takes for a request
        ``day_left`` seconds before the end of its UTC day (the window its
        dated keys name): that at ``waits_at``, 0 (never read) elsewhere."""
        if not self.waits_at:
            return self.no_waits
        waits = list(self.no_waits)
        for i in self.waits_at:
            waits[i] = day_left
        return waits


class RuleSet:
    """The ``[[limits]]`` entries, indexed for ``plan``."""

    __slots__ = ("_cache", "_cache_size", "_exact", "_prefix", "_star", "rules")

    def __init__(
        self,
        rules: Sequence[LimitRule],
        key_prefix: str,
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        if cache_size < 0:
            raise ValueError("cache_size must be >= 0")
        self.rules = tuple(rules)
        self._prefix = key_prefix
        self._cache_size = cache_size
        self._cache: dict[tuple[str, str, int], Plan] = {}
        Entry = tuple[LimitRule, re.Pattern[str] | str | None]
        self._exact: dict[str, list[Entry]] = {}
        self._star: list[Entry] = []
        for rule in self.rules:
            entry = (rule, _matcher(rule.model))
            if rule.tenant == "*":
                self._star.append(entry)
            else:
                self._exact.setdefault(rule.tenant, []).append(entry)

    def plan(self, tenant: str, model: str, phase: int = FULL) -> Plan:
        """The checks of ``phase`` for a request of ``tenant`` to ``model`` (an
        empty ``Plan``, false, when no rule applies; ``model`` is not read for
        ``EARLY``)."""
        if phase == EARLY:
            model = ""
        hit = self._cache.get((tenant, model, phase))
        if hit is not None:
            return hit
        plan = self._resolve(tenant, model, phase)
        if self._cache_size and len(tenant) + len(model) <= _MAX_CACHED_CHARS:
            cache = self._cache
            while len(cache) >= self._cache_size:
                del cache[next(iter(cache))]
            cache[(tenant, model, phase)] = plan
        return plan

    def _resolve(self, tenant: str, model: str, phase: int) -> Plan:
        entries = self._exact.get(tenant, self._star)
        tag = key_part(tenant)
        checks: list[Check] = []
        for rule, matcher in entries:
            star = matcher is None
            if phase == EARLY and not star:
                continue
            if phase != EARLY and not _matches(matcher, model):
                continue
            scope = f"for tenant {tenant}"
            if not star:
                scope += f", model {rule.model}"
            for name, amount in rule.limits():
                kind = KINDS.index(name)
                if phase != FULL and (star and kind in _EARLY_KINDS) != (phase == EARLY):
                    continue
                key = self._key(tag, kind, rule.model)
                checks.append(Check(kind, amount, key, f"{name} ({amount}) {scope}"))
        return Plan(tenant, checks)

    def _key(self, tag: str, kind: int, model: str) -> str:
        return f"{self._prefix}:{{{tag}}}:{_SHORT[kind]}:{key_part(model)}"

    def tenant_keys(self, tenant: str, date: str = "20260101") -> list[str]:
        """Every key ``tenant``'s rules count under, whatever the model and
        phase (a day's key on ``date``): the keys one request may touch
        are among them."""
        tag = key_part(tenant)
        keys = []
        for rule, _ in self._exact.get(tenant, self._star):
            for name, _amount in rule.limits():
                kind = KINDS.index(name)
                key = self._key(tag, kind, rule.model)
                keys.append(f"{key}:{date}" if kind == DAY else key)
        return keys

    def tenants(self) -> list[str]:
        """The tenants with rules of their own."""
        return list(self._exact)

    def cache_info(self) -> tuple[int, int]:
        """``(cached plans, cache_size)``."""
        return len(self._cache), self._cache_size


_ALLOWED: dict[tuple[tuple[str, ...], str], bool] = {}


def allowed(
    models: Sequence[str] | None, model: str, *, cache_size: int = DEFAULT_CACHE_SIZE
) -> bool:
    """Whether an allow-list of model names and globs (a tenant's, a key's
    ``models``) lets ``model`` through: ``None`` lets every model through,
    ``()`` none; an entry equal to the name, or a glob matching it, lets it
    through. Answers are cached per (list, model), at most ``cache_size``."""
    if models is None:
        return True
    globs = models if isinstance(models, tuple) else tuple(models)
    hit = _ALLOWED.get((globs, model))
    if hit is not None:
        return hit
    ok = any(g == model or _matches(_matcher(g), model) for g in globs)
    if cache_size and len(model) <= _MAX_CACHED_CHARS:
        while len(_ALLOWED) >= cache_size:
            del _ALLOWED[next(iter(_ALLOWED))]
        _ALLOWED[(globs, model)] = ok
    return ok
