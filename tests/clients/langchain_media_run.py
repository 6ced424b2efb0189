"""LangChain's chat models with image and file content blocks against a
gateway, for ``test_langchain_media``: run by ``.venv/langchain/bin/python``
(its own pinned environment, ``tests/clients/requirements-langchain.txt``),
never imported by the tests, which read the JSON report it prints on stdout.

Usage: ``langchain_media_run.py SPEC``, SPEC a JSON object: ``base_url``
(the gateway's, without ``/v1``), ``api_key``, ``prompt``, ``image`` and
``pdf`` (base64) and ``runs``, a list of ``{id, chat, model, blocks}``:
``chat`` one of ``CHATS`` (``openai``: ``ChatOpenAI`` on Chat Completions,
``openai-responses``: ``ChatOpenAI(use_responses_api=True)``,
``anthropic``: ``ChatAnthropic``), ``blocks`` one of ``BLOCKS``:

- ``standard``: LangChain's own content blocks, which each chat model turns
  into its provider's shape: ``{"type": "image", "base64", "mime_type"}``
  and ``{"type": "file", "base64", "mime_type", "filename"}`` (a PDF);
- ``openai``: the OpenAI Chat Completions shape, ``image_url`` with a
  ``data:`` URL, as LangChain's docs show it for ``ChatOpenAI``.

Each run is one ``invoke`` of one ``HumanMessage``: the prompt's text
block, then the blocks. Its report is ``{"text"}`` (the answer's text) or
``{"error"}`` (the exception's type and message).
"""

# LangChain lives in its own environment, not in the one mypy reads:
# mypy: disable-error-code="import-not-found,import-untyped"

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_anthropic import ChatAnthropic
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

CHATS = ("openai", "openai-responses", "anthropic")
BLOCKS = ("standard", "openai")


def chat_model(spec: dict[str, Any], chat: str, model: str) -> Any:
    if chat == "anthropic":
        return ChatAnthropic(
            model=model, base_url=spec["base_url"], api_key=spec["api_key"], max_retries=0
        )
    return ChatOpenAI(
        model=model,
        base_url=f"{spec['base_url']}/v1",
        api_key=spec["api_key"],
        max_retries=0,
        use_responses_api=chat == "openai-responses",
    )


def blocks_of(spec: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    if kind == "openai":
        url = f"data:image/png;base64,{spec['image']}"
        return [{"type": "image_url", "image_url": {"url": url}}]
    return [
        {"type": "image", "base64": spec["image"], "mime_type": "image/png"},
        {
            "type": "file",
            "base64": spec["pdf"],
            "mime_type": "application/pdf",
            "filename": "paper.pdf",
        },
    ]


def run(spec: dict[str, Any], one: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "text", "text": spec["prompt"]}, *blocks_of(spec, one["blocks"])]
    try:
        answer = chat_model(spec, one["chat"], one["model"]).invoke([HumanMessage(content)])
    except Exception as exc:  # the report says what failed
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"text": answer.text}


def main(argv: list[str]) -> None:
    (text,) = argv
    spec = json.loads(text)
    print(json.dumps({one["id"]: run(spec, one) for one in spec["runs"]}))


if __name__ == "__main__":
    main(sys.argv[1:])
