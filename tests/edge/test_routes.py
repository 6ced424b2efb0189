"""The edge's route table (``edge_translator.routes``): patterns, parameters,
method sets, and the shape of a path no route serves. Pure: no app."""

from __future__ import annotations

import pytest

from flatgate.edge_translator.routes import Endpoint, Pattern, Shape, Table


def table() -> Table[str]:
    """A table shaped like the edge's, each target its handler's name."""
    return Table(
        (
            Endpoint("/v1/chat/completions", ("POST",), "chat", shape=Shape.OPENAI),
            Endpoint("/v1/messages", ("POST",), "messages", shape=Shape.ANTHROPIC),
            Endpoint("/v1/responses", ("POST",), "responses", shape=Shape.RESPONSES),
            Endpoint("/v1/responses/compact", ("POST",), "compact", shape=Shape.RESPONSES),
            Endpoint(
                "/v1/responses/{id}",
                ("GET", "DELETE"),
                "stored",
                shape=Shape.RESPONSES,
                label="stored",
            ),
            Endpoint("/v1/responses/{id}/input_items", ("GET",), "items", shape=Shape.RESPONSES),
            Endpoint("/v1/models", ("GET",), "models", shape=Shape.CALLER, logged=False),
            Endpoint(
                "/v1/models/{id...}",
                ("GET",),
                "model",
                shape=Shape.CALLER,
                refuses=("DELETE",),
            ),
            Endpoint(
                "/v1beta/models/{model}:generateContent",
                ("POST",),
                "gemini",
                shape=Shape.OPENAI,
            ),
        ),
        families={"/v1/messages": Shape.ANTHROPIC, "/v1/responses": Shape.RESPONSES},
    )


def found(t: Table[str], method: str, path: str) -> tuple[str, dict[str, str], bool] | None:
    match = t.find(method, path)
    if match is None:
        return None
    return match.endpoint.target, dict(match.params), match.allowed


# -- exact paths -----------------------------------------------------------------


def test_an_exact_path_is_found_by_its_method() -> None:
    t = table()
    assert found(t, "POST", "/v1/chat/completions") == ("chat", {}, True)
    assert found(t, "POST", "/v1/messages") == ("messages", {}, True)
    assert found(t, "GET", "/v1/models") == ("models", {}, True)


def test_an_exact_path_s_match_is_made_once() -> None:
    """The hot path allocates nothing: the same match object every time."""
    t = table()
    first = t.find("POST", "/v1/chat/completions")
    assert first is not None and first is t.find("POST", "/v1/chat/completions")


def test_an_exact_path_with_a_method_it_does_not_serve_is_refused() -> None:
    t = table()
    match = t.find("GET", "/v1/chat/completions")
    assert match is not None and not match.allowed
    assert match.endpoint.allow == "POST"
    assert found(t, "POST", "/v1/models") == ("models", {}, False)


def test_an_exact_path_wins_over_a_pattern_that_takes_it() -> None:
    """``/v1/responses/compact`` is the compact endpoint's, whatever the
    method: no response has the id ``compact``."""
    t = table()
    assert found(t, "POST", "/v1/responses/compact") == ("compact", {}, True)
    for method in ("GET", "DELETE"):
        match = t.find(method, "/v1/responses/compact")
        assert match is not None and match.endpoint.target == "compact"
        assert not match.allowed and match.endpoint.allow == "POST"
    assert found(t, "GET", "/v1/responses/compact/input_items") == (
        "items",
        {"id": "compact"},
        True,
    )


def test_exact_paths_are_exact() -> None:
    t = table()
    for path in ("/v1/chat/completions/", "/v1/chat", "/V1/chat/completions", "/v1/messagesx"):
        assert t.find("POST", path) is None, path


# -- patterns ----------------------------------------------------------------------


def test_a_segment_parameter_takes_one_segment() -> None:
    t = table()
    assert found(t, "GET", "/v1/responses/resp_1") == ("stored", {"id": "resp_1"}, True)
    assert found(t, "DELETE", "/v1/responses/resp_1") == ("stored", {"id": "resp_1"}, True)
    assert found(t, "GET", "/v1/responses/resp_1/input_items") == (
        "items",
        {"id": "resp_1"},
        True,
    )
    # Not an id: a slash in it, or none at all.
    assert t.find("GET", "/v1/responses/a/b") is None
    assert t.find("GET", "/v1/responses/") is None
    assert t.find("GET", "/v1/responses//input_items") is None


def test_a_rest_parameter_takes_slashes() -> None:
    t = table()
    assert found(t, "GET", "/v1/models/accounts/acme/models/m") == (
        "model",
        {"id": "accounts/acme/models/m"},
        True,
    )
    assert found(t, "GET", "/v1/models/x:generateContent") == (
        "model",
        {"id": "x:generateContent"},
        True,
    )
    # A decoded %0A is a character of the id like any other.
    assert found(t, "GET", "/v1/models/a\nb") == ("model", {"id": "a\nb"}, True)
    assert found(t, "GET", "/v1/responses/a\nb") == ("stored", {"id": "a\nb"}, True)
    # The empty id too: its handler answers it (404 model_not_found).
    assert found(t, "GET", "/v1/models/") == ("model", {"id": ""}, True)


def test_a_parameter_mid_segment() -> None:
    t = table()
    assert found(t, "POST", "/v1beta/models/gemini-2.0-flash:generateContent") == (
        "gemini",
        {"model": "gemini-2.0-flash"},
        True,
    )
    assert t.find("POST", "/v1beta/models/:generateContent") is None
    assert t.find("POST", "/v1beta/models/a/b:generateContent") is None
    assert t.find("POST", "/v1beta/models/m:streamGenerateContent") is None
    assert t.find("POST", "/v1beta/models/m:generateContentx") is None


def test_pattern_text_is_literal_not_a_regex() -> None:
    p = Pattern("/a.b/{x}+c")
    assert p.match("/a.b/1+c") == {"x": "1"}
    assert p.match("/aXb/1+c") is None
    assert p.match("/a.b/1c") is None


def test_a_pattern_s_parts() -> None:
    p = Pattern("/v1beta/models/{model}:{verb}")
    assert (p.params, p.prefix, p.exact) == (("model", "verb"), "/v1beta/models/", False)
    assert p.match("/v1beta/models/m:countTokens") == {"model": "m", "verb": "countTokens"}
    exact = Pattern("/healthz")
    assert (exact.params, exact.prefix, exact.exact) == ((), "/healthz", True)
    assert exact.match("/healthz") == {} and exact.match("/healthz/") is None


@pytest.mark.parametrize(
    "template",
    ["v1/x", "/a/{x}{y}", "/a/{x}/{x}", "/a/{x", "/a/x}", "/a/{1x}", "/a/{}", "/a/{x..}"],
)
def test_bad_patterns_are_refused(template: str) -> None:
    with pytest.raises(ValueError):
        Pattern(template)


def test_a_path_twice_and_an_endpoint_serving_nothing_are_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        Table(
            (
                Endpoint("/a", ("GET",), 1, shape=Shape.OPENAI),
                Endpoint("/a", ("POST",), 2, shape=Shape.OPENAI),
            )
        )
    with pytest.raises(ValueError, match="no method"):
        Endpoint("/a", (), 1, shape=Shape.OPENAI)


# -- method sets ------------------------------------------------------------------


def test_head_comes_with_get_and_allow_lists_the_methods_given() -> None:
    e = Endpoint("/v1/responses/{id}", ("GET", "DELETE"), 0, shape=Shape.RESPONSES)
    assert e.serves == {"GET", "HEAD", "DELETE"} and e.allow == "GET, DELETE"
    post = Endpoint("/v1/messages", ("POST",), 0, shape=Shape.ANTHROPIC)
    assert post.serves == {"POST"} and post.refused("HEAD") and post.refused("GET")


def test_a_pattern_refuses_every_method_it_does_not_serve_by_default() -> None:
    t = table()
    assert found(t, "POST", "/v1/responses/resp_1") == ("stored", {"id": "resp_1"}, False)
    assert found(t, "DELETE", "/v1/responses/r/input_items") == ("items", {"id": "r"}, False)
    assert found(t, "HEAD", "/v1/responses/r/input_items") == ("items", {"id": "r"}, True)


def test_a_method_neither_served_nor_refused_is_no_route() -> None:
    """``/v1/models/{id...}`` refuses DELETE (OpenAI's method there) with a
    405; a POST there is no model's path: no route (a 404)."""
    t = table()
    assert found(t, "DELETE", "/v1/models/m") == ("model", {"id": "m"}, False)
    assert t.find("POST", "/v1/models/x:generateContent") is None
    assert t.find("PUT", "/v1/models/m") is None


def test_the_search_goes_on_past_an_endpoint_that_does_not_serve_the_method() -> None:
    """A later pattern serves what an earlier one neither serves nor refuses;
    a refusal is answered only when no endpoint serves the method."""
    t = Table(
        (
            Endpoint("/v1/models/{id...}", ("GET",), "model", shape=Shape.CALLER, refuses=()),
            Endpoint("/v1/models/{model}:generateContent", ("POST",), "gen", shape=Shape.OPENAI),
            Endpoint("/v1/things/{id}", ("GET",), "thing", shape=Shape.OPENAI),
            Endpoint("/v1/things/{id...}", ("POST",), "things", shape=Shape.OPENAI),
        )
    )
    assert found(t, "POST", "/v1/models/x:generateContent") == ("gen", {"model": "x"}, True)
    assert found(t, "GET", "/v1/models/x:generateContent") == (
        "model",
        {"id": "x:generateContent"},
        True,
    )
    assert t.find("POST", "/v1/models/x") is None
    # The first refuses POST, the second serves it.
    assert found(t, "POST", "/v1/things/a") == ("things", {"id": "a"}, True)
    assert found(t, "DELETE", "/v1/things/a") == ("thing", {"id": "a"}, False)


# -- the shape of a path no route serves -------------------------------------------


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/messages/nope", Shape.ANTHROPIC),
        ("/v1/messages", Shape.ANTHROPIC),
        ("/v1/messages/batches/x/results", Shape.ANTHROPIC),
        ("/v1/responses/a/b", Shape.RESPONSES),
        ("/v1/responses/", Shape.RESPONSES),
        ("/v1/messagesx", Shape.CALLER),
        ("/v1/nothing", Shape.CALLER),
        ("/", Shape.CALLER),
        ("/api/hello", Shape.CALLER),
    ],
)
def test_an_unknown_path_takes_its_family_s_shape(path: str, shape: Shape) -> None:
    assert table().shape_of(path) == shape


def test_labels_default_to_the_pattern() -> None:
    t = table()
    labels = {e.pattern.template: e.label for e in t.endpoints}
    assert labels["/v1/chat/completions"] == "/v1/chat/completions"
    assert labels["/v1/responses/{id}"] == "stored"
