"""Issue 39's ``make bench`` rows: the Bedrock (Converse, InvokeModel) and
Azure OpenAI adapters do the work their rows claim, checked by
implementations we did not write where there are some; the micro report
says each row's ratio to the adapters it is held to; the SigV4 table signs.

A row that skipped work would look fast: the Converse body is validated by
botocore's own parameter validator for ``bedrock-runtime``'s Converse, the
event-stream frames are read by botocore's event-stream parser, and every
adapt-chunk frame carries the same token as the openai adapter's.
"""

from __future__ import annotations

import os
from typing import Any

import botocore.session
import msgspec
import pytest
from botocore.eventstream import EventStreamBuffer
from botocore.validate import ParamValidator

from benchmarks.cloud_ratios import FORMATS, OPS, PREPARED, measure, prepare_costs, prepare_report
from benchmarks.cloud_ratios import report as ratio_report
from benchmarks.codecs import LABELS, load, operation
from benchmarks.codecs import azure_openai_adapter as azure
from benchmarks.codecs import bedrock_converse_adapter as converse
from benchmarks.codecs import bedrock_invoke_adapter as invoke
from benchmarks.cost_checks import sigv4_body, sigv4_checks, sigv4_report
from benchmarks.micro_report import CLOUD_REFS, CLOUD_TARGET, cloud_targets
from benchmarks.payloads import make_request
from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.request.decode import read_request

CLOUD = ("bedrock-converse-adapter", "bedrock-invoke-adapter", "azure-openai-adapter")


@pytest.fixture(scope="module")
def request_dict() -> dict[str, Any]:
    return make_request(1024, 0)


def _run(fmt: str, op: str, request: dict[str, Any]) -> Any:
    codec = load(fmt)
    return operation(codec, op)(codec.inputs(request)[op])


def test_the_converse_body_is_valid_for_botocores_service_model(
    request_dict: dict[str, Any],
) -> None:
    body = msgspec.json.decode(_run("bedrock-converse-adapter", "adapt-request", request_dict))
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    shape = model.operation_model("Converse").input_shape
    report = ParamValidator().validate({"modelId": converse.MODEL, **body}, shape)
    assert not report.has_errors(), report.generate_report()
    # All of the conversation: the system prompt on top, every turn a message
    # (the tool call and its result included), the tool offered.
    assert body["system"] and body["toolConfig"]["tools"][0]["toolSpec"]["name"]
    blocks = [b for m in body["messages"] for b in m["content"]]
    assert any("toolUse" in b for b in blocks) and any("toolResult" in b for b in blocks)
    assert body["inferenceConfig"]["maxTokens"] == request_dict["max_tokens"]


def test_the_invoke_body_is_the_anthropic_encoders_in_bedrocks_envelope(
    request_dict: dict[str, Any],
) -> None:
    ours = msgspec.json.decode(_run("bedrock-invoke-adapter", "adapt-request", request_dict))
    theirs = msgspec.json.decode(_run("anthropic-adapter", "adapt-request", request_dict))
    assert ours.pop("anthropic_version") == "bedrock-2023-05-31"
    del theirs["model"], theirs["stream"]
    assert ours == theirs


def test_the_azure_row_prepares_the_openai_body_for_a_deployment_url(
    request_dict: dict[str, Any],
) -> None:
    ours = _run("azure-openai-adapter", "adapt-request", request_dict)
    assert ours == _run("openai-adapter", "adapt-request", request_dict)
    wire = azure.inputs(request_dict)["adapt-request"]
    assert isinstance(wire, bytes)
    req = read_request(wire)
    out = azure.adapter().prepare(Inbound(b"", lambda: req, "r-1", ""))
    assert out.url == (
        "https://contoso-eastus.openai.azure.com/openai/deployments/gpt-4o-mini"
        "/chat/completions?api-version=2024-10-21"
    )
    assert ("api-key", "bench-key") in out.headers


@pytest.mark.parametrize("module", [converse, invoke])
def test_the_bedrock_frames_are_what_botocore_reads(module: Any) -> None:
    parser = EventStreamBuffer()
    parser.add_data(module.HEAD + module.EVENT)
    messages = list(parser)
    assert messages[-1].headers[":event-type"] in ("contentBlockDelta", "chunk")
    assert all(m.headers[":message-type"] == "event" for m in messages)


def test_every_adapt_chunk_frame_carries_the_same_token(request_dict: dict[str, Any]) -> None:
    reference = read_chunk(_run("openai-adapter", "adapt-chunk", request_dict))
    assert reference.content == " forecast"
    for fmt in CLOUD:
        chunk = read_chunk(_run(fmt, "adapt-chunk", request_dict))
        assert (chunk.content, chunk.finish_reason) == (" forecast", reference.finish_reason)
        # Fed again and again (as the bench does), every frame is a token's.
        assert read_chunk(_run(fmt, "adapt-chunk", request_dict)).content == " forecast", fmt


def _row(fmt: str, op: str, ns: float) -> dict[str, Any]:
    return {
        "format": fmt,
        "op": op,
        "size": "1KB",
        "prompt_bytes": 1024,
        "ns_per_op": ns,
        "allocs_per_op": 1.0,
        "bytes_per_op": 10.0,
        "gc_per_100k": 0.0,
        "gc_time_pct": 0.0,
        "input_bytes": None,
        "output_bytes": None,
        "stats": {"p99": ns},
    }


def test_the_report_holds_each_cloud_row_to_its_references() -> None:
    times = {
        "openai-adapter": 100.0,
        "anthropic-adapter": 120.0,
        "bedrock-converse-adapter": 140.0,  # 1.40x openai's: missed
        "bedrock-invoke-adapter": 130.0,  # 1.08x anthropic's: met
        "azure-openai-adapter": 110.0,  # 1.10x openai's: met
    }
    rows = [_row(f, op, ns) for f, ns in times.items() for op in ("adapt-request", "adapt-chunk")]
    lines = cloud_targets({"header": {"sizes": {"1KB": 1024}}, "rows": rows})
    assert len(lines) == 6 and CLOUD_TARGET == 1.3
    converse_line = next(x for x in lines if "(Converse), adapt-request" in x)
    assert (
        "openai adapter at 1KB 1.40x" in converse_line
        and "anthropic adapter at 1KB 1.17x" in converse_line
    )
    assert converse_line.endswith("**missed**.")
    assert next(x for x in lines if "(InvokeModel), adapt-chunk" in x).endswith(": met.")
    assert next(x for x in lines if "(Azure), adapt-request" in x).endswith(": met.")


def test_the_sigv4_table_signs_a_2_kb_converse_request_both_ways() -> None:
    assert len(sigv4_body()) == 2048
    results = sigv4_checks(calls=5, rounds=1)
    assert len(results) == 2 and all(us > 0 for us in results.values())
    assert any("awscrt" in name for name in results)
    assert any("botocore" in name and "AWSRequest" in name for name in results)
    table = sigv4_report(results)
    assert all(name in table for name in results)


def test_the_side_by_side_ratios_cover_every_cloud_row() -> None:
    best = measure(["1KB"], rounds=1)
    assert set(best) == {(f, op, "1KB") for f in FORMATS for op in OPS}
    assert all(seconds > 0 for seconds in best.values())
    text = ratio_report(best, ["1KB"])
    for fmt, refs in CLOUD_REFS.items():
        line = next(x for x in text.splitlines() if x.startswith(f"| {LABELS[fmt]} |"))
        assert all(f"{LABELS[ref]}: " in line for ref in refs)
        assert line.endswith(("| met |", "| **missed** |"))


def test_every_backends_prepare_is_measured_signed_or_keyed() -> None:
    before = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    results = prepare_costs(rounds=1, calls=5)
    assert list(results) == list(PREPARED) and all(us > 0 for us in results.values())
    # The credentials' environment was the fetch's only.
    assert {k: v for k, v in os.environ.items() if k.startswith("AWS_")} == before
    table = prepare_report(results)
    assert all(f"| {name} |" in table for name in PREPARED) and "| 1.00x |" in table
