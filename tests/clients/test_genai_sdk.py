"""The google-genai SDK (Python) against ``flatgate gateway`` on loopback, in
front of the stub in every backend protocol (``every_backend``, each of its
``WAYS``): generate_content, generate_content_stream, a function-calling
round trip with automatic function calling off and on, an image part and
Gemini CLI's first request through each; count_tokens, embed_content,
models.list, errors (404, 400 naming the field, 429 with its retry) and
thought signatures round-tripped to a Gemini 3 model. Every server a
``flatgate`` subprocess."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from google import genai
from google.genai import errors, types

from tests.clients.every_backend import GENAI_KEY, WAYS, every_backend, model
from tests.clients.media import image_echo, png
from tests.edge.gemini.test_translate import gemini_cli_request
from tests.servers import Server

pytestmark = pytest.mark.integration

PNG = png()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with every_backend(tmp_path_factory.mktemp("genai")) as gateway:
        yield gateway


def client(gateway: Server, version: str | None = None) -> genai.Client:
    options = types.HttpOptions(
        base_url=gateway.url,
        api_version=version,
        retry_options=types.HttpRetryOptions(attempts=1),
    )
    return genai.Client(api_key=GENAI_KEY, http_options=options)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("version", [None, "v1beta"])
def test_generate_content(gateway: Server, way: str, version: str | None) -> None:
    c = client(gateway, version)
    answer = c.models.generate_content(
        model=model(way),
        contents="flatgate speaks gemini",
        config=types.GenerateContentConfig(temperature=0.2, top_k=4, max_output_tokens=64),
    )
    assert answer.text == "flatgate speaks gemini"
    assert answer.candidates and answer.candidates[0].finish_reason == types.FinishReason.STOP
    assert answer.usage_metadata and answer.usage_metadata.total_token_count


@pytest.mark.parametrize("way", WAYS)
def test_generate_content_stream(gateway: Server, way: str) -> None:
    c = client(gateway)
    chunks = list(c.models.generate_content_stream(model=model(way), contents="one two three four"))
    assert len(chunks) > 1
    assert "".join(c.text or "" for c in chunks) == "one two three four"
    assert chunks[-1].candidates and chunks[-1].candidates[0].finish_reason == "STOP"


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city
    """
    return f"sunny in {city}"


@pytest.mark.parametrize("way", WAYS)
def test_function_calling_round_trip_by_hand(gateway: Server, way: str) -> None:
    c = client(gateway)
    config = types.GenerateContentConfig(
        tools=[weather],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    first = c.models.generate_content(model=model(way), contents="Paris", config=config)
    assert first.function_calls, first
    call = first.function_calls[0]
    assert call.name == "weather" and call.args == {"city": "Paris"}
    assert first.candidates and first.candidates[0].content
    history = [
        types.Content(role="user", parts=[types.Part(text="Paris")]),
        first.candidates[0].content,
        types.Content(
            role="user",
            parts=[
                types.Part.from_function_response(
                    name="weather", response={"result": weather("Paris")}
                )
            ],
        ),
    ]
    second = c.models.generate_content(model=model(way), contents=history, config=config)
    assert second.text and not second.function_calls


@pytest.mark.parametrize("way", WAYS)
def test_automatic_function_calling(gateway: Server, way: str) -> None:
    c = client(gateway)
    answer = c.models.generate_content(
        model=model(way),
        contents="Oslo",
        config=types.GenerateContentConfig(tools=[weather]),
    )
    assert answer.text and not answer.function_calls
    history = answer.automatic_function_calling_history or []
    assert any(p.function_response for h in history for p in h.parts or ())


@pytest.mark.parametrize("way", WAYS)
def test_an_image_part(gateway: Server, way: str) -> None:
    c = client(gateway)
    answer = c.models.generate_content(
        model=model(way),
        contents=types.Content(
            role="user",
            parts=[
                types.Part.from_bytes(data=PNG, mime_type="image/png"),
                types.Part(text="what is this"),
            ],
        ),
    )
    # The stub says what image it was given.
    assert answer.text == f"{image_echo(PNG)} what is this"


def test_count_tokens(gateway: Server) -> None:
    c = client(gateway)
    counted = c.models.count_tokens(model="echo-fbs", contents="a few words to count")
    assert counted.total_tokens and counted.total_tokens > 0


@pytest.mark.parametrize("model", ["echo-openai", "vectors"])
def test_embed_content(gateway: Server, model: str) -> None:
    c = client(gateway)
    answer = c.models.embed_content(
        model=model,
        contents=[types.Content(parts=[types.Part(text=t)]) for t in ("one", "two")],
        config=types.EmbedContentConfig(output_dimensionality=8),
    )
    assert answer.embeddings and len(answer.embeddings) == 2
    assert all(e.values and len(e.values) == 8 for e in answer.embeddings)


def test_models_list_and_get(gateway: Server) -> None:
    c = client(gateway)
    names = [m.name for m in c.models.list()]
    assert "models/echo-fbs" in names and "models/limited" in names
    assert c.models.get(model="echo-gemini").name == "models/echo-gemini"


def test_errors(gateway: Server) -> None:
    c = client(gateway)
    with pytest.raises(errors.ClientError) as missing:
        c.models.generate_content(model="no-such-model", contents="x")
    assert (missing.value.code, missing.value.status) == (404, "NOT_FOUND")
    with pytest.raises(errors.ClientError) as bad:
        c.models.generate_content(
            model="echo-fbs",
            contents="x",
            config=types.GenerateContentConfig(candidate_count=2),
        )
    assert (bad.value.code, bad.value.status) == (400, "INVALID_ARGUMENT")
    assert "generationConfig.candidateCount" in (bad.value.message or "")
    with pytest.raises(errors.ClientError) as limited:
        c.models.generate_content(model="limited", contents="x")
    assert (limited.value.code, limited.value.status) == (429, "RESOURCE_EXHAUSTED")
    details = limited.value.details["error"]["details"]
    assert any(d.get("retryDelay") for d in details)


# Its thinkingConfig.includeThoughts is a Gemini-dialect extra: a gemini
# backend sends it, another names it (mapped to nothing).
@pytest.mark.parametrize("way", WAYS)
def test_gemini_clis_first_request_passes(gateway: Server, way: str) -> None:
    body = gemini_cli_request()
    url = f"{gateway.url}/v1beta/models/{model(way)}:streamGenerateContent?alt=sse"
    r = httpx.post(url, json=body, headers={"x-goog-api-key": GENAI_KEY}, timeout=30)
    assert r.status_code == 200, r.text
    events = [e for e in r.text.split("\r\n\r\n") if e]
    assert json.loads(events[-1].removeprefix("data: "))["candidates"][0]["finishReason"] == "STOP"


@pytest.mark.parametrize("stream", [False, True])
def test_thought_signatures_round_trip_to_gemini_3(gateway: Server, stream: bool) -> None:
    c = client(gateway)
    config = types.GenerateContentConfig(
        tools=[weather],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    if stream:
        chunks = list(
            c.models.generate_content_stream(model="signed", contents="Rome", config=config)
        )
        contents = [ch.candidates[0].content for ch in chunks if ch.candidates]
        parts = [p for content in contents if content for p in content.parts or ()]
        model_turn = types.Content(role="model", parts=parts)
    else:
        first = c.models.generate_content(model="signed", contents="Rome", config=config)
        assert first.candidates and first.candidates[0].content
        model_turn = first.candidates[0].content
    calls = [p for p in model_turn.parts or () if p.function_call]
    assert calls and calls[0].thought_signature, model_turn
    history = [
        types.Content(role="user", parts=[types.Part(text="Rome")]),
        model_turn,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="weather", response={"result": "sunny"})],
        ),
    ]
    # The stub refuses the call if its signature did not come back.
    second = c.models.generate_content(model="signed", contents=history, config=config)
    assert second.text
