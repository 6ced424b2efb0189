"""``flatgate stub --protocol gemini`` and ``--protocol vertex`` (Google's
publisher) spoken to by a client nobody here wrote: google-genai, with an
API key for the Gemini API, and in its Vertex AI mode with an access token;
an image, a forged thought signature refused, embeddings, Google's refusals."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any, cast

import pytest
from google import genai
from google.genai import errors, types

from tests.servers import Server
from tests.stub.helpers import stub

pytestmark = pytest.mark.integration

KEY = "gemini-stub-key"


@pytest.fixture(scope="module")
def gemini(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("gemini", tmp_path_factory.mktemp("gemini-stub"), "--api-key", KEY) as s:
        yield s


@pytest.fixture(scope="module")
def vertex(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("vertex", tmp_path_factory.mktemp("vertex-stub"), "--api-key", KEY) as s:
        yield s


_OPEN: list[genai.Client] = []


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    """Each test's clients closed at its end."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def _client(server: Server, key: str = KEY) -> genai.Client:
    made = genai.Client(
        api_key=key,
        http_options=types.HttpOptions(base_url=server.url, retry_options=None),
    )
    _OPEN.append(made)
    return made


def _vertex(server: Server, token: str = KEY + ".7") -> genai.Client:
    from google.oauth2.credentials import Credentials

    made = genai.Client(
        vertexai=True,
        project="test-project",
        location="us-central1",
        credentials=Credentials(token=token),
        http_options=types.HttpOptions(base_url=server.url),
    )
    _OPEN.append(made)
    return made


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _turn() -> list[types.Content]:
    """A user's text and an image (google-genai writes inline data's
    ``mime_type`` in proto JSON's snake_case, which Google takes too)."""
    return [
        types.Content(
            role="user",
            parts=[
                types.Part.from_text(text="hello gemini"),
                types.Part.from_bytes(data=PNG, mime_type="image/png"),
            ],
        )
    ]


def test_generate_content_whole_and_streamed(gemini: Server) -> None:
    client = _client(gemini)
    whole = client.models.generate_content(model="gemini-2.5-flash", contents=_turn())
    assert whole.text is not None
    assert whole.text.startswith("hello gemini [image image/png 70 bytes sha256:")
    assert whole.candidates and whole.candidates[0].finish_reason == types.FinishReason.STOP
    streamed = "".join(
        c.text or ""
        for c in client.models.generate_content_stream(model="gemini-2.5-flash", contents=_turn())
    )
    assert streamed == whole.text


def test_a_function_call_is_signed_and_a_forged_signature_refused(gemini: Server) -> None:
    """Gemini 3 signs its function calls and checks the signature on the
    first call of the current turn when it comes back: a forged one is a 400.
    (The round trip of a good one is the gateway's tests': google-genai
    writes it in URL-safe base64, which the stub's check of a signature
    (``stub_wire``) does not take yet.)"""
    client = _client(gemini)
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="weather", parameters_json_schema={"type": "object", "properties": {
            "city": {"type": "string"}}, "required": ["city"]})])  # fmt: skip
    config = types.GenerateContentConfig(
        tools=[tool],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["weather"]
            )
        ),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    turn = [types.Content(role="user", parts=[types.Part.from_text(text="weather in Paris?")])]
    first = client.models.generate_content(
        model="gemini-3-pro-preview", contents=turn, config=config
    )
    assert first.candidates and first.candidates[0].content
    [call] = first.candidates[0].content.parts or []
    assert call.function_call is not None and call.function_call.name == "weather"
    assert call.function_call.args == {"input": "weather in Paris?"}  # the stub's forced call
    assert call.thought_signature
    forged = first.candidates[0].content.model_copy(deep=True)
    assert forged.parts
    forged.parts[0].thought_signature = b"forged"
    with pytest.raises(errors.ClientError) as refused:
        client.models.generate_content(
            model="gemini-3-pro-preview", contents=[*turn, forged, _result()]
        )
    assert refused.value.code == 400


def _result() -> types.Content:
    part = types.Part.from_function_response(name="weather", response={"temp": 21})
    return types.Content(role="user", parts=[part])


def test_embeddings_one_and_many(gemini: Server) -> None:
    client = _client(gemini)
    one = client.models.embed_content(
        model="gemini-embedding-001",
        contents="a parrot",
        config=types.EmbedContentConfig(output_dimensionality=8),
    )
    assert one.embeddings and len(one.embeddings[0].values or []) == 8
    many = client.models.embed_content(
        model="gemini-embedding-001",
        contents=cast(Any, ["a parrot", "a cage"]),
        config=types.EmbedContentConfig(output_dimensionality=8),
    )
    assert many.embeddings and [len(e.values or []) for e in many.embeddings] == [8, 8]
    assert many.embeddings[0].values == one.embeddings[0].values


def test_a_wrong_key_and_a_rate_limit(gemini: Server) -> None:
    wrong_key = _client(gemini, "not-the-key")
    with pytest.raises(errors.ClientError) as wrong:
        wrong_key.models.generate_content(model="m", contents="x")
    assert wrong.value.code == 400 and "API key not valid" in str(wrong.value)
    client = _client(gemini)
    with pytest.raises(errors.ClientError) as limited:
        client.models.generate_content(model="m@rate_limit", contents="x")
    assert limited.value.code == 429 and limited.value.status == "RESOURCE_EXHAUSTED"
    assert limited.value.details["error"]["details"][0]["retryDelay"] == "2s"


def test_vertex_s_google_publisher_with_a_token(vertex: Server) -> None:
    client = _vertex(vertex)
    whole = client.models.generate_content(model="gemini-2.5-flash", contents=_turn())
    assert whole.text and whole.text.startswith("hello gemini [image image/png 70 bytes")
    streamed = "".join(
        c.text or ""
        for c in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents="hi there"
        )
    )
    assert streamed == "hi there"
    wrong = _vertex(vertex, token="wrong")
    with pytest.raises(errors.ClientError) as refused:
        wrong.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert refused.value.code == 401 and refused.value.status == "UNAUTHENTICATED"
