"""Azure's documented answers (``golden/``, sources in its README) through
the ``openai`` and ``openai-responses`` adapters configured for Azure: text,
finish reasons (a content filter's ``CONTENT_FILTER``, which each client API
renders its own way), the annotations Azure adds ignored, and a filtered
prompt's 400 a refusal naming the categories filtered."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from flatgate.proxy.backends.base import RefusalKind
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.azure import openai_adapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.responses.adapter import ResponsesAdapter, responses_adapter
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.wire.chunk.frames import Chunk
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import config_of, content, final, per_event, run, terminals

GOLDEN = Path(__file__).parent / "golden"
ENDPOINT = "https://contoso.openai.azure.com"
AZURE = {"url": ENDPOINT, "auth": "api-key", "api_key": "k", "azure_api_version": "2024-10-21"}


def chat_backend(**entry: str) -> OpenAIAdapter:
    return openai_adapter(cast(OpenAIConfig, config_of({"protocol": "openai", **entry})))


CHAT = chat_backend(name="az", **AZURE)
RESPONSES = responses_adapter(
    cast(ResponsesConfig, config_of({"name": "az", "protocol": "openai-responses", **AZURE}))
)
PLAIN = chat_backend(name="o", url="https://api.openai.com/v1")


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def streamed(adapter: OpenAIAdapter | ResponsesAdapter, name: str) -> list[list[Chunk]]:
    """The file's chunks, read whole and one event per read (the same answer)."""
    data = golden(name)
    return [
        run(adapter.translator("rid", "configured"), [data]),
        run(adapter.translator("rid", "configured"), per_event(data)),
    ]


def whole(adapter: OpenAIAdapter | ResponsesAdapter, name: str) -> list[Chunk]:
    return run(adapter.translator("rid", "configured", whole=True), [golden(name)])


# -- Chat Completions ------------------------------------------------------------


def test_a_stream_that_passes_the_asynchronous_filter() -> None:
    for chunks in streamed(CHAT, "chat_stream_async_filter_passes.sse"):
        assert content(chunks) == "Color is a"
        end = final(chunks)
        assert end.finish_reason == FinishReason.STOP
        assert {c.model for c in chunks} == {"gpt-35-turbo"}


def test_a_stream_the_filter_blocks_ends_content_filter() -> None:
    for chunks in streamed(CHAT, "chat_stream_async_filter_blocked.sse"):
        assert content(chunks) == "Hey Jude, better"
        assert final(chunks).finish_reason == FinishReason.CONTENT_FILTER
        assert len(terminals(chunks)) == 1


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("chat_completion_annotations.json", "Example model response will be returned "),
        (
            "chat_completion_reference.json",
            "Ahoy matey! So ye be wantin' to care for a fine squawkin' parrot, eh?",
        ),
    ],
)
def test_whole_answers_with_azures_annotations(name: str, text: str) -> None:
    chunks = whole(CHAT, name)
    assert content(chunks) == text
    assert final(chunks).finish_reason == FinishReason.STOP
    assert final(chunks).usage is not None


def test_a_filtered_choice_among_several() -> None:
    chunks = whole(CHAT, "chat_completion_choices_filtered.json")
    ends = {c.index: c.finish_reason for c in chunks if c.finish_reason}
    assert ends == {0: FinishReason.LENGTH, 1: FinishReason.CONTENT_FILTER}
    assert content(chunks, 0) == "returned text 1"
    assert content(chunks, 1) == "returned text 2"


def test_an_answer_the_filter_did_not_run_on_is_the_answer() -> None:
    chunks = whole(CHAT, "chat_completion_filter_not_run.json")
    assert content(chunks) == "generated text"
    assert final(chunks).finish_reason == FinishReason.LENGTH


# -- a filtered prompt: Azure's 400 -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("error_prompt_filtered_400.json", "(self_harm (medium))"),
        (
            "error_prompt_filtered_docs_400.json",
            "(hate (high), self-harm (high), violence (medium))",
        ),
        (
            "error_prompt_filtered_minimal_400.json",
            "(no category named): The response was filtered",
        ),
    ],
)
@pytest.mark.parametrize("adapter", [CHAT, RESPONSES], ids=["openai", "openai-responses"])
def test_a_filtered_prompt_is_a_400_naming_the_categories(
    adapter: OpenAIAdapter | ResponsesAdapter, name: str, named: str
) -> None:
    refusal = adapter.refusal(400, {}, golden(name))
    assert refusal.kind is RefusalKind.REJECTED
    assert refusal.status == 400
    assert refusal.message.startswith("Azure's content filter refused the prompt (")
    assert named in refusal.message


def test_the_categories_not_filtered_are_not_named() -> None:
    message = CHAT.refusal(400, {}, golden("error_prompt_filtered_400.json")).message
    for calm in ("hate", "jailbreak", "sexual", "violence"):
        assert calm not in message.split(":")[0]


def test_the_responses_apis_content_filters_are_read_too() -> None:
    # Constructed: the Responses API's error with Azure's content_filters entries.
    body = (
        b'{"error":{"message":"The response was filtered","type":"invalid_request_error",'
        b'"param":"prompt","code":"content_filter","content_filters":[{"blocked":true,'
        b'"source_type":"prompt","content_filter_results":{"jailbreak":{"detected":true,'
        b'"filtered":true},"hate":{"filtered":false,"severity":"safe"}}}]}}'
    )
    refusal = RESPONSES.refusal(400, {}, body)
    assert refusal.message.startswith("Azure's content filter refused the prompt (jailbreak)")


def test_another_400_and_another_backend_keep_the_common_refusal() -> None:
    other = b'{"error":{"message":"max_tokens is too large","type":"invalid_request_error"}}'
    assert CHAT.refusal(400, {}, other).message == "max_tokens is too large"
    filtered = golden("error_prompt_filtered_400.json")
    assert PLAIN.refusal(400, {}, filtered).message.startswith("The response was filtered")
    assert CHAT.refusal(429, {"retry-after": "3"}, filtered).kind is RefusalKind.RATE_LIMITED


# -- the Responses API ---------------------------------------------------------------


def test_a_response_incomplete_for_the_content_filter() -> None:
    chunks = whole(RESPONSES, "responses_incomplete_content_filter.json")
    assert content(chunks) == "Hey Jude, don't make it bad"
    assert final(chunks).finish_reason == FinishReason.CONTENT_FILTER
    for chunks in streamed(RESPONSES, "responses_stream_incomplete_content_filter.sse"):
        assert content(chunks) == "Hey Jude, don't make it bad"
        assert final(chunks).finish_reason == FinishReason.CONTENT_FILTER
