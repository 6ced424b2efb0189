"""The OpenAI workload's cases (``benchmarks.load.cases``): rows, bodies, config, report.

Issue 23's rows on the real path: every case names rows that exist and send
their case's request to their case's stub; the stub's own canned answers, 32
and 512 tokens, whole and streamed, in both APIs, are what the spot check
reads; the flatgate config routes each case's model to its stub; the plans
keep the run in its budget; and the report's figures and target ratios are
computed from the rows as the issue defines them. Issue 39's Bedrock cases:
Converse bodies to the Bedrock stub, whose canned answers (whole and event
stream) the spot check reads, and the gateway's AWS credentials found by
botocore's chain in its environment. Issue 40's Gemini cases: generateContent
bodies (checked by google-genai's types) to the Gemini stub, whose canned
answers (whole and SSE) the spot check reads, and the gateway's gemini
backend with its key. Pure: nothing is started.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from benchmarks.load import openai_bodies as ob
from benchmarks.load import openai_workload as ow
from benchmarks.load import peers
from benchmarks.load.cases import CASES, ROLES, case_named, plans, target_records, targets
from benchmarks.load.clients import answer_text
from benchmarks.load.measure import FULL
from benchmarks.load.report_openai import render_openai, summary_table, targets_table
from benchmarks.load.results import Cell, add_comparisons, summarise
from benchmarks.load.run import _settings, write_results
from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.bedrock.stub import ConverseStreamWire, ConverseWire
from flatgate.proxy.backends.gemini.stub import GenerateWire, StreamWire
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.gateway.check import file_problems
from flatgate.proxy.transport.aws import AwsCredentials, aws_credentials
from tests.backends.gemini.helpers import validate

ROW = {r.name: r for r in ow.OPENAI_ROWS}
# The cloud cases' APIs: the body the stub's rows send.
CLOUD = {"bedrock": "converse", "gemini": "gemini"}
URLS = {name: f"http://127.0.0.1:{18001 + i}" for i, name in enumerate(ow.STUBS)}


# the cases and their rows ------------------------------------------------------


def test_every_case_has_its_rows_its_stub_and_its_columns() -> None:
    assert [c.name for c in CASES] == list(ow.OPENAI_FULL.sizes)
    assert CASES[0].name == ow.SIZE and CASES[0].fixed_rate
    for case in CASES:
        assert set(case.rows) <= set(ROW), case.name
        floor = ROW[case.floor]
        assert floor.server == case.backend and floor.hop == ()
        # No peer stands in the cloud cases (issues 39 and 40: nginx and the gateway).
        peers_too = set() if case.api in CLOUD else {"portkey"}
        assert set(case.columns) <= set(ROLES)
        assert {"nginx", "gateway", *peers_too} <= set(case.columns)
        assert case.connections == (16 if case.stream else 32)
        assert ow.STUBS[case.backend] == (case.api, case.tokens)
        assert ow.stub_model(case.backend) == case.model
        for name in case.rows:
            body = ROW[name].body
            if case.api in CLOUD:
                # The gateway takes the OpenAI request; the stub its own API's.
                own = CLOUD[case.api]
                assert body == ("openai" if ROW[name].server == "gateway" else own), name
                continue
            # The OpenAI case's conversation in the other client APIs too
            # (issue 41: as a Gemini request, the model in its path).
            other = body in ("responses", "gemini") and case.api == "openai"
            assert body == case.api or other, name
            if body == "gemini":
                assert ROW[name].path == f"/v1beta/models/{case.model}:generateContent", name
        # nginx stands in front of the case's own stub (a row of its own per stub).
        nginx = ROW[case.columns["nginx"]]
        assert nginx.hop == (nginx.server,)
    # Every (API, tokens, mode) once.
    assert len({(c.api, c.tokens, c.stream, c.cadence) for c in CASES}) == len(CASES) == 16
    # LiteLLM only where it finishes a stream within wrk's run: the 32-token OpenAI cases.
    assert {c.name for c in CASES if "litellm" in c.columns} == {
        "2KB",
        "stream-32",
        "cadence-32",
    }


def test_cadence_cases_pace_their_own_stubs_and_label_the_bursts() -> None:
    cadence = [c for c in CASES if c.cadence]
    assert {c.name for c in cadence} == {
        "cadence-32",
        "cadence-512",
        "anthropic-cadence-32",
        "anthropic-cadence-512",
    }
    for c in cadence:
        # A stub of its own in cadence mode, with its floor and nginx in front of it;
        # the gateway and the peers are the burst case's rows, sent its model.
        assert c.stream and c.backend in ow.CADENCE_STUBS
        burst = case_named(c.name.replace("cadence", "stream"))
        assert not burst.cadence and burst.backend not in ow.CADENCE_STUBS
        assert c.floor == burst.floor.replace(burst.api, f"{burst.api}-cadence", 1)
        shared = ("portkey", "litellm", "gateway")
        assert {r: c.columns.get(r) for r in shared} == {r: burst.columns.get(r) for r in shared}
        assert ROW[c.columns["nginx"]].server != ROW[burst.columns["nginx"]].server
        assert "a token every" in c.label and "burst" in burst.label
        # wrk runs at least three of its streams long.
        plan = ow.OPENAI_QUICK.plan(c.name)
        assert plan.wrk_seconds is not None
        assert plan.wrk_seconds * 1000 >= 3 * c.tokens * 2.0
    # Every stream but the cadence cases' is a burst, and says so.
    assert all("burst" in c.label for c in CASES if c.stream and not c.cadence)
    assert ow.stub_model("stub-anthropic-cadence-512") == "bench-anthropic-cadence-512"


def test_plans_shorten_the_new_cases_and_keep_the_first() -> None:
    full = ow.OPENAI_FULL
    first = full.plan("2KB")
    assert first.fixed_rate and first.wrk_seconds is None and first.connections == 32
    assert full.rounds["2KB"] == 3 and full.rates["2KB"] == 50.0
    for case in CASES[1:]:
        p = full.plan(case.name)
        # A cadence case's wrk runs three of its streams long (issue 43).
        wrk = max(2, case.least_wrk_seconds)
        assert not p.fixed_rate and p.wrk_seconds == wrk and p.unloaded_seconds == 0.5
        assert full.rounds[case.name] == 2
        assert (p.backend, p.floor, p.tokens, p.stream) == (
            case.backend,
            case.floor,
            case.tokens,
            case.stream,
        )
    assert full.budget_seconds == 780.0
    # Every row warmed up once (node's JIT starts cold); the fbs workload as it was.
    assert (full.warmup_seconds, ow.OPENAI_TINY.warmup_seconds, FULL.warmup_seconds) == (2, 0, 0)
    quick = ow.OPENAI_QUICK
    assert set(quick.rounds.values()) == {1} and quick.plan("stream-512").wrk_seconds == 1
    # The echo streams: the original rows only.
    assert full.stream_rows is not None and "gateway-anthropic" not in full.stream_rows
    assert set(full.stream_rows) == {r.name for r in ow.OPENAI_ROWS if r.stream_server}


def test_plans_take_the_seconds_given_for_the_new_cases() -> None:
    got = plans(CASES, wrk_seconds=7, unloaded_seconds=0.25)
    assert got["2KB"].wrk_seconds is None and got["whole-512"].wrk_seconds == 7
    assert got["anthropic-stream-512"].unloaded_seconds == 0.25


def _args(**kw: Any) -> Any:
    base = {"workload": "openai", "tiny": False, "quick": False, "rows": None, "sizes": None}
    return SimpleNamespace(**{**base, "without": None, "peers": False, **kw})


def test_chosen_rows_keep_the_floors_of_their_cases() -> None:
    s = _settings(_args(rows="gateway-anthropic"))
    assert set(s.rows) == {
        "direct-openai",
        "direct-anthropic",
        "direct-anthropic-512",
        "direct-anthropic-cadence",
        "direct-anthropic-cadence-512",
        "gateway-anthropic",
    }
    s = _settings(_args(rows="nginx-openai-512", sizes="stream-512"))
    assert s.sizes == ("stream-512",)
    assert set(s.rows) == {"direct-openai", "direct-openai-512", "nginx-openai-512"}


# bodies and config -------------------------------------------------------------


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_every_row_sends_its_cases_request_to_its_cases_stub(case: str) -> None:
    c = case_named(case)
    bodies = ob.Bodies(URLS, "http://127.0.0.1:18999")
    for name in c.rows:
        row = ROW[name]
        body = bodies.size(row, case)
        doc = msgspec.json.decode(body.data)
        # The Responses request is the same conversation, a little shorter.
        assert len(body.data) == ob.BODY_BYTES or row.body == "responses"
        assert body.expect == "tok " * c.tokens
        if row.body == "converse":
            # Converse: the URL names the model and says whether it streams.
            assert "model" not in doc and "stream" not in doc
            assert row.path.startswith("/model/amazon.nova-pro-v1%3A0/")
            assert row.path.endswith("/converse-stream" if c.stream else "/converse")
            assert doc["messages"][0]["content"][0]["text"] and doc["system"]
            continue
        if row.body == "gemini":
            # generateContent: the URL names the model and says whether it streams.
            validate(body.data)  # google-genai's types; no model in the body
            method = "streamGenerateContent?alt=sse" if c.stream else "generateContent"
            # At the gateway (issue 41's row), the case's model; at the stub, Gemini's.
            model = c.model if row.server == "gateway" else ow.GEMINI_MODEL
            assert row.path == f"/v1beta/models/{model}:{method}"
            assert doc["contents"][0]["parts"][0]["text"] and doc["systemInstruction"]
            assert dict(body.headers)["x-goog-api-key"] == peers.DUMMY_KEY
            continue
        assert doc["stream"] is c.stream and doc["model"] == c.model
        headers = dict(body.headers)
        if row.server == "portkey":
            assert headers["x-portkey-provider"] == c.api
            assert headers["x-portkey-custom-host"] == URLS[c.backend] + "/v1"
            assert headers["authorization"] == f"Bearer {peers.DUMMY_KEY}"
        else:
            assert "x-portkey-provider" not in headers
        if c.api == "anthropic":
            assert headers["anthropic-version"] == ob.ANTHROPIC_VERSION
            assert headers["x-api-key"] == peers.DUMMY_KEY
            assert doc["max_tokens"] > c.tokens and doc["system"]
        elif row.body == "openai":
            assert [m["role"] for m in doc["messages"]] == ["system", "user"]


def test_messages_body_is_the_same_conversation() -> None:
    chat = msgspec.json.decode(ob.chat_body())
    messages = msgspec.json.decode(ob.messages_body())
    assert len(ob.messages_body(3000, stream=True)) == 3000
    assert messages["system"] == chat["messages"][0]["content"]
    user = messages["messages"][0]["content"]
    assert chat["messages"][1]["content"].startswith(user[:500])


def test_config_routes_every_cases_model_to_its_stub(tmp_path: Path) -> None:
    ports = {name: 18001 + i for i, name in enumerate(ow.STUBS)}
    more = {k: v for k, v in ports.items() if k != "stub"}
    text = ow.config_text(ports["stub"], 18999, more)
    doc = tomllib.loads(text)
    backends = {b["name"]: (b["url"], b["protocol"]) for b in doc["backends"]}
    routes = {r["model"]: r["backends"] for r in doc["routes"]}
    providers = {m["name"]: m["provider"] for m in doc["models"]}
    for case in CASES:
        [backend] = routes[case.model]
        url, protocol = backends[backend]
        base = f"http://127.0.0.1:{ports[case.backend]}"
        assert protocol == case.api
        assert url == {"bedrock": base, "gemini": base + "/v1beta"}.get(case.api, base + "/v1")
        assert providers[case.model] == ("Anthropic" if case.api == "anthropic" else "OpenAI")
    # Bedrock through Converse, signed (no API key), in a region the url cannot name.
    [bedrock] = [b for b in doc["backends"] if b["protocol"] == "bedrock"]
    assert (bedrock["api"], bedrock["region"], bedrock["model"]) == (
        "converse",
        "us-east-1",
        ow.BEDROCK_MODEL,
    )
    assert "api_key" not in bedrock and "api_key_env" not in bedrock
    # Gemini with its key, renamed to the stub's model.
    [gemini] = [b for b in doc["backends"] if b["protocol"] == "gemini"]
    assert (gemini["api_key"], gemini["model"]) == (ow.GEMINI_KEY, ow.GEMINI_MODEL)
    path = tmp_path / "openai.toml"
    path.write_text(text)
    assert file_problems(path, environ={}, scope="all") == []


# what the spot check reads: the stub's own canned answers -----------------------


def _header(name: str) -> str | None:
    return None


@pytest.mark.parametrize("tokens", [32, 512])
@pytest.mark.parametrize("stream", [False, True])
def test_the_spot_check_reads_the_canned_stubs_answers(tokens: int, stream: bool) -> None:
    expect = "tok " * tokens
    openai = OpenAIWire().canned(tokens)(ob.chat_body(stream=stream), _header)
    assert openai.status == 200
    assert answer_text("openai", openai.body) == expect
    assert openai.body.startswith(b"data:") is stream
    anthropic = AnthropicWire().canned(tokens)(ob.messages_body(stream=stream), _header)
    assert answer_text("anthropic", anthropic.body) == expect
    assert anthropic.body.startswith(b"event:") is stream
    # A stream is one delta a token.
    if stream:
        assert openai.body.count(b'"content":"tok "') == tokens
        assert anthropic.body.count(b"content_block_delta") >= tokens


@pytest.mark.parametrize("stream", [False, True])
def test_the_spot_check_reads_the_bedrock_stubs_answers(stream: bool) -> None:
    wire = ConverseStreamWire() if stream else ConverseWire()
    answer = wire.canned(32)(ob.converse_body(), _header)
    assert answer.status == 200
    assert answer_text("converse", answer.body) == "tok " * 32
    # A stream is AWS's event stream, one contentBlockDelta a token.
    assert answer.body.startswith(b"{") is not stream
    if stream:
        assert answer.body.count(b"contentBlockDelta") == 32


@pytest.mark.parametrize("stream", [False, True])
def test_the_spot_check_reads_the_gemini_stubs_answers(stream: bool) -> None:
    wire = StreamWire() if stream else GenerateWire()
    answer = wire.canned(32)(ob.gemini_body(), _header)
    assert answer.status == 200
    assert answer_text("gemini", answer.body) == "tok " * 32
    # A stream is server-sent events, one text part a token.
    assert answer.body.startswith(b"{") is not stream
    if stream:
        assert answer.body.count(b'"text":"tok "') == 32


def test_the_gateway_finds_its_aws_credentials_in_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore's own chain, given the gateway's environment, finds the
    static keys first: nothing is looked up beyond loopback."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in ow.BEDROCK_ENV.items():
        monkeypatch.setenv(name, value)
    assert ow.BEDROCK_ENV["AWS_EC2_METADATA_DISABLED"] == "true"
    creds, expiry = aws_credentials()()
    assert creds == AwsCredentials(
        ow.BEDROCK_ENV["AWS_ACCESS_KEY_ID"], ow.BEDROCK_ENV["AWS_SECRET_ACCESS_KEY"], None
    )
    assert expiry is None


def test_answer_text_reads_responses_and_refuses_other_bodies() -> None:
    doc = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}]}
    assert answer_text("responses", msgspec.json.encode(doc)) == "hi"
    with pytest.raises(ValueError):
        answer_text("fbs", b"{}")
    with pytest.raises(ValueError):
        answer_text("openai", b"not json")


# figures and targets -----------------------------------------------------------


def _row(name: str, case: str, rps: float, hop_s: float, c1: tuple[float, float]) -> Any:
    """A row of ``case`` that served ``rps`` requests in one second, its hop
    spending ``hop_s`` CPU seconds over them, answering at c1 in ``c1[0]`` s
    (the first byte after ``c1[1]`` s)."""
    unloaded, first = c1
    c = case_named(case)
    cell = Cell(rps=[rps], requests=int(rps), unloaded=[unloaded], unloaded_first=[first])
    hop = ROW[name].hop
    cell.cpu_seconds = {c.backend: 0.01, **dict.fromkeys(hop, hop_s)}
    return summarise(ROW[name], case, cell, ob.BODY_BYTES, c.tokens)


def _rows() -> list[dict[str, Any]]:
    rows = [
        # 2KB: 32-token whole answers.
        _row("direct-openai", "2KB", 10000, 0.0, (0.0005, 0.0004)),
        _row("nginx-openai", "2KB", 9000, 0.2, (0.0006, 0.0005)),
        _row("portkey", "2KB", 1000, 1.2, (0.0015, 0.0014)),
        _row("gateway", "2KB", 4000, 1.6, (0.0009, 0.0008)),
        # 512-token whole answers.
        _row("direct-openai-512", "whole-512", 8000, 0.0, (0.0006, 0.0005)),
        _row("portkey", "whole-512", 800, 1.2, (0.002, 0.0019)),
        _row("gateway", "whole-512", 500, 1.0, (0.003, 0.0029)),
        # 32-chunk streams: the first byte counts.
        _row("direct-openai", "stream-32", 5000, 0.0, (0.001, 0.0004)),
        _row("portkey", "stream-32", 500, 1.0, (0.003, 0.0024)),
        _row("gateway", "stream-32", 2000, 1.0, (0.0015, 0.0008)),
        # 512-chunk streams: per token.
        _row("direct-openai-512", "stream-512", 1000, 0.0, (0.002, 0.0004)),
        _row("portkey", "stream-512", 100, 0.512, (0.02, 0.001)),
        _row("gateway", "stream-512", 200, 0.512, (0.01, 0.0009)),
    ]
    for case in ("2KB", "whole-512", "stream-32", "stream-512"):
        add_comparisons([r for r in rows if r["size"] == case], case_named(case).floor)
    return rows


def test_rows_carry_cpu_per_token_and_the_added_first_byte() -> None:
    rows = _rows()
    gateway = next(r for r in rows if (r["row"], r["size"]) == ("gateway", "stream-512"))
    # 0.512 s over 200 streams of 512 tokens: 2,560 µs a stream, 5 µs a token.
    assert gateway["hop_cpu_us_per_req"] == pytest.approx(2560.0)
    assert gateway["hop_cpu_us_per_token"] == pytest.approx(5.0)
    assert gateway["unloaded_added_p50_ms"] == pytest.approx(8.0)
    assert gateway["unloaded_added_first_byte_p50_ms"] == pytest.approx(0.5)
    # The stub's CPU is read but not the hop's.
    assert set(gateway["cpu_us_per_req"]) == {"gateway", "stub-512"}


def test_targets_are_the_issues_ratios() -> None:
    got = {t.name: t for t in targets(_rows())}
    values = {name: t.value for name, t in got.items()}
    # gateway 1.0 s / 500 = 2,000 µs; Portkey 1.2 s / 800 = 1,500 µs.
    cpu512 = "512-token whole answer: gateway CPU per request / Portkey's"
    assert values[cpu512] == pytest.approx(2000 / 1500)
    assert got[cpu512].met is False and got[cpu512].bound == 0.5
    # against its own 32-token whole answer: 1.6 s / 4,000 = 400 µs.
    own = "512-token whole answer: gateway CPU per request / its own 32-token whole answer's"
    assert values[own] == pytest.approx(5.0)
    rps = "32-token whole answer: gateway req/s / Portkey's"
    assert values[rps] == pytest.approx(4.0) and got[rps].met is False and not got[rps].at_most
    nginx = "32-token whole answer: gateway CPU per request / nginx's"
    assert values[nginx] == pytest.approx(400 / (0.2 / 9000 * 1e6))
    token = "512-chunk stream: gateway CPU per token / Portkey's"
    assert values[token] == pytest.approx(5.0 / 10.0)
    added = "32-token whole answer: unloaded added p50 at c1, gateway / Portkey"
    assert values[added] == pytest.approx(0.4 / 1.0) and got[added].met is True
    first = "32-chunk stream: unloaded added p50 to the first byte at c1, gateway / Portkey"
    assert values[first] == pytest.approx(0.4 / 2.0)
    # Without Portkey's rows (the peers not asked for): no figure, not a miss.
    bare = [r for r in _rows() if r["row"] != "portkey"]
    assert all(t.met is None for t in targets(bare) if "Portkey" in t.name)
    # The anthropic cases did not run: nothing to compare.
    assert all(t.value is None for t in targets(_rows(), "anthropic"))


def test_the_result_document_keeps_the_targets(tmp_path: Path) -> None:
    doc = {**ow.header(ow.OPENAI_TINY), "rows": _rows(), "streaming": [], "elapsed_seconds": 1}
    records = target_records(doc["rows"])
    assert len(records) == 14 and {r["adapter"] for r in records} == {"openai", "anthropic"}
    token = next(r for r in records if r["adapter"] == "openai" and "per token" in r["name"])
    assert token["ratio"] == pytest.approx(0.5) and token["met"] is False
    assert token["inputs"] == {
        "stream-512 gateway hop_cpu_us_per_token": pytest.approx(5.0),
        "stream-512 portkey hop_cpu_us_per_token": pytest.approx(10.0),
    }
    write_results(doc, tmp_path, plot=False, name="load-openai")
    written = json.loads((tmp_path / "load-openai.json").read_text())
    assert written["targets"] == json.loads(json.dumps(records))


def test_report_has_the_issues_table_and_targets() -> None:
    doc = {**ow.header(ow.OPENAI_TINY), "rows": _rows(), "streaming": [], "elapsed_seconds": 1}
    table = summary_table(doc)
    line = next(x for x in table if x.startswith("| Chat Completions, 2 KB request, 32-token"))
    # nginx, vllm-router (not run), Portkey, LiteLLM (not run), gateway, then gateway
    # vs. Portkey, vs. vllm-router and vs. nginx.
    assert line.endswith("req/s | 9,000 | - | 1,000 | - | 4,000 | 4.00x | - | 0.44x |")
    token = next(x for x in table if "512-chunk stream" in x and "per token" in x)
    assert "| 10.00 | - | 5.00 | 0.50x |" in token
    first = next(x for x in table if "32-chunk stream" in x and "first byte" in x)
    assert "| +2.00 | - | +0.40 | 0.20x |" in first
    # An added latency at or below zero has no ratio.
    nginx_first = next(x for x in table if "2 KB request, 32-token" in x and "c1" in x)
    assert "| +0.10 | - | +1.00 | - | +0.40 | 0.40x | - | 4.00x |" in nginx_first
    text = "\n".join(targets_table(doc))
    assert "| 512-chunk stream: gateway CPU per token / Portkey's | openai | 0.50x |" in text
    assert "**missed**" in text and "| met |" in text and "no figure" in text
    md = render_openai(doc)
    assert "## The real path, side by side" in md and "## Targets (issue 23)" in md
    assert "## Chat Completions, 2 KB request, 512-chunk stream in one burst, c16" in md
    assert "no fixed rate; 16 connections" in md
