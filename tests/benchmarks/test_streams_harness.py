"""Workload A's harness (``benchmarks.streams``): its checks, figures and outputs.

The pure pieces are tested directly: the request every stream sends, the
config, how frames and events are classified and a stream judged, the
summaries and the report. The harness itself runs a few seconds
with 50 connections on the direct and proxy rows, in a subprocess: the
accounting must add up and every output must be written (figures are not
asserted); a row whose tool is missing is skipped with the reason.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchmarks.harness.sampling import GcSample
from benchmarks.harness.servers import ServerGroup
from benchmarks.streams.client import (
    BAD,
    DONE,
    FINAL,
    SKIP,
    TOKEN,
    USAGE,
    Record,
    _Check,
    _classify_event,
    _classify_frame,
    _Memo,
)
from benchmarks.streams.command import main, parser
from benchmarks.streams.report import plot, render_markdown, summary_table
from benchmarks.streams.results import RowRun, add_comparisons, percentiles, summarise
from benchmarks.streams.rows import ROWS, Timing, call_for, config_text, request_json, start_row
from benchmarks.streams.run import FULL, settings_of
from benchmarks.streams.sampler import Sample
from flatgate.proxy.service.settings import config_problems
from flatgate.proxy.stub import parse_request
from flatgate.proxy.stub.settings import stub_problems
from flatgate.proxy.wire.chunk.frames import ChunkError, Usage
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.schema import FinishReason
from tests.benchmarks.runs import run_bench

PNG = b"\x89PNG\r\n\x1a\n"
ROW = {r.name: r for r in ROWS}
T = Timing()


def test_request_has_the_prompt_and_asks_for_the_tokens() -> None:
    doc = request_json(T)
    words = sum(len(m["content"].split()) for m in doc["messages"])
    assert words == T.prompt_tokens == 400
    assert (doc["max_tokens"], doc["stream"]) == (T.tokens, True)
    fbs = call_for(ROW["proxy"], 1234, T)
    head, _, body = fbs.request.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/completions HTTP/1.1\r\n")
    assert b"accept: application/x-flatbuffers-stream" in head
    assert f"content-length: {len(body)}".encode() in head
    req = parse_request(body)
    assert (req.prompt_tokens, req.max_tokens, req.stream) == (400, 128, True)
    chat = call_for(ROW["edge+proxy"], 1234, T)
    head, _, body = chat.request.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert msgspec.json.decode(body)["stream_options"] == {"include_usage": True}


def test_config_is_the_default_but_for_the_addresses() -> None:
    import tomllib

    doc = tomllib.loads(config_text(9001, 9002, T))
    assert config_problems(doc) == []
    assert stub_problems(doc) == []
    assert set(doc) == {"stub", "backends", "routes", "edge", "models"}
    assert doc["stub"]["cadence"] is True and set(doc["edge"]) == {"proxy_url"}


def _frame(**kw: Any) -> bytes:
    return write_chunk(**kw)


def test_frames_are_classified() -> None:
    assert _classify_frame(_frame(content="tok "), "tok ") == (TOKEN, 1)
    assert _classify_frame(_frame(content="tok tok tok "), "tok ") == (TOKEN, 3)
    assert _classify_frame(_frame(content=""), "tok ") == (SKIP, 0)
    assert _classify_frame(_frame(content="other"), "tok ") == (BAD, 0)
    assert _classify_frame(_frame(content="tok to"), "tok ") == (BAD, 0)
    final = _frame(finish_reason=FinishReason.STOP, usage=Usage(400, 128))
    assert _classify_frame(final, "tok ") == (FINAL, 128)
    assert _classify_frame(_frame(finish_reason=FinishReason.STOP), "tok ")[0] == BAD
    err = _frame(error=ChunkError("x", "y"), finish_reason=FinishReason.ERROR)
    assert _classify_frame(err, "tok ")[0] == BAD
    assert _classify_frame(b"\x04\x00\x00\x00junk", "tok ")[0] == BAD


def _event(doc: object) -> bytes:
    return b"data: " + msgspec.json.encode(doc)


def test_events_are_classified() -> None:
    delta = {"choices": [{"delta": {"content": "tok "}, "finish_reason": None}]}
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    finish = {"choices": [{"delta": {}, "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"completion_tokens": 128}}
    assert _classify_event(_event(delta), "tok ") == (TOKEN, 1)
    # The tokens of one read, as one delta (a gateway coalesces them).
    joined = {"choices": [{"delta": {"content": "tok tok "}, "finish_reason": None}]}
    assert _classify_event(_event(joined), "tok ") == (TOKEN, 2)
    assert _classify_event(_event(role), "tok ") == (SKIP, 0)
    assert _classify_event(_event(finish), "tok ") == (FINAL, 0)
    assert _classify_event(_event(usage), "tok ") == (USAGE, 128)
    assert _classify_event(b"data: [DONE]", "tok ") == (DONE, 0)
    assert _classify_event(b": keep-alive", "tok ") == (SKIP, 0)
    assert _classify_event(_event({"error": {"message": "x"}}), "tok ")[0] == BAD
    assert _classify_event(b"data: {nope", "tok ")[0] == BAD


def _fbs_stream(tokens: int, usage: int) -> bytes:
    final = _frame(finish_reason=FinishReason.STOP, usage=Usage(0, usage))
    return _frame(content="tok ") * tokens + final


def _judge(data: bytes, pieces: int = 7, want: int = 3) -> str:
    check = _Check(_Memo("tok ", _classify_frame), want)
    for i in range(0, len(data), pieces):  # cut anywhere, as the socket does
        check.feed_frames(data[i : i + pieces])
    return check.verdict()


def test_a_stream_is_judged_whole() -> None:
    assert _judge(_fbs_stream(3, 3)) == ""
    assert _judge(_fbs_stream(3, 3), pieces=1000) == ""
    assert _judge(_fbs_stream(2, 2)) == "bad_content"  # too few tokens
    assert _judge(_fbs_stream(3, 4)) == "bad_content"  # usage disagrees
    assert _judge(_frame(content="tok ") * 3) == "truncated"
    assert _judge(_fbs_stream(3, 3) + _frame(content="tok ")) == "bad_content"
    assert _judge(_fbs_stream(3, 3)[:-3]) == "bad_content"  # a frame cut short
    final = _frame(finish_reason=FinishReason.STOP, usage=Usage(0, 3))
    joined = _frame(content="tok tok ") + _frame(content="tok ") + final
    assert _judge(joined) == ""  # the tokens of one read in one frame count each
    assert _judge(_frame(content="tok tok tok tok ") + final) == "bad_content"
    events = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        *[{"choices": [{"delta": {"content": "tok "}, "finish_reason": None}]}] * 3,
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"completion_tokens": 3}},
    ]
    sse = b"".join(_event(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    check = _Check(_Memo("tok ", _classify_event), 3)
    for i in range(0, len(sse), 5):
        check.feed_events(sse[i : i + 5])
    assert check.verdict() == ""
    check = _Check(_Memo("tok ", _classify_event), 3)
    check.feed_events(sse[: sse.index(b"data: [DONE]")])
    assert check.verdict() == "truncated"


def _sample(t: float, mark: str, tokens: int, finished: int, cpu: float) -> Sample:
    """The proxy's GC collections run at twice its CPU seconds, its pauses a
    thousandth of that."""
    gc = GcSample((2 * cpu, 0.0, 0.0), (2 * cpu / 1000, 0.0, 0.0))
    rss = {"proxy": 51200}
    return Sample(t, mark, tokens, finished, cpu / 2, {"proxy": cpu}, rss, {"proxy": gc})


def _run(row: str, extra_ms: float) -> RowRun:
    base = 1.882 + extra_ms / 1000
    records = [Record(1.0 + i / 100, 0.1, base + i / 1e5, "", True) for i in range(100)]
    records += [Record(2.0, math.nan, 0.5, "closed", True), Record(0.1, 0.1, 1.9, "", False)]
    samples = [
        _sample(0.0, "", 0, 0, 0.0),
        _sample(1.0, "from", 100, 10, 1.0),
        _sample(1.0, "", 100, 10, 1.0),
        _sample(2.0, "", 1000, 50, 1.5),
        _sample(3.0, "to", 2100, 110, 2.0),
        _sample(3.0, "end", 2100, 110, 2.0),
    ]
    return RowRun(row, 1, records, samples, {"proxy": 60000}, {"cadence": {"late_ticks": 2}}, 0.0)


def test_summaries_comparisons_and_report(tmp_path: Path) -> None:
    rows = [summarise("direct", "", [_run("direct", 0)]), summarise("proxy", "", [_run("p", 5)])]
    rows.append({"row": "nginx", "status": "skipped", "reason": "nginx is not installed"})
    add_comparisons(rows)
    direct, proxy = rows[0], rows[1]
    assert (proxy["streams"], proxy["streams_ok"], proxy["errors"]) == (101, 100, 1)
    assert proxy["errors_by_kind"] == {"closed": 1}
    assert proxy["tokens_relayed"] == 2000 and proxy["streams_finished_in_window"] == 100
    (p,) = proxy["processes"]
    assert p["cpu_us_per_token"] == pytest.approx(500.0)
    assert p["gc_collections_per_1k_streams"] == pytest.approx(20.0)
    assert p["peak_rss_mib"] == pytest.approx(58.6, abs=0.1)
    assert proxy["added_duration_ms"]["p50"] == pytest.approx(5.0, abs=0.01)
    assert direct["added_duration_ms"]["p50"] == 0.0
    assert proxy["stub_late_ticks"] == 2
    # per second (0-1, 1-2, 2-3): the streams that ended in it
    assert [pt["streams"] for pt in proxy["series"]] == [0, 0, 13]
    doc = {
        "date": "d",
        "cpu": "c",
        "cores": 2,
        "python": "p",
        "revision": "r",
        "versions": {},
        "mode": "quick",
        "settings": {
            "connections": 50,
            "warmup": 1.0,
            "seconds": 2.0,
            "rounds": 1,
            "timing": {"ttft_ms": 90.0, "itl_ms": 14.0, "tokens": 128, "prompt_tokens": 400},
        },
        "method": "m",
        "rows": rows,
    }
    md = render_markdown(doc)
    for name in ("direct", "proxy", "nginx"):
        assert f"| {name} " in md
    assert "skipped" in md and "closed 1" in md
    assert len(summary_table(doc)) == 5
    plot(doc, tmp_path / "streams.png")
    assert (tmp_path / "streams.png").read_bytes()[:8] == PNG


def test_percentiles_nearest_rank() -> None:
    got = percentiles([i / 1000 for i in range(1, 1001)])
    assert got == {"p50": 500.0, "p99": 990.0, "p99.9": 999.0, "max": 1000.0}
    assert percentiles([])["p50"] is None


def test_settings_from_the_command_line() -> None:
    assert settings_of(_args()) == FULL
    s = settings_of(_args("--quick", "--rows", "proxy"))
    assert s.mode == "quick" and s.rows == ("direct", "proxy")
    assert settings_of(_args("--connections", "10")).mode == "custom"
    s = settings_of(_args("--tokens", "32"))
    assert s.timing.tokens == 32 and s.mode == "custom"
    with pytest.raises(SystemExit):
        settings_of(_args("--tokens", "0"))
    with pytest.raises(SystemExit):
        settings_of(_args("--rows", "nope"))
    with pytest.raises(SystemExit):
        main(["--connections", "0", "--out", "/nonexistent"])


def _args(*argv: str) -> Any:
    return parser().parse_args(argv)


def test_a_row_without_its_tool_is_skipped_before_anything_starts(tmp_path: Path) -> None:
    group = ServerGroup(tmp_path)
    port, why = start_row(
        group, ROW["nginx"], T, connections=10, backpressure=None, without=("nginx",)
    )
    assert port == 0 and why is not None and "nginx" in why
    assert group.servers == {}


# the harness, for real ------------------------------------------------------------


@pytest.mark.integration
def test_quick_run_accounts_for_every_stream(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["benchmarks.streams", "--quick", "--connections", "50"]
    argv += ["--seconds", "0.5", "--warmup", "0.25", "--tokens", "32", "--rows", "direct,proxy"]
    argv += ["--out", str(out)]
    done = run_bench(tmp_path, *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "streams.json").read_text())
    assert doc["mode"] == "quick" and doc["settings"]["connections"] == 50
    assert doc["settings"]["timing"]["tokens"] == 32
    rows = {r["row"]: r for r in doc["rows"]}
    assert set(rows) == {"direct", "proxy"}
    for r in rows.values():
        if r["status"] == "skipped":
            assert r["reason"]
            continue
        assert r["streams"] > 0
        assert r["streams"] == r["streams_ok"] + r["errors"]
        assert r["errors"] == sum(r["errors_by_kind"].values())
        assert r["tokens_relayed"] > 0 and r["duration_ms"]["p50"] is not None
        assert {p["process"] for p in r["processes"]} >= {"stub"}
        assert r["client"]["cpu_seconds"] is not None and r["series"]
    assert rows["direct"]["status"] == "ok"
    if rows["proxy"]["status"] == "ok":
        assert "added_duration_ms" in rows["proxy"]
        assert {p["process"] for p in rows["proxy"]["processes"]} == {"proxy", "stub"}
    md = (out / "streams.md").read_text()
    assert "| direct " in md and "| proxy " in md
    assert (out / "streams.png").read_bytes()[:8] == PNG
