"""The route table: ``(provider, model)`` to a target, found without copying.

Owns ``RouteTable``, an immutable table built once from ``Route`` entries (the
TOML config that lists them belongs to the proxy's settings). Three kinds of
model key, told apart by the string itself:

- an exact model name (``"gpt-4o-mini"``), looked up by hashing the model
  bytes: ``dict`` keys are ``bytes``, and a read-only memoryview over ``bytes``
  hashes and compares like the bytes it shows, so ``read_route``'s view finds
  its entry with no copy and no decode;
- a glob pattern (any of ``*?[``, ``fnmatch`` syntax, case-sensitive:
  ``"llama-*"``), matched against the model decoded as UTF-8 (undecodable
  bytes become surrogates, so they never raise and match only wildcards);
- ``"*"`` alone: the default.

Each entry either pins a provider (``provider=ModelProvider value``) or
matches any (``provider=None``). Precedence: exact name with this provider >
exact name for any provider > the first matching pattern in entry order
(pinned or not) > default with this provider > default for any provider.

Pattern and default results are cached per ``(model bytes, provider)`` in a
bounded dict (at most ``cache_size`` model names and ``cache_bytes`` bytes of
them, oldest evicted first), so a model seen before is an exact-dict hit next
time: the decode and the ``fnmatch`` happen once per name, and the cached key
is the one ``bytes`` copy kept. Misses (``None``) are cached too, so a flood of
unknown names costs at most one pattern scan each and never grows memory past
the bound; a name longer than ``cache_bytes / 64`` is resolved but never
cached (callers cap names anyway: the proxy's ``max_model_bytes``).

Writable memoryviews (over ``bytearray``) are unhashable; ``lookup`` raises a
``TypeError`` naming the fix (convert with ``bytes(...)`` once, at the edge)
rather than copying silently on every call.

Measured (CPython 3.11): ``exact[model].get(provider)`` with nested dicts beat
one dict keyed by ``(provider, model)`` tuples by ~20 ns per lookup, as the
tuple is built and hashed on every call; hence the nested layout.

Pure: no I/O. May be shared between threads: the cache fill races at worst
(an entry resolved twice, the bound briefly passed by one), it never fails.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import translate
from typing import Generic, TypeVar

__all__ = ["DEFAULT_CACHE_BYTES", "DEFAULT_CACHE_SIZE", "Route", "RouteTable"]

T = TypeVar("T")

DEFAULT_CACHE_SIZE = 4096
DEFAULT_CACHE_BYTES = 1 << 20
_GLOB_CHARS = frozenset("*?[")
_DEFAULT = "*"
_MISSING = object()
# Providers are an int8 enum: at most 256 per cached model name.
_MAX_PROVIDERS_PER_MODEL = 256


@dataclass(frozen=True, slots=True)
class Route(Generic[T]):
    """One entry: ``model`` is an exact name, a glob pattern or ``"*"``;
    ``provider`` pins a ``ModelProvider`` value, ``None`` matches any."""

    model: str
    target: T
    provider: int | None = None


class RouteTable(Generic[T]):
    """Immutable ``(provider, model) -> target`` map; see the module docstring."""

    __slots__ = (
        "_cache",
        "_cache_bytes",
        "_cache_limit",
        "_cache_size",
        "_default_any",
        "_default_pinned",
        "_exact",
        "_patterns",
        "_routes",
    )

    def __init__(
        self,
        routes: Iterable[Route[T]],
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if cache_size < 0 or cache_bytes < 0:
            raise ValueError("cache_size and cache_bytes must be >= 0")
        self._routes = tuple(routes)
        self._cache_size = cache_size
        self._cache_limit = cache_bytes
        self._cache_bytes = 0
        # model bytes -> (pinned provider -> target, any-provider target or _MISSING)
        self._exact: dict[bytes, tuple[dict[int, T], object]] = {}
        self._patterns: list[tuple[re.Pattern[str], int | None, T]] = []
        self._default_pinned: dict[int, T] = {}
        self._default_any: object = _MISSING
        # model bytes -> provider -> resolved target (or None): the lookup cache.
        self._cache: dict[bytes, dict[int, T | None]] = {}
        seen: set[tuple[str, int | None]] = set()
        for route in self._routes:
            key = (route.model, route.provider)
            if key in seen:
                raise ValueError(
                    f"duplicate route for model {route.model!r}, provider {route.provider}"
                )
            seen.add(key)
            self._add(route)

    def _add(self, route: Route[T]) -> None:
        model, provider, target = route.model, route.provider, route.target
        if not model:
            raise ValueError("route model must not be empty")
        if model == _DEFAULT:
            if provider is None:
                self._default_any = target
            else:
                self._default_pinned[provider] = target
        elif _GLOB_CHARS.isdisjoint(model):
            pinned, any_target = self._exact.get(model.encode(), ({}, _MISSING))
            if provider is None:
                any_target = target
            else:
                pinned[provider] = target
            self._exact[model.encode()] = (pinned, any_target)
        else:
            self._patterns.append((re.compile(translate(model)), provider, target))

    @property
    def routes(self) -> tuple[Route[T], ...]:
        """The entries, in the order given."""
        return self._routes

    def lookup(self, provider: int, model: bytes | memoryview) -> T | None:
        """The target for ``(provider, model)``, or ``None`` if nothing matches.

        ``model`` is ``bytes`` or a read-only memoryview (as ``read_route``
        returns). A view is copied to ``bytes`` first (at most
        ``max_model_bytes``): hashing a memoryview hashes the whole object
        under it first, the request body, which cost 155 µs at 1 MB.
        """
        if type(model) is memoryview:
            if not model.readonly:
                raise TypeError(
                    "RouteTable.lookup: model must be bytes or a read-only memoryview; "
                    "convert writable buffers once at the edge with bytes(...)"
                )
            model = model.tobytes()
        try:
            exact = self._exact.get(model)
        except (TypeError, ValueError):  # bytearray: TypeError
            raise TypeError(
                "RouteTable.lookup: model must be bytes or a read-only memoryview; "
                "convert writable buffers once at the edge with bytes(...)"
            ) from None
        if exact is not None:
            found = exact[0].get(provider, exact[1])
            if found is not _MISSING:
                return found  # type: ignore[return-value]
        cached = self._cache.get(model)
        if cached is not None:
            hit = cached.get(provider, _MISSING)
            if hit is not _MISSING:
                return hit  # type: ignore[return-value]
        return self._resolve(provider, model)

    def _resolve(self, provider: int, model: bytes | memoryview) -> T | None:
        key = bytes(model)
        name = key.decode("utf-8", "surrogateescape")
        result: T | None = None
        for pattern, pinned, target in self._patterns:
            if (pinned is None or pinned == provider) and pattern.match(name):
                result = target
                break
        else:
            default = self._default_pinned.get(provider, self._default_any)
            if default is not _MISSING:
                result = default  # type: ignore[assignment]
        if self._cache_size and len(key) <= self._cache_limit >> 6:
            per_model = self._cache.get(key)
            if per_model is None:
                while self._cache and (
                    len(self._cache) >= self._cache_size
                    or self._cache_bytes + len(key) > self._cache_limit
                ):
                    # Another thread may evict or insert in between: any of
                    # these means someone else made room, which is enough.
                    with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                        old = next(iter(self._cache))
                        del self._cache[old]
                        self._cache_bytes -= len(old)
                per_model = self._cache[key] = {}
                self._cache_bytes += len(key)
            if len(per_model) < _MAX_PROVIDERS_PER_MODEL:
                per_model[provider] = result
        return result

    def cache_info(self) -> tuple[int, int]:
        """``(cached model names, cache_size)``."""
        return len(self._cache), self._cache_size

    @property
    def cache_bytes(self) -> int:
        """Bytes of model names the cache holds now (at most ``cache_bytes``)."""
        return self._cache_bytes
