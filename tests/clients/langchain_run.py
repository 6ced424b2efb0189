"""LangChain's ``OpenAIEmbeddings`` against a gateway, for
``test_langchain_embeddings``: run by ``.venv/langchain/bin/python`` (its own
pinned environment, ``tests/clients/requirements-langchain.txt``), never
imported by the tests, which read the JSON report it prints on stdout.

Usage: ``langchain_run.py SPEC``, SPEC a JSON object: ``base_url``,
``api_key``, ``request_id``, ``model``, ``texts``, ``query``, ``dimensions``
and ``runs``, the names of the runs to make, each of ``RUNS``:

- ``default``: ``check_embedding_ctx_length=False`` (the texts sent as
  they are), ``embed_documents(texts)`` then ``embed_query(query)``;
- ``float``: the same, with ``encoding_format: "float"`` (``model_kwargs``);
- ``dimensions``: the same, with ``dimensions=`` SPEC's;
- ``async``: the same as ``default``, through ``aembed_documents`` and
  ``aembed_query`` (LangChain's async client);
- ``tokens``: LangChain's default, ``check_embedding_ctx_length=True``:
  it tokenizes each text with tiktoken and sends token-id lists.

Hermetic: tiktoken downloads its encodings from the network on first use.
Its one download function (``tiktoken.load.read_file``) is replaced by one
that records the URL and raises, and ``TIKTOKEN_CACHE_DIR`` (set by the
test) is an empty directory, so a download attempt shows in the report and
fails the run. ``tiktoken.encoding_for_model`` and ``get_encoding`` (what
LangChain calls) are replaced by a byte-level encoding built here (each
UTF-8 byte one token: its value), recording the names asked: the
``tokens`` run uses it, and the others must ask for none.

Each run's requests carry ``x-request-id: REQUEST_ID-<run>``; its report
holds the vectors LangChain returned (``documents``, ``query``), the JSON
bodies it sent (``sent``), the encodings it asked tiktoken for (``asked``)
and the downloads tried (``downloads``), or ``error`` (the status, code and
type of the API error it raised). One process: LangChain takes a second or
two to import.
"""

# LangChain lives in its own environment, not in the one mypy reads:
# mypy: disable-error-code="import-not-found,import-untyped"

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import openai
import tiktoken
import tiktoken.load
from langchain_openai import OpenAIEmbeddings

RUNS = ("default", "float", "dimensions", "async", "tokens")

asked: list[str] = []
downloads: list[str] = []


def _no_download(blobpath: str) -> bytes:
    downloads.append(blobpath)
    raise RuntimeError(f"tiktoken tried to download {blobpath}: the test is offline")


_BYTES = tiktoken.Encoding(
    name="flatgate-bytes",
    pat_str=r"\S+|\s+",
    mergeable_ranks={bytes([i]): i for i in range(256)},
    special_tokens={},
)


def _encoding(name: str) -> tiktoken.Encoding:
    asked.append(name)
    return _BYTES


tiktoken.load.read_file = _no_download
tiktoken.encoding_for_model = _encoding
tiktoken.get_encoding = _encoding


def _recorder(sent: list[Any]) -> Any:
    def record(request: Any) -> None:
        sent.append({"path": request.url.path, "body": json.loads(request.content)})

    return record


def _arecorder(sent: list[Any]) -> Any:
    record = _recorder(sent)

    async def arecord(request: Any) -> None:
        record(request)

    return arecord


async def run(spec: dict[str, Any], name: str) -> dict[str, Any]:
    sent: list[Any] = []
    asked.clear()
    downloads.clear()
    http_client = openai.DefaultHttpxClient(event_hooks={"request": [_recorder(sent)]})
    http_async_client = openai.DefaultAsyncHttpxClient(event_hooks={"request": [_arecorder(sent)]})
    options: dict[str, Any] = {}
    if name == "float":
        options["model_kwargs"] = {"encoding_format": "float"}
    if name == "dimensions":
        options["dimensions"] = spec["dimensions"]
    embeddings = OpenAIEmbeddings(
        model=spec["model"],
        base_url=spec["base_url"],
        api_key=spec["api_key"],
        max_retries=0,
        default_headers={"x-request-id": f"{spec['request_id']}-{name}"},
        check_embedding_ctx_length=name == "tokens",
        http_client=http_client,
        http_async_client=http_async_client,
        **options,
    )
    report: dict[str, Any] = {}
    try:
        if name == "async":
            report["documents"] = await embeddings.aembed_documents(spec["texts"])
            report["query"] = await embeddings.aembed_query(spec["query"])
        else:
            report["documents"] = embeddings.embed_documents(spec["texts"])
            report["query"] = embeddings.embed_query(spec["query"])
    except openai.APIStatusError as exc:
        report["error"] = {"status": exc.status_code, "code": exc.code, "type": exc.type}
    finally:
        http_client.close()
        await http_async_client.aclose()
    return {**report, "sent": sent, "asked": list(asked), "downloads": list(downloads)}


async def every(spec: dict[str, Any]) -> dict[str, Any]:
    return {name: await run(spec, name) for name in spec["runs"]}


def main(argv: list[str]) -> None:
    (text,) = argv
    spec = json.loads(text)
    unknown = set(spec["runs"]) - set(RUNS)
    if unknown:
        raise SystemExit(f"unknown runs: {sorted(unknown)}")
    print(json.dumps(asyncio.run(every(spec))))


if __name__ == "__main__":
    main(sys.argv[1:])
