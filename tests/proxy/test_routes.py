"""``RouteTable``: precedence, memoryview keys, the bounded pattern cache."""

from __future__ import annotations

import threading

import pytest

from flatgate.proxy.service.routes import Route, RouteTable
from flatgate.proxy.wire.request.route import read_route
from tests.proxy.wire_helpers import build, sample_request

OPENAI, ANTHROPIC, SELF_HOSTED = 0, 1, 2


def table(cache_size: int = 64) -> RouteTable[str]:
    return RouteTable(
        [
            Route("gpt-4o", "openai-pinned", provider=OPENAI),
            Route("gpt-4o", "gpt-any"),
            Route("claude-*", "anthropic-pattern", provider=ANTHROPIC),
            Route("llama-*", "llama-pattern"),
            Route("llama-3.1-8b", "llama-exact", provider=SELF_HOSTED),
            Route("l*", "l-pattern"),
            Route("*", "default-self-hosted", provider=SELF_HOSTED),
            Route("*", "default"),
        ],
        cache_size=cache_size,
    )


@pytest.mark.parametrize(
    ("provider", "model", "target"),
    [
        (OPENAI, b"gpt-4o", "openai-pinned"),  # exact + provider
        (ANTHROPIC, b"gpt-4o", "gpt-any"),  # exact, any provider
        (SELF_HOSTED, b"llama-3.1-8b", "llama-exact"),  # exact beats the earlier pattern
        (OPENAI, b"llama-3.1-8b", "llama-pattern"),  # exact pinned elsewhere: patterns
        (ANTHROPIC, b"claude-sonnet", "anthropic-pattern"),
        (OPENAI, b"claude-sonnet", "default"),  # pinned pattern, other provider
        (OPENAI, b"llama-70b", "llama-pattern"),  # first matching pattern in order
        (OPENAI, b"lemur", "l-pattern"),
        (SELF_HOSTED, b"mistral", "default-self-hosted"),  # pinned default first
        (OPENAI, b"mistral", "default"),
        (OPENAI, b"GPT-4O", "default"),  # case-sensitive, exact and glob
        (OPENAI, b"", "default"),
    ],
)
def test_precedence(provider: int, model: bytes, target: str) -> None:
    routes = table()
    assert routes.lookup(provider, model) == target
    assert routes.lookup(provider, memoryview(model)) == target
    assert routes.lookup(provider, model) == target  # and again, from the cache


def test_no_default_means_none() -> None:
    routes = RouteTable([Route("gpt-4o", "x", provider=OPENAI), Route("a?", "y")])
    assert routes.lookup(ANTHROPIC, b"gpt-4o") is None
    assert routes.lookup(OPENAI, b"ab") == "y"
    assert routes.lookup(OPENAI, b"abc") is None
    assert routes.lookup(OPENAI, b"abc") is None


def test_glob_syntax() -> None:
    routes = RouteTable([Route("m[0-9]", "digit"), Route("x?z", "one"), Route("a*b*c", "stars")])
    assert routes.lookup(0, b"m7") == "digit"
    assert routes.lookup(0, b"mx") is None
    assert routes.lookup(0, b"xyz") == "one"
    assert routes.lookup(0, b"a--b--c") == "stars"
    assert routes.lookup(0, b"a--b--c\n") is None  # a full match, not a prefix one


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The model names ``RouteTable._resolve`` (decode + patterns) was called for."""
    seen: list[bytes] = []
    resolve = RouteTable._resolve

    def spy(self: RouteTable[str], provider: int, model: bytes | memoryview) -> str | None:
        seen.append(bytes(model))
        return resolve(self, provider, model)

    monkeypatch.setattr(RouteTable, "_resolve", spy)
    return seen


def test_the_view_read_route_returns_finds_exact_entries_without_resolving(
    calls: list[bytes],
) -> None:
    routes = table()
    buf = build(sample_request("gpt-4o", provider=OPENAI))
    provider, model = read_route(buf)
    assert model.obj is buf
    assert routes.lookup(provider, model) == "openai-pinned"
    assert calls == []
    assert routes.cache_info()[0] == 0


def test_pattern_results_are_cached_so_repeats_are_exact_hits(calls: list[bytes]) -> None:
    routes = table()
    for _ in range(3):
        buf = build(sample_request("llama-70b", provider=OPENAI))  # a new buffer each time
        assert routes.lookup(*read_route(buf)) == "llama-pattern"
    assert calls == [b"llama-70b"]
    assert routes.lookup(ANTHROPIC, b"llama-70b") == "llama-pattern"
    assert calls == [b"llama-70b", b"llama-70b"]  # per (model, provider)
    assert routes.cache_info() == (1, 64)


def test_misses_are_cached_and_the_cache_is_bounded() -> None:
    routes = RouteTable([Route("a*", "a")], cache_size=2)
    assert routes.lookup(0, b"zz1") is None
    assert routes.lookup(0, b"a1") == "a"
    assert routes.lookup(0, b"zz2") is None
    assert routes.cache_info() == (2, 2)
    assert set(routes._cache) == {b"a1", b"zz2"}  # the oldest went first
    for i in range(100):
        routes.lookup(i % 256 - 128, f"zz{i}".encode())
    assert routes.cache_info() == (2, 2)


def test_the_cache_is_bounded_in_bytes_even_when_every_name_resolves() -> None:
    """A ``*`` route resolves every name, so "cache only hits" is no bound:
    the cache holds at most ``cache_bytes`` of names, and a name over
    ``cache_bytes / 64`` is resolved without being cached."""
    routes = RouteTable([Route("*", "any")], cache_size=10_000, cache_bytes=64 * 100)
    for i in range(1000):
        assert routes.lookup(0, f"{i:08d}".ljust(90, "x").encode()) == "any"
        assert routes.cache_bytes <= 64 * 100
    assert routes.cache_info()[0] == (64 * 100) // 90
    huge = b"m" * 101
    assert routes.lookup(0, huge) == "any"
    assert huge not in routes._cache
    assert routes.cache_bytes <= 64 * 100


def test_cache_size_zero_disables_the_cache() -> None:
    routes = RouteTable([Route("a*", "a")], cache_size=0)
    assert routes.lookup(0, b"ab") == "a"
    assert routes.cache_info() == (0, 0)


def test_undecodable_model_bytes_never_raise() -> None:
    routes = RouteTable([Route("x-*", "x"), Route("*", "default")])
    assert routes.lookup(0, b"x-\xff\xfe") == "x"
    assert routes.lookup(0, b"\xff") == "default"


def test_non_ascii_names() -> None:
    routes = RouteTable([Route("東京-*", "tokyo"), Route("café", "cafe")])
    assert routes.lookup(0, "東京-llm".encode()) == "tokyo"
    assert routes.lookup(0, memoryview("café".encode())) == "cafe"


@pytest.mark.parametrize("model", [bytearray(b"gpt-4o"), memoryview(bytearray(b"gpt-4o"))])
def test_writable_buffers_raise_a_clear_type_error(model: bytearray | memoryview) -> None:
    with pytest.raises(TypeError, match=r"convert writable buffers once at the edge"):
        table().lookup(OPENAI, model)  # type: ignore[arg-type]


def test_construction_errors() -> None:
    with pytest.raises(ValueError, match="duplicate route"):
        RouteTable([Route("m", 1), Route("m", 2)])
    with pytest.raises(ValueError, match="duplicate route"):
        RouteTable([Route("*", 1, provider=0), Route("*", 2, provider=0)])
    with pytest.raises(ValueError, match="must not be empty"):
        RouteTable([Route("", 1)])
    with pytest.raises(ValueError, match="cache_size"):
        RouteTable([], cache_size=-1)
    same_model_other_provider = RouteTable([Route("m", 1, provider=0), Route("m", 2)])
    assert same_model_other_provider.lookup(0, b"m") == 1
    assert same_model_other_provider.lookup(5, b"m") == 2


def test_routes_are_kept_in_order() -> None:
    entries = [Route("b", 1), Route("a*", 2), Route("*", 3)]
    assert RouteTable(entries).routes == tuple(entries)


def test_shared_between_threads() -> None:
    routes = RouteTable([Route("a*", "a"), Route("*", "d")], cache_size=8)
    errors: list[BaseException] = []

    def hammer(seed: int) -> None:
        try:
            for i in range(3000):
                name = f"{'a' if i % 2 else 'z'}-{seed}-{i % 50}".encode()
                assert routes.lookup(i % 3, memoryview(name)) == ("a" if i % 2 else "d")
        except BaseException as exc:  # collected, re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert routes.cache_info()[0] <= 8 + len(threads)
