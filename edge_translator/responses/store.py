"""``StoredResponses``: the Responses API's stored responses (``store: true``)
in the ``[state]`` store, for ``previous_response_id`` and ``GET`` /
``DELETE /v1/responses/{id}`` (and its ``input_items``).

A stored response is two blobs (``limits.sections.BLOBS_PER_RESPONSE``),
each kept ``[state] responses_ttl_seconds``: its input items and its output
(the ``response`` object), as the JSON bytes the endpoint gives: what a
caller sent as input and what it was answered, never a credential or a
header. Their keys are ``responses:{<tenant>}:<id>:input`` and ``...:output``
(under the store's ``<key_prefix>:blob:``), the tenant as a digest (any
characters, one length, no tenant names in Redis; in braces, so that a Redis
Cluster keeps a tenant's in one slot), the id escaped as ``rules.key_part``
escapes names: another tenant's id reads as absent (its 404). An id longer
than ``MAX_ID_CHARS`` is none of ours: it reads as absent.

Each tenant is a group of the store (``responses:{<tenant>}``): the
store's per-group bounds (``[state] max_responses_per_tenant``,
``max_response_bytes_per_tenant``) hold for it, its own oldest going first,
so that no tenant evicts another's. A chained response's input is saved as
``list_pieces``: the runs of the input it continues (``Turn.runs``, as the
store gave them), then that response's output items and the new input, so
a memory store holds (and counts) the chain's bytes once, however long it
grows; ``input_items`` reads the same JSON list as if it were one piece.

Size: input and output together take at most ``[state]
max_stored_response_bytes`` (by default larger than any request the edge
admits, whatever images it holds, plus its answer: see
docs/configuration.md). A larger response is not stored at all (an input
already saved is let go): the save answers ``False``,
``refused["too_large"]`` counts it, and a small marker is kept in its
place for the TTL (``responses:{<tenant>}:<id>:too_large``, the size as
decimal digits), so that ``too_large`` can tell a continuation of it
(``previous_response_id``) why it cannot be continued, rather than a bare
404. A chain's input is the whole chain (``list_pieces``), so it is the
chain that is held to the cap. Between ``save_input`` and
``save_response`` this worker remembers the input's size (one request is
one worker's), in a bounded table; ``save`` takes both at once.

The store failing: a save answers ``False`` (the answer still goes out; it
is not stored: ``refused["store_error"]``); a read or a delete raises
``ResponsesUnavailable``, a 503, because a lookup that could not be made is
not a 404: the client would take its chain for lost. ``on_store_error``
does not apply (it is the limits' policy: a read has no "open" answer).
Logged once when the store stops answering and once when it answers again.

With a memory store, stored responses are per worker process (bounded by
``[state] memory_max_responses`` and ``memory_max_response_bytes_total`` as
well, ``limits.blobs``); a Redis store shares them with every worker of
every instance. No HTTP.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Final, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits import Limiter, StateSection, Store, StoreError
from flatgate.proxy.limits.blobs import Pieces
from flatgate.proxy.limits.rules import key_part
from flatgate.proxy.wire.digits import read_decimal

__all__ = [
    "MAX_ID_CHARS",
    "MAX_PENDING",
    "ResponsesUnavailable",
    "StoredResponses",
    "Turn",
    "list_pieces",
    "runs_of",
]

log = logging.getLogger("flatgate.edge")

# The longest response id that can be ours (OpenAI's are about 50 characters).
MAX_ID_CHARS: Final = 128
# Inputs saved whose output is not yet, whose sizes this worker remembers.
MAX_PENDING: Final = 4096
# An input refused: its output is refused too (and not counted twice).
_REFUSED: Final = -1
_REASONS: Final = ("too_large", "store_bounds", "store_error")
# The key suffix of a response not stored for its size (its marker).
_TOO_LARGE: Final = ":too_large"


class ResponsesUnavailable(FlatgateError):
    """The store did not answer a read or a delete of stored responses (503)."""

    default = codes.RESPONSES_UNAVAILABLE

    def __init__(self) -> None:
        super().__init__(
            "The stored responses are unavailable (the state store does not answer); "
            "retry shortly.",
            retry_after=1.0,
        )


def _group(tenant: str) -> str:
    """A tenant's group in the store: its digest in braces (one slot)."""
    digest = hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=16)
    return f"responses:{{{digest.hexdigest()}}}"


def _base(tenant: str, response_id: str) -> str | None:
    """The keys' common part; ``None`` for an id that cannot be ours."""
    if not response_id or len(response_id) > MAX_ID_CHARS:
        return None
    return f"{_group(tenant)}:{key_part(response_id)}"


def _own_base(tenant: str, response_id: str) -> str:
    """``_base`` for an id the endpoint made (raises ``ValueError`` if it
    cannot be one)."""
    base = _base(tenant, response_id)
    if base is None:
        raise ValueError(f"a response id is 1 to {MAX_ID_CHARS} characters")
    return base


_OPEN, _COMMA, _CLOSE = b"[", b",", b"]"


def list_pieces(runs: Sequence[bytes]) -> Pieces:
    """The pieces of a JSON list made of ``runs``, each the inside of a list
    (``b"1,2"``); an empty run adds nothing."""
    out = [_OPEN]
    for run in runs:
        if run:
            if len(out) > 1:
                out.append(_COMMA)
            out.append(run)
    out.append(_CLOSE)
    return tuple(out)


def runs_of(pieces: Pieces) -> Pieces:
    """The runs ``list_pieces`` made ``pieces`` of (a store that keeps bytes
    gives the list whole: its inside, as one run)."""
    if len(pieces) == 1:
        inside = pieces[0].strip()[1:-1]
        return (inside,) if inside.strip() else ()
    return pieces[1:-1:2]


class Turn(NamedTuple):
    """A stored response, for ``previous_response_id``: its input items as
    ``list_pieces``' runs (a chain continued from it shares them), and its
    ``response`` object."""

    runs: Pieces
    response: bytes

    @property
    def items(self) -> bytes:
        """The input items' JSON list."""
        return b"".join(list_pieces(self.runs))

    @property
    def size(self) -> int:
        """The bytes of both, as a client would send them."""
        return sum(len(r) + 1 for r in self.runs) + 1 + len(self.response)


class StoredResponses:
    """See the module docstring. Over ``store`` with ``state``'s TTL and cap;
    ``following(limiter)``: over a limiter's store, following its reloads."""

    def __init__(self, store: Store, state: StateSection) -> None:
        self._source: Callable[[], tuple[Store, StateSection]] = lambda: (store, state)
        # Input keys to the bytes saved under them (_REFUSED: refused).
        self._pending: OrderedDict[str, int] = OrderedDict()
        self.stored = 0
        # Responses not stored, by why: over the size cap, the store's own
        # bounds (a memory store's), the store failing.
        self.refused = dict.fromkeys(_REASONS, 0)
        # Operations the store failed, reads included; whether the last answered.
        self.errors = 0
        self.up = True

    @classmethod
    def following(cls, limiter: Limiter) -> StoredResponses:
        """Over the limiter's store and its ``[state]``, whichever they are at
        each call (a reload that changes ``[state]`` opens a new store)."""
        made = cls(limiter.store, limiter.config.state)
        made._source = lambda: (limiter.store, limiter.config.state)
        return made

    @property
    def refused_too_large(self) -> int:
        return self.refused["too_large"]

    # -- saving -----------------------------------------------------------------

    async def save(self, tenant: str, response_id: str, items: bytes, response: bytes) -> bool:
        """Store a response, its input ``items`` and its ``response`` object,
        unless together they are over the cap; whether it was stored."""
        store, state = self._source()
        base = _own_base(tenant, response_id)
        group = _group(tenant)
        ttl = state.responses_ttl_seconds
        size = len(items) + len(response)
        if size > state.max_stored_response_bytes:
            await self._too_large(store, base, group, size, ttl)
            return False
        try:
            done = await asyncio.gather(
                store.put_blob(f"{base}:input", items, ttl, group),
                store.put_blob(f"{base}:output", response, ttl, group),
            )
            if not all(done):  # half a response is none: let go of the other half
                await self._drop(store, base, group)
        except StoreError as exc:
            return self._not_saved(exc)
        self._answered()
        if not all(done):
            self.refused["store_bounds"] += 1
            return False
        self.stored += 1
        return True

    async def save_input(self, tenant: str, response_id: str, items: bytes | Pieces) -> bool:
        """Store a response's input ``items``, a JSON list or its
        ``list_pieces`` (its output follows in ``save_response``); whether
        they were stored."""
        store, state = self._source()
        base = _own_base(tenant, response_id)
        key = base + ":input"
        size = len(items) if isinstance(items, bytes) else sum(map(len, items))
        if size > state.max_stored_response_bytes:
            self._remember(key, _REFUSED)
            await self._too_large(store, base, _group(tenant), size, state.responses_ttl_seconds)
            return False
        try:
            done = await store.put_blob(key, items, state.responses_ttl_seconds, _group(tenant))
        except StoreError as exc:
            self._remember(key, _REFUSED)
            return self._not_saved(exc)
        self._answered()
        if not done:
            self.refused["store_bounds"] += 1
        self._remember(key, size if done else _REFUSED)
        return done

    async def save_response(self, tenant: str, response_id: str, response: bytes) -> bool:
        """Store a response's output (the ``response`` object), unless it and
        the input ``save_input`` stored are over the cap together (the input
        then goes too), or its input was refused; whether it was stored."""
        store, state = self._source()
        base = _own_base(tenant, response_id)
        group = _group(tenant)
        saved = self._pending.pop(f"{base}:input", 0)
        if saved == _REFUSED:
            return False
        ttl = state.responses_ttl_seconds
        if saved + len(response) > state.max_stored_response_bytes:
            if saved:
                try:
                    await store.delete_blob(f"{base}:input", group)
                except StoreError as exc:
                    self._failed(exc)
            await self._too_large(store, base, group, saved + len(response), ttl)
            return False
        try:
            done = await store.put_blob(f"{base}:output", response, ttl, group)
            if not done:  # half a response is none: let go of the other half
                await store.delete_blob(f"{base}:input", group)
        except StoreError as exc:
            return self._not_saved(exc)
        self._answered()
        if not done:
            self.refused["store_bounds"] += 1
            return False
        self.stored += 1
        return True

    async def _too_large(self, store: Store, base: str, group: str, size: int, ttl: float) -> None:
        """A response over the cap: counted, and its marker kept (a failure
        to keep it is the store's to count; the answer goes out)."""
        self.refused["too_large"] += 1
        try:
            await store.put_blob(f"{base}{_TOO_LARGE}", str(size).encode(), ttl, group)
        except StoreError as exc:
            self._failed(exc)

    def _remember(self, key: str, size: int) -> None:
        pending = self._pending
        pending[key] = size
        pending.move_to_end(key)
        while len(pending) > MAX_PENDING:
            pending.popitem(last=False)

    # -- reading ----------------------------------------------------------------

    async def response(self, tenant: str, response_id: str) -> bytes | None:
        """The stored ``response`` object (``None``: none for this tenant:
        never stored, expired, evicted or deleted)."""
        return await self._get(tenant, response_id, "output")

    async def input_items(self, tenant: str, response_id: str) -> bytes | None:
        """The stored response's input items (``None`` as ``response``)."""
        return await self._get(tenant, response_id, "input")

    async def turn(self, tenant: str, response_id: str) -> Turn | None:
        """Both at once, for ``previous_response_id``: ``None`` unless both
        are there."""
        base = _base(tenant, response_id)
        if base is None:
            return None
        store = self._source()[0]
        try:
            items, response = await asyncio.gather(
                store.get_pieces(f"{base}:input"), store.get_blob(f"{base}:output")
            )
        except StoreError as exc:
            self._failed(exc)
            raise ResponsesUnavailable from exc
        self._answered()
        if items is None or response is None:
            return None
        return Turn(runs_of(items), response)

    async def too_large(self, tenant: str, response_id: str) -> int | None:
        """The size of this tenant's response ``response_id`` when it was
        answered but not stored for being over the cap (its marker), else
        ``None``."""
        found = await self._get(tenant, response_id, _TOO_LARGE[1:])
        return read_decimal(found.decode("ascii", "replace")) if found else None

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Let go of a stored response; whether this tenant had it."""
        base = _base(tenant, response_id)
        if base is None:
            return False
        try:
            gone = await self._drop(self._source()[0], base, _group(tenant))
        except StoreError as exc:
            self._failed(exc)
            raise ResponsesUnavailable from exc
        self._answered()
        return gone

    @staticmethod
    async def _drop(store: Store, base: str, group: str) -> bool:
        """Both blobs (and a marker) let go; whether the output was there."""
        gone = await asyncio.gather(
            store.delete_blob(f"{base}:input", group),
            store.delete_blob(f"{base}:output", group),
            store.delete_blob(f"{base}{_TOO_LARGE}", group),
        )
        return gone[1]

    async def _get(self, tenant: str, response_id: str, part: str) -> bytes | None:
        base = _base(tenant, response_id)
        if base is None:
            return None
        try:
            found = await self._source()[0].get_blob(f"{base}:{part}")
        except StoreError as exc:
            self._failed(exc)
            raise ResponsesUnavailable from exc
        self._answered()
        return found

    # -- the store's health -----------------------------------------------------

    def _not_saved(self, exc: StoreError) -> bool:
        self.refused["store_error"] += 1
        self._failed(exc)
        return False

    def _failed(self, exc: StoreError) -> None:
        self.errors += 1
        if self.up:
            self.up = False
            log.warning(
                "responses: store %s is unavailable (%s): responses are not stored, and "
                "stored ones cannot be read, until it answers",
                self._source()[0].name,
                exc,
            )

    def _answered(self) -> None:
        if not self.up:
            self.up = True
            log.warning("responses: store %s answers again", self._source()[0].name)

    def collect(self, prefix: str) -> Iterable[Metric]:
        """``<prefix>_responses_stored_total``, ``..._not_stored_total{reason}``,
        ``..._store_errors_total``, ``..._store_up``, ``..._evicted_total`` and,
        for a memory store, ``..._store_bytes``."""
        stored = CounterMetricFamily(f"{prefix}_responses_stored", "Responses stored (store: true)")
        stored.add_metric([], self.stored)
        refused = CounterMetricFamily(
            f"{prefix}_responses_not_stored",
            "Responses with store: true that were not stored, by reason",
            labels=["reason"],
        )
        for reason, count in self.refused.items():
            refused.add_metric([reason], count)
        errors = CounterMetricFamily(
            f"{prefix}_responses_store_errors",
            "Operations on stored responses the store failed or timed out",
        )
        errors.add_metric([], self.errors)
        up = GaugeMetricFamily(
            f"{prefix}_responses_store_up",
            "1 while the store of the stored responses answers, 0 while it does not",
        )
        up.add_metric([], 1.0 if self.up else 0.0)
        store = self._source()[0]
        evicted = CounterMetricFamily(
            f"{prefix}_responses_evicted",
            "Stored responses' halves (input or output) let go before their TTL, to keep "
            "a tenant within its share or the store within its bounds",
        )
        evicted.add_metric([], store.blobs_evicted)
        out: list[Metric] = [stored, refused, errors, up, evicted]
        usage = store.blob_usage()
        if usage is not None:  # a memory store: what this worker holds
            held = GaugeMetricFamily(
                f"{prefix}_responses_store_bytes",
                "Bytes of stored responses this worker's memory store holds",
            )
            held.add_metric([], usage[1])
            out.append(held)
        return out
