"""The stub's ``POST /v1/embeddings`` (fbs and OpenAI protocols), over real
sockets: raw httpx, the official openai SDK, the backend adapters, faults."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.fbs.adapter import FbsAdapter
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.embeddings import (
    Embeddings,
    read_embedding_request,
    read_embedding_response,
    write_embedding_request,
)
from flatgate.proxy.wire.schema import FLATBUFFERS
from tests.servers import Server
from tests.stub.helpers import stream_raw, stub

pytestmark = pytest.mark.integration

FBS_HEADERS = {"content-type": FLATBUFFERS, "accept": FLATBUFFERS}
KEY = "sk-embed"


@pytest.fixture(scope="module")
def fbs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("fbs", tmp_path_factory.mktemp("fbs-embed")) as s:
        yield s


@pytest.fixture(scope="module")
def oai(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("openai", tmp_path_factory.mktemp("openai-embed")) as s:
        yield s


_clients: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def client(server: Server, key: str = "unused", timeout: float = 10) -> openai.OpenAI:
    c = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=timeout)
    _clients.append(c)
    return c


def post_fbs(server: Server, body: bytes) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/embeddings", content=body, headers=FBS_HEADERS)


def fbs_embeddings(server: Server, body: bytes) -> Embeddings:
    r = post_fbs(server, body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == FLATBUFFERS
    return read_embedding_response(r.content)


def post_json(server: Server, doc: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/embeddings", json=doc, headers=headers)


# -- fbs -----------------------------------------------------------------------


def test_fbs_answers_one_vector_per_input_default_1536(fbs: Server) -> None:
    e = fbs_embeddings(fbs, write_embedding_request("emb", texts=["a b c", "d"], request_id="r1"))
    assert (e.request_id, e.model, e.count, e.dimensions) == ("r1", "emb", 2, 1536)
    assert (e.prompt_tokens, e.total_tokens) == (4, 4)
    values = np.frombuffer(e.values, dtype="<f4")
    assert values.size == 2 * 1536
    assert np.all((np.abs(values) >= 0.5) & (np.abs(values) < 1))
    assert bytes(e.vector(0)) != bytes(e.vector(1))


def test_fbs_vectors_are_deterministic_per_input_and_dimension(fbs: Server) -> None:
    one = fbs_embeddings(fbs, write_embedding_request("m", texts=["x y", "z"], dimensions=8))
    again = fbs_embeddings(fbs, write_embedding_request("other", texts=["z"], dimensions=8))
    assert one.dimensions == 8
    assert bytes(again.vector(0)) == bytes(one.vector(1))
    wider = fbs_embeddings(fbs, write_embedding_request("m", texts=["z"], dimensions=9))
    assert wider.dimensions == 9 and bytes(wider.vector(0))[:32] != bytes(one.vector(1))


def test_fbs_token_ids_count_as_prompt_tokens(fbs: Server) -> None:
    e = fbs_embeddings(fbs, write_embedding_request("m", tokens=[[1, 2, 3], [9]], dimensions=4))
    assert (e.count, e.dimensions, e.prompt_tokens) == (2, 4, 4)


def test_fbs_refuses_a_bad_buffer_and_other_methods(fbs: Server) -> None:
    r = post_fbs(fbs, b"\x00" * 32)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == codes.MALFORMED_REQUEST.code
    r = httpx.get(f"{fbs.url}/v1/embeddings")
    assert r.status_code == 405


def test_fbs_stats_see_the_body_the_proxy_forwarded(fbs: Server) -> None:
    body = write_embedding_request("m", texts=["seen"], dimensions=2)
    before = httpx.get(f"{fbs.url}/stats").json()
    fbs_embeddings(fbs, body)
    stats = httpx.get(f"{fbs.url}/stats").json()
    assert stats["last_body_sha256"] == hashlib.sha256(body).hexdigest()
    assert stats["completed"] == before["completed"] + 1


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        ("fail", 503, codes.BACKEND_UNAVAILABLE.code),
        ("rate_limit", 429, codes.BACKEND_RATE_LIMITED.code),
        ("reject", 400, codes.INVALID_REQUEST.code),
        ("error", 500, codes.INTERNAL_ERROR.code),
    ],
)
def test_fbs_faults_by_model_suffix(fbs: Server, fault: str, status: int, code: str) -> None:
    r = post_fbs(fbs, write_embedding_request(f"m@{fault}", texts=["x"]))
    assert (r.status_code, r.json()["error"]["code"]) == (status, code)
    if fault == "rate_limit":
        assert r.headers["retry-after"] == "1"


def test_fbs_die_hang_and_stall(fbs: Server) -> None:
    url = f"{fbs.url}/v1/embeddings"

    def ask(model: str, timeout: float = 5) -> tuple[int, bytes, str]:
        body = write_embedding_request(model, texts=["x"], dimensions=64)
        return stream_raw(url, body, FBS_HEADERS, timeout)

    status, data, ended = ask("m@die")
    assert (status, ended) == (200, "RemoteProtocolError") and 0 < len(data) < 300
    assert ask("m@hang", timeout=1) == (200, b"", "ReadTimeout")
    assert ask("m@stall", timeout=1) == (0, b"", "ReadTimeout")


# -- openai: raw ---------------------------------------------------------------


def test_openai_float_by_default_in_openais_shape(oai: Server) -> None:
    r = post_json(oai, {"model": "emb-1", "input": ["hello world", "x"], "dimensions": 3})
    assert r.status_code == 200
    doc = r.json()
    assert doc["object"] == "list" and doc["model"] == "emb-1"
    assert doc["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert [(d["object"], d["index"], len(d["embedding"])) for d in doc["data"]] == [
        ("embedding", 0, 3),
        ("embedding", 1, 3),
    ]
    assert all(isinstance(v, float) for v in doc["data"][0]["embedding"])


def test_openai_base64_is_the_same_vectors_as_float_and_as_fbs(oai: Server, fbs: Server) -> None:
    doc = {"model": "m", "input": "one text", "dimensions": 16}
    floats = post_json(oai, doc).json()["data"][0]["embedding"]
    b64 = post_json(oai, {**doc, "encoding_format": "base64"}).json()["data"][0]["embedding"]
    raw = base64.b64decode(b64)
    assert np.array_equal(np.frombuffer(raw, dtype="<f4"), np.array(floats, dtype="<f4"))
    e = fbs_embeddings(fbs, write_embedding_request("m", texts=["one text"], dimensions=16))
    assert bytes(e.values) == raw


@pytest.mark.parametrize(
    ("doc", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": ""}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": ["a", ""]}, "input[1]"),
        ({"model": "m", "input": [[1], []]}, "input[1]"),
        ({"model": "m", "input": [1, -2]}, "input[1]"),
        ({"model": "m", "input": [1, "a"]}, "input[1]"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "m", "input": "x", "dimensions": 0}, "dimensions"),
        ({"model": "m", "input": "x", "dimensions": 16385}, "dimensions"),
        ({"model": "m", "input": ["x"] * 2049}, "input"),
    ],
)
def test_openai_refuses_what_openai_refuses(oai: Server, doc: dict[str, Any], param: str) -> None:
    r = post_json(oai, doc)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_openai_key_is_checked(tmp_path: Path) -> None:
    with stub("openai", tmp_path, "--api-key", KEY) as s:
        doc = {"model": "m", "input": "x", "dimensions": 2}
        assert post_json(s, doc).status_code == 401
        assert post_json(s, doc, authorization=f"Bearer {KEY}").status_code == 200


def test_the_responses_stub_serves_embeddings_as_openai_does(tmp_path: Path, oai: Server) -> None:
    doc = {"model": "m", "input": ["x", "y z"], "dimensions": 4, "encoding_format": "base64"}
    with stub("openai-responses", tmp_path) as s:
        r = post_json(s, doc)
        assert r.status_code == 200
        assert r.json() == post_json(oai, doc).json()


def test_anthropic_stub_has_no_embeddings(tmp_path: Path) -> None:
    with stub("anthropic", tmp_path) as s:
        r = post_json(s, {"model": "m", "input": "x"}, **{"anthropic-version": "2023-06-01"})
        assert r.status_code == 404


def test_a_fault_for_every_request(tmp_path: Path) -> None:
    with stub("openai", tmp_path, "--fault", "fail") as s:
        r = post_json(s, {"model": "m", "input": "x"})
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"


# -- openai: the SDK -----------------------------------------------------------


def test_sdk_default_base64_and_float_agree(oai: Server) -> None:
    c = client(oai).embeddings
    default = c.create(model="emb-1", input=["alpha beta", "gamma"])
    floats = c.create(model="emb-1", input=["alpha beta", "gamma"], encoding_format="float")
    assert default.model == "emb-1" and default.object == "list"
    assert [d.index for d in default.data] == [0, 1]
    assert len(default.data[0].embedding) == 1536
    assert [d.embedding for d in default.data] == [d.embedding for d in floats.data]
    assert default.usage.prompt_tokens == 3 and default.usage.total_tokens == 3


def test_sdk_dimensions_and_token_ids(oai: Server) -> None:
    c = client(oai).embeddings
    r = c.create(model="m", input=[[1, 2, 3], [4, 5]], dimensions=8)
    assert [len(d.embedding) for d in r.data] == [8, 8]
    assert r.usage.prompt_tokens == 5
    one = c.create(model="m", input=[4, 5], dimensions=8)
    assert one.data[0].embedding == r.data[1].embedding


def test_sdk_sees_the_faults(oai: Server) -> None:
    c = client(oai, timeout=2).embeddings
    with pytest.raises(openai.RateLimitError):
        c.create(model="m@rate_limit", input="x")
    with pytest.raises(openai.BadRequestError) as bad:
        c.create(model="m@reject", input="x")
    assert bad.value.code == "context_length_exceeded" and bad.value.param == "input"
    with pytest.raises(openai.AuthenticationError):
        c.create(model="m@auth", input="x")
    with pytest.raises(openai.InternalServerError) as failed:
        c.create(model="m@error", input="x")
    assert failed.value.status_code == 500
    with pytest.raises(openai.InternalServerError):
        c.create(model="m@overloaded", input="x")
    with pytest.raises(openai.APIConnectionError):
        c.create(model="m@die", input="x")
    with pytest.raises(openai.APITimeoutError):
        c.create(model="m@hang", input="x")


# -- the adapters against the stub ---------------------------------------------


def _exchange(server: Server, adapter: OpenAIAdapter | FbsAdapter, body: bytes) -> bytes:
    out = adapter.prepare_embeddings(
        Inbound(body, lambda: read_embedding_request(body), "rid-a", "")
    )
    r = httpx.post(out.url, content=out.body, headers=out.headers)
    assert r.status_code == 200, r.text
    return adapter.embeddings_answer(r.content, "rid-a", "m", max_bytes=1 << 20)


def test_the_openai_adapter_gets_the_fbs_stubs_vectors_bit_for_bit(
    oai: Server, fbs: Server
) -> None:
    body = write_embedding_request("m", texts=["a b", "c", "d e f"], dimensions=96, request_id="")
    via_openai = read_embedding_response(
        _exchange(
            oai,
            OpenAIAdapter(OpenAIConfig(name="o", url=f"{oai.url}/v1", protocol="openai")),
            body,
        )
    )
    fbs_answer = _exchange(fbs, FbsAdapter(BackendConfig(name="f", url=fbs.url)), body)
    via_fbs = read_embedding_response(fbs_answer)
    assert (via_openai.count, via_openai.dimensions, via_openai.prompt_tokens) == (3, 96, 6)
    assert via_openai.request_id == "rid-a" and via_openai.model == "m"
    assert bytes(via_openai.values) == bytes(via_fbs.values)


def test_an_openai_adapter_refuses_a_json_answer_over_its_bound(oai: Server) -> None:
    adapter = OpenAIAdapter(OpenAIConfig(name="o", url=f"{oai.url}/v1", protocol="openai"))
    body = write_embedding_request("m", texts=["x"] * 4)
    out = adapter.prepare_embeddings(Inbound(body, lambda: read_embedding_request(body), "r", ""))
    r = httpx.post(out.url, content=out.body, headers=out.headers)
    assert json.loads(r.content)["data"][0]["embedding"]  # base64 text, as asked
    with pytest.raises(ValueError, match="over 1000 bytes"):
        adapter.embeddings_answer(r.content, "r", "m", max_bytes=1000)
