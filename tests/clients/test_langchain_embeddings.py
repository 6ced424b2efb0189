"""LangChain's ``OpenAIEmbeddings`` through the gateway's ``/v1/embeddings``
to the stub, in each backend protocol that serves embeddings: the vectors
it returns are the stub's, bit for bit, for what it sent.

LangChain lives in its own pinned environment (``.venv/langchain``, from
``tests/clients/requirements-langchain.txt``; ``make test`` installs it) and
runs ``langchain_run.py`` there as a subprocess, with no network: tiktoken's
downloads are refused there (and ``TIKTOKEN_CACHE_DIR`` is an empty
directory), and its encodings are a byte-level one of the script's own (see
that script for the runs).

What LangChain sends, checked here from the bodies it recorded:
``check_embedding_ctx_length=False`` sends the texts as they are, with no
``encoding_format`` of its own, so the openai SDK under it asks for base64
and decodes it; ``model_kwargs`` can ask for ``float``; ``dimensions=`` is
carried; and its default (``True``) tokenizes with tiktoken and sends
token-id lists, which the gateway carries as token ids.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from array import array
from pathlib import Path
from typing import Any

import pytest

from flatgate.proxy.stub.embeddings import DEFAULT_DIMENSIONS, EMBEDDINGS, EmbeddingsAsk
from tests.clients.conftest import PROTOCOLS, ROOT, ClientStack, model

pytestmark = pytest.mark.integration

PYTHON = ROOT / ".venv" / "langchain" / "bin" / "python"
SCRIPT = ROOT / "tests" / "clients" / "langchain_run.py"
KEY = "sk-flatgate-acme"
TENANT = "acme"
# Non-ASCII too: the texts are the stub's seeds as UTF-8 (and, in the
# ``tokens`` run, the token ids, one per byte).
TEXTS = ["the quick brown fox", "jumps over the lazy dog", "héllo, wörld ✓"]
QUERY = "what does the fox jump over"
DIMENSIONS = 64
RUNS = ("default", "float", "dimensions", "async", "tokens")
EMBEDDING = tuple(p for p in PROTOCOLS if p in EMBEDDINGS)

Reports = dict[str, dict[str, Any]]


def stub_vectors(
    texts: tuple[str, ...] = (),
    tokens: tuple[tuple[int, ...], ...] = (),
    dimensions: int = DEFAULT_DIMENSIONS,
) -> list[list[float]]:
    """The stub's vectors for these inputs, as the floats a client reads."""
    ask = EmbeddingsAsk("", "", texts, tokens, dimensions)
    floats = array("f")
    floats.frombytes(ask.values())
    if sys.byteorder == "big":
        floats.byteswap()
    every = floats.tolist()
    return [every[i : i + dimensions] for i in range(0, len(every), dimensions)]


def utf8_ids(text: str) -> list[int]:
    """The script's byte-level encoding of ``text``."""
    return list(text.encode())


def run_langchain(
    stack: ClientStack, cache: Path, request_id: str, name: str, runs: tuple[str, ...]
) -> Reports:
    if not PYTHON.exists():
        raise RuntimeError(f"{PYTHON} is missing: `make test` installs it")
    spec = {
        "base_url": stack.base_url,
        "api_key": KEY,
        "request_id": request_id,
        "model": name,
        "texts": TEXTS,
        "query": QUERY,
        "dimensions": DIMENSIONS,
        "runs": runs,
    }
    done = subprocess.run(
        [str(PYTHON), str(SCRIPT), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "TIKTOKEN_CACHE_DIR": str(cache)},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    reports: Reports = json.loads(done.stdout.splitlines()[-1])
    assert list(reports) == list(runs)
    assert not any(cache.iterdir())  # nothing was fetched into tiktoken's cache
    return reports


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[str, Reports]]:
    """Each protocol's request id and reports, made by the first test that needs them."""
    return {}


def reports_of(
    stack: ClientStack,
    runs: dict[str, tuple[str, Reports]],
    tmp_path_factory: pytest.TempPathFactory,
    protocol: str,
) -> tuple[str, Reports]:
    if protocol not in runs:
        rid = f"langchain-{uuid.uuid4().hex}"
        cache = tmp_path_factory.mktemp("tiktoken")
        runs[protocol] = (rid, run_langchain(stack, cache, rid, model(protocol), RUNS))
    return runs[protocol]


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("protocol", EMBEDDING)
def test_langchain_gets_the_stubs_vectors(
    stack: ClientStack,
    runs: dict[str, tuple[str, Reports]],
    tmp_path_factory: pytest.TempPathFactory,
    protocol: str,
    run: str,
) -> None:
    name = model(protocol)
    rid, reports = reports_of(stack, runs, tmp_path_factory, protocol)
    report = reports[run]
    assert "error" not in report, report.get("error")
    assert report["downloads"] == []
    dimensions = DIMENSIONS if run == "dimensions" else DEFAULT_DIMENSIONS
    if run == "tokens":
        # Tokenized by tiktoken (the script's encoding), sent as token ids.
        assert report["asked"] == [name] * 2
        inputs: list[Any] = [[utf8_ids(t) for t in TEXTS], [utf8_ids(QUERY)]]
        want = stub_vectors(tokens=tuple(tuple(utf8_ids(t)) for t in (*TEXTS, QUERY)))
    else:
        assert report["asked"] == []  # check_embedding_ctx_length=False: no tokenizer
        inputs = [TEXTS, [QUERY]]
        want = stub_vectors(texts=(*TEXTS, QUERY), dimensions=dimensions)
    # What LangChain sent: one request for the documents, one for the query.
    fields: dict[str, Any] = {"model": name}
    if run == "dimensions":
        fields["dimensions"] = DIMENSIONS
    fields["encoding_format"] = "float" if run == "float" else "base64"
    assert report["sent"] == [
        {"path": "/v1/embeddings", "body": {"input": sent, **fields}} for sent in inputs
    ]
    # What it returned: the stub's vectors for those inputs, in order, exactly.
    assert [len(v) for v in report["documents"]] == [dimensions] * len(TEXTS)
    assert len(report["query"]) == dimensions
    assert report["documents"] == want[:-1]
    assert report["query"] == want[-1]
    assert len({tuple(v) for v in want}) == len(want)  # one vector per input
    # Through the gateway: its access log has both requests, for the tenant.
    entries = stack.access(lambda e: bool(e["request_id"] == f"{rid}-{run}"), 2)
    assert [(e["path"], e["status"]) for e in entries] == [("/v1/embeddings", 200)] * 2
    assert [(e["tenant"], e["model"]) for e in entries] == [(TENANT, name)] * 2


def test_an_anthropic_route_refuses_langchain(
    stack: ClientStack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cache = tmp_path_factory.mktemp("tiktoken")
    rid = f"langchain-{uuid.uuid4().hex}"
    report = run_langchain(stack, cache, rid, model("anthropic"), ("default",))["default"]
    assert report["error"] == {
        "status": 400,
        "code": "embeddings_unsupported",
        "type": "invalid_request_error",
    }
    assert len(report["sent"]) == 1 and "documents" not in report
